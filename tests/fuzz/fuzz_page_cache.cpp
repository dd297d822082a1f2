// The cache tier as read back from its store: a previous run (or a damaged
// disk, or another program) left an index file and a pages file, and an
// HttpSource opens the URL over them. The index is trusted only as far as it
// is well-formed and self-consistent; the pages only as far as the store
// still has them.
//
// Input: flags (u8), the pages file's length (u32), three reads (offset and
// length, u32 each), then the index file's bytes. The pages file holds the
// served file's own bytes, so every read, whether it comes from the store or
// from the server, must give the file's bytes at the offset asked, or an
// Error. Flags: bit 0, the server still has the version the index names
// (its size, ETag and Last-Modified) rather than another one; bit 1, two
// requests in flight (a request pool, with readahead) instead of one.
//
// CacheIndex::parse itself must accept only what it can write again:
// serialize() of what it read reads back the same.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "io/http/page_cache.h"
#include "sipllm/http_source.h"

using namespace sipllm;

namespace {

bool same(const CacheIndex& a, const CacheIndex& b) {
  return a.url == b.url && a.file.size == b.file.size && a.file.etag == b.file.etag &&
         a.file.last_modified == b.file.last_modified && a.page_bytes == b.page_bytes && a.pages == b.pages &&
         a.ranges == b.ranges;
}

void check_index(const CacheIndex& index, const std::string& what) {
  SIPLLM_FUZZ_CHECK(index.page_bytes > 0 && index.file.size > 0, what + ": an index without pages or bytes");
  const uint64_t count = index.file.size / index.page_bytes + (index.file.size % index.page_bytes != 0);
  SIPLLM_FUZZ_CHECK(index.page_count() == count, what + ": an index whose page count does not cover the file");
  SIPLLM_FUZZ_CHECK(index.cached_bytes() <= index.file.size, what + ": more bytes cached than the file has");
  const std::optional<CacheIndex> again = CacheIndex::parse(index.serialize());
  SIPLLM_FUZZ_CHECK(again && same(*again, index), what + ": an index that does not read back as written");
}

bool usable_url(const std::string& url) {
  if (url.empty()) return false;
  for (unsigned char c : url) {
    if (c <= ' ' || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  const uint8_t flags = in.u8();
  const uint32_t pages_length = in.u32() % (1u << 20);
  std::vector<fuzz::ReadRequest> reads;
  for (int i = 0; i < 3; ++i) reads.push_back({in.u32(), in.u32() % (64u << 10)});
  const std::string index_text = in.rest();

  const std::optional<CacheIndex> parsed = CacheIndex::parse(index_text);
  if (parsed) check_index(*parsed, "CacheIndex::parse");
  const std::string url = parsed && usable_url(parsed->url) ? parsed->url : "http://fuzz.invalid/model.gguf";

  auto store = std::make_shared<fuzz::MemoryStore>();
  store->put(cache_index_name(url), index_text);
  std::string pages(pages_length, '\0');
  fuzz::fill_pattern(0, reinterpret_cast<uint8_t*>(pages.data()), pages.size());
  store->put(cache_pages_name(url), std::move(pages));

  for (const CachedModel& model : list_cached_models(*store)) {
    SIPLLM_FUZZ_CHECK(model.cached_bytes <= model.size, "a cached model with more bytes than it has");
  }

  const bool same_version = (flags & 1) != 0 && parsed;
  auto transport = same_version
                       ? std::make_shared<fuzz::PatternTransport>(parsed->file.size, parsed->file.etag,
                                                                  parsed->file.last_modified)
                       : std::make_shared<fuzz::PatternTransport>(65536, "\"other\"", "");
  HttpSourceOptions options;
  options.cache = store;
  options.page_bytes = 4096;
  options.max_retries = 0;
  options.backoff_ms = 0;
  options.parallel_requests = (flags & 2) != 0 ? 2 : 1;

  fuzz::accepts([&] {
    std::unique_ptr<HttpSource> source = open_http_source(url, transport, options);
    fuzz::check_reads(*source, reads);
  });

  // Whatever the source left in the store reads back as a valid index.
  if (std::optional<CacheIndex> left = load_cache_index(*store, url)) check_index(*left, "the index left behind");
  return 0;
}
