// Streaming a model over HTTP range requests, with a persistent cache tier.
//
// All range logic lives in the engine, in one place: planning reads into
// requests, validating every response (206, Content-Range, total size, ETag),
// retrying with backoff, and keeping the cache's bookkeeping. Only the
// transport (how one blocking range GET is made) and the cache store (where
// cached bytes persist) differ between a native build (libcurl, a directory),
// a browser (fetch, or XHR in the single-thread build; OPFS) and Node (fetch;
// a directory).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sipllm/weight_source.h"

namespace sipllm {

// How the header of a GGUF file is read: the first request asks for this
// much (a header of up to 1 MiB, vocabularies of up to ~50k tokens, arrives
// with the size and validators in one request); while the header goes on
// past what has come, what is asked for doubles, up to this. The package's
// early fetch reads the header as the engine would (bridge.generated.ts).
constexpr uint64_t kHttpFirstRangeBytes = 1u << 20;
constexpr uint64_t kHttpMaxHeadBytes = 64u << 20;

// What kind of failure a transfer's `error` is, where the transport can tell
// more than its message says: the source retries a stall, not a redirect loop.
enum class HttpFailure {
  kNone,              // completed, or failed for another reason (refused, reset, closed early, ...)
  kStalled,           // no byte arrived for the read timeout: the transport gave up
  kTooManyRedirects,  // the redirect limit was reached (a redirect loop)
  kAborted,           // abandoned by HttpTransport::abort (the model is being closed)
};

// What came back for one range request.
struct HttpRangeResponse {
  int status = 0;             // HTTP status of the final response (after redirects); 0 when none arrived
  std::string error;          // why the transfer failed (refused, reset, closed early, ...); "" when it completed
  HttpFailure failure = HttpFailure::kNone;
  std::string content_range;  // the Content-Range header, "" when absent or not exposed
  std::string etag;           // the ETag header, "" when absent
  std::string last_modified;  // the Last-Modified header, "" when absent
  std::string retry_after;    // the Retry-After header (seconds or an HTTP date), "" when absent
  // Length of the body: the bytes received, or, when the body is longer than
  // `length` and the transport stopped reading it, the declared Content-Length
  // (any value above `length` when none was declared).
  uint64_t body_bytes = 0;
};

// Makes one blocking GET of `url` with "Range: bytes=offset-(offset+length-1)",
// following redirects. Copies at most `length` bytes of a 200 or 206 body to
// `dst` (never more) and reports the body length in body_bytes; it need not
// read a body past `length` bytes (a server that ignored the Range). A body
// that ends before its declared length is a failure: report it in `error`
// with the status and the bytes received. When no byte (of the answer's
// headers or body) arrives for `read_timeout_ms`, it gives up and reports
// failure kStalled; a slow transfer that keeps moving is never cut, however
// long it takes. Never throws for HTTP or network failures: it reports them,
// and the caller validates, retries and explains. Must allow calls from
// several threads at once, except in a build without threads, where the
// caller makes one call at a time.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual HttpRangeResponse get_range(const std::string& url, uint64_t offset, uint64_t length,
                                      uint8_t* dst, double read_timeout_ms) = 0;
  // Makes every call in progress return soon, and every later one at once,
  // with failure kAborted (never retried). For a transport whose calls wait
  // on a thread that closing the model must not wait for (the WebAssembly
  // build's fetch() on the main runtime thread); the others need not.
  virtual void abort() {}
};

// Persistent bytes, by name: the cache tier. Names are plain file names
// ([A-Za-z0-9._-]). A file may be written at any offset (holes read as
// unspecified bytes and are never read). Must allow calls from several
// threads at once, on different names and on different ranges of one name.
class CacheStore {
 public:
  virtual ~CacheStore() = default;
  // Copies `length` bytes at `offset` of `name`; false when absent or short.
  virtual bool read(const std::string& name, uint64_t offset, void* dst, size_t length) = 0;
  // Writes bytes at `offset` of `name`, creating it; never truncates. Throws
  // (an Error(kIo) naming the file, for a full disk or a browser quota) when
  // it cannot: the caller then streams on without caching rather than failing.
  virtual void write(const std::string& name, uint64_t offset, const void* src, size_t length) = 0;
  virtual std::vector<std::pair<std::string, uint64_t>> list() = 0;  // names and sizes
  virtual void remove(const std::string& name) = 0;                  // absent: no-op
};

