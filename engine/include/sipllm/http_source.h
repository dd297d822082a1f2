// Streaming a model over HTTP range requests, with a persistent cache tier.
//
// All range logic lives in the engine, in one place: planning reads into
// requests, validating every response (206, Content-Range, total size, ETag),
// retrying with backoff, and keeping the cache's bookkeeping. Only the
// transport (how one blocking range GET is made) and the cache store (where
// cached bytes persist) differ between a native build (libcurl, a directory),
// a browser (XHR, OPFS) and Node (fetch on a helper thread, a directory).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sipllm/weight_source.h"

namespace sipllm {

// What came back for one range request.
struct HttpRangeResponse {
  int status = 0;             // HTTP status; 0 when no response arrived
  std::string error;          // why no response arrived (connection refused, reset, ...)
  std::string content_range;  // the Content-Range header, "" when absent or not exposed
  std::string etag;           // the ETag header, "" when absent
  std::string last_modified;  // the Last-Modified header, "" when absent
  uint64_t body_bytes = 0;    // length of the body the server sent (may exceed what was asked)
};

// Makes one blocking GET of `url` with "Range: bytes=offset-(offset+length-1)",
// following redirects. Copies at most `length` bytes of the body to `dst` and
// reports the full body length in body_bytes. Must allow calls from several
// threads at once. Never throws for HTTP or network failures: it reports them.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual HttpRangeResponse get_range(const std::string& url, uint64_t offset, uint64_t length,
                                      uint8_t* dst) = 0;
};

// Persistent bytes, by name: the cache tier. Names are plain file names
// ([A-Za-z0-9._-]). Must allow calls from several threads at once.
class CacheStore {
 public:
  virtual ~CacheStore() = default;
  // Copies `length` bytes at `offset` of `name`; false when absent or short.
  virtual bool read(const std::string& name, uint64_t offset, void* dst, size_t length) = 0;
  // Writes bytes at `offset` of `name`, creating it. Throws Error(kIo) when
  // it cannot (a full disk, a browser quota): the caller then streams on
  // without caching rather than failing.
  virtual void write(const std::string& name, uint64_t offset, const void* src, size_t length) = 0;
  virtual std::vector<std::pair<std::string, uint64_t>> list() = 0;  // names and sizes
  virtual void remove(const std::string& name) = 0;
};

struct HttpSourceOptions {
  std::shared_ptr<CacheStore> cache;  // null: no persistent cache
  int max_retries = 4;                // per request, on network errors and 5xx
  double backoff_ms = 100;            // first retry delay; doubles each time
  int parallel_requests = 4;          // ranges in flight for one large read (1: no threads)
  // A server that ignores Range and answers 200 with the whole file: false
  // makes that an error; true keeps the whole file in memory and serves from it.
  bool allow_whole_file = false;
  // Called as bytes arrive: from the network or the cache, out of the total.
  std::function<void(uint64_t fetched, uint64_t from_cache, uint64_t total)> on_progress;
};

// Opens `url`: asks for the first bytes (learning the total size and ETag
// from Content-Range), or uses the cache's record of this URL without any
// request. Throws Error(kNetwork) naming the URL and what went wrong.
std::unique_ptr<WeightSource> open_http_source(const std::string& url,
                                               std::shared_ptr<HttpTransport> transport,
                                               const HttpSourceOptions& options = {});

// A model in the cache: its URL, total size and how much of it is stored.
struct CachedModel {
  std::string url;
  uint64_t size = 0;
  uint64_t cached_bytes = 0;
  std::string etag;
};
std::vector<CachedModel> list_cached_models(CacheStore& store);
void delete_cached_model(CacheStore& store, const std::string& url);

// Native building blocks (not in the WebAssembly build).
std::shared_ptr<HttpTransport> make_curl_transport();
std::shared_ptr<CacheStore> make_directory_cache(const std::string& directory);

}  // namespace sipllm