struct HttpSourceOptions {
  // Null: no persistent cache. Otherwise fetched bytes are stored in pages of
  // `page_bytes` with an index of the pages present, per URL; a later open of
  // the same URL uses the index without any request, and reads the pages it
  // has from the store instead of the network.
  std::shared_ptr<CacheStore> cache;
  uint64_t page_bytes = 1u << 20;  // for new cache entries; an entry keeps its own
  // Per request, on network errors, stalls, short bodies, 5xx and 429.
  int max_retries = 4;
  double backoff_ms = 100;         // first retry delay; doubles each time (up to 30 s)
  // A 429 or 503 with Retry-After waits what the server asks instead of the
  // backoff, up to this; a server asking for longer fails the request at
  // once, with an error naming the wait asked for.
  double max_retry_after_ms = 30'000;
  // No byte for this long fails the attempt (it is retried like a dropped
  // connection): a stalled server ends in an error naming the wait, never a hang.
  double read_timeout_ms = 30'000;
  // Requests in flight: a large read is split into up to this many ranges,
  // made on a pool of parallel_requests - 1 threads owned by the source plus
  // the reading thread; with a cache, sequential reads also fetch the next
  // pages ahead on that pool. 1: every request on the reading thread, no
  // threads at all (the single-thread WebAssembly build).
  int parallel_requests = 4;
  // A server that ignores Range and answers 200 with the whole file: false
  // makes that an error; true keeps the whole file in memory and serves from it.
  bool allow_whole_file = false;
  // The most that whole file may take: a larger one is refused
  // (kOutOfBudget) before any of it is allocated. Clients pass the engine's
  // memory budget (LoaderOptions::memory_budget), so that a server stating a
  // size the machine cannot hold fails with an error, not an allocation.
  uint64_t whole_file_budget = std::numeric_limits<uint64_t>::max();
  // Called as bytes arrive: cumulative bytes from the network and from the
  // cache, out of the file's total. Called from whichever thread made the
  // read, one call at a time. Bytes fetched again (a model streamed on every
  // pass because it exceeds the memory budget and no cache holds it) count again.
  std::function<void(uint64_t fetched, uint64_t from_cache, uint64_t total)> on_progress;
};

// What an HTTP source has done so far.
struct HttpSourceStats {
  uint64_t requests = 0;          // range requests made (retries included)
  uint64_t retries = 0;
  uint64_t bytes_fetched = 0;     // body bytes used from the network
  uint64_t bytes_from_cache = 0;  // bytes read from the cache store
  bool opened_from_cache = false; // the open used the cache's record: no request
  bool whole_file = false;        // serving a whole-file download from memory
  bool caching = false;           // fetched pages are being stored
  std::string cache_error;        // why caching stopped (a write failed) or never started (a file too
                                  // large for the cache), "" if neither
};

class HttpSource : public WeightSource {
 public:
  virtual HttpSourceStats stats() const = 0;
};

// Opens `url`: asks for the first 1 MiB (learning the total size, ETag and
// Last-Modified from Content-Range; a GGUF header within it needs no other
// request), or uses the cache's record of this URL without any request.
// Throws Error(kNetwork) naming the URL, the byte range and what went wrong.
//
// Every later response is checked against what was asked and what is known:
// a 206 whose Content-Range has the asked start and end and the known total,
// a body of exactly that length, the same ETag (or, without ETags, the same
// Last-Modified). A change is an error naming both values, and deletes the
// stale cache entry. Network errors, stalls, short bodies, 5xx and 429 are
// retried with backoff (or after the server's Retry-After); other 4xx, a
// redirect loop and a response that contradicts the request are not. Bytes
// of a response that failed a check are never stored in the cache. A model
// opened from the cache is trusted as stored:
// a change on the server shows only when a missing page is fetched, so a
// complete entry keeps serving the version it holds until it is deleted.
std::unique_ptr<HttpSource> open_http_source(const std::string& url,
                                             std::shared_ptr<HttpTransport> transport,
                                             const HttpSourceOptions& options = {});

// A model in the cache: its URL, total size and how much of it is stored.
struct CachedModel {
  std::string url;
  uint64_t size = 0;
  uint64_t cached_bytes = 0;
  std::string etag;
  std::string last_modified;
};
std::vector<CachedModel> list_cached_models(CacheStore& store);
// Removes the model's pages and index; nothing happens when it is not cached.
void delete_cached_model(CacheStore& store, const std::string& url);

// Native building blocks (not in the WebAssembly build).
// libcurl: http and https only, up to 10 redirects followed, connections reused.
std::shared_ptr<HttpTransport> make_curl_transport();
// Files in `directory`, created when missing (throws Error(kIo) if it cannot be).
std::shared_ptr<CacheStore> make_directory_cache(const std::string& directory);

}  // namespace sipllm
