// The cache tier against damaged or hostile records, in memory: an index
// whose numbers overflow, a pages file that lost its tail, a server that
// states an absurd file size. (The fuzz target tests/fuzz/fuzz_page_cache.cpp
// found these; http_source_test.cpp tests the cache against a real server.)
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io/http/page_cache.h"
#include "sipllm/http_source.h"

namespace sipllm {
namespace {

constexpr uint64_t kPage = 4096;

uint8_t file_byte(uint64_t offset) { return static_cast<uint8_t>((offset * 2654435761u) >> 7); }

std::string file_bytes(uint64_t offset, uint64_t length) {
  std::string s(length, '\0');
  for (uint64_t i = 0; i < length; ++i) s[i] = static_cast<char>(file_byte(offset + i));
  return s;
}

// Files in memory; a write past the end leaves a hole of zeros, as a file
// system's sparse file reads back.
class MemoryStore final : public CacheStore {
 public:
  bool read(const std::string& name, uint64_t offset, void* dst, size_t length) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = files.find(name);
    if (it == files.end() || offset > it->second.size() || length > it->second.size() - offset) return false;
    std::memcpy(dst, it->second.data() + offset, length);
    return true;
  }
  void write(const std::string& name, uint64_t offset, const void* src, size_t length) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string& file = files[name];
    if (file.size() < offset + length) file.resize(offset + length);
    std::memcpy(file.data() + offset, src, length);
  }
  std::vector<std::pair<std::string, uint64_t>> list() override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const auto& [name, bytes] : files) out.emplace_back(name, bytes.size());
    return out;
  }
  void remove(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    files.erase(name);
  }

  std::map<std::string, std::string> files;

 private:
  std::mutex mutex_;
};

// Serves file_byte() at every offset below `actual` bytes, stating a total
// of `stated` bytes (an honest server states its actual size).
class FakeServer final : public HttpTransport {
 public:
  FakeServer(uint64_t actual, uint64_t stated) : actual_(actual), stated_(stated) {}
  HttpRangeResponse get_range(const std::string&, uint64_t offset, uint64_t length, uint8_t* dst, double) override {
    HttpRangeResponse response;
    response.etag = "\"v1\"";
    const uint64_t n = offset < actual_ ? std::min(length, actual_ - offset) : 0;
    if (n == 0) {
      response.status = 416;
      return response;
    }
    const std::string bytes = file_bytes(offset, n);
    std::memcpy(dst, bytes.data(), n);
    response.status = 206;
    response.content_range = "bytes " + std::to_string(offset) + "-" + std::to_string(offset + n - 1) + "/" +
                             std::to_string(stated_);
    response.body_bytes = n;
    ++requests;
    return response;
  }
  int requests = 0;

 private:
  uint64_t actual_;
  uint64_t stated_;
};

std::string index_text(uint64_t size, uint64_t page_bytes, const std::string& pages) {
  const std::string body = "url http://host/m.gguf\nsize " + std::to_string(size) + "\netag \"v1\"\nlast-modified \n" +
                           "page-bytes " + std::to_string(page_bytes) + "\npages " + pages + "\nend\n";
  char header[33];
  std::snprintf(header, sizeof header, "sipllm-cache 1 %016zu\n", 32 + body.size());
  return std::string(header, 32) + body;
}

TEST(HttpCacheIndex, RefusesPageCountsThatOverflowAndPagesNoWriterUses) {
  // The count of pages, (size + page_bytes - 1) / page_bytes, wrapped to 0
  // here: the index was taken for a file of 2^64 - 1 bytes with no pages, and
  // the first read past the head indexed an empty page list.
  EXPECT_FALSE(CacheIndex::parse(index_text(UINT64_MAX, uint64_t{1} << 63, "")));
  EXPECT_EQ(cache_page_count(UINT64_MAX, uint64_t{1} << 63), 2u);
  EXPECT_EQ(cache_page_count(UINT64_MAX, 1), UINT64_MAX);
  EXPECT_EQ(cache_page_count(4096, 4096), 1u);
  EXPECT_EQ(cache_page_count(4097, 4096), 2u);
  // Pages beyond 1 GiB: no writer uses them, and offsets in them overflow.
  EXPECT_FALSE(CacheIndex::parse(index_text(100, uint64_t{1} << 63, "1")));
  EXPECT_FALSE(CacheIndex::parse(index_text(100, UINT64_MAX, "1")));
  EXPECT_TRUE(CacheIndex::parse(index_text(100, uint64_t{1} << 30, "1")));
  EXPECT_TRUE(CacheIndex::parse(index_text(3 * kPage + 1, kPage, "1011")));
}

TEST(HttpCacheIndex, RangesRoundTripMergeAndAreCheckedWhenRead) {
  CacheIndex index;
  index.url = "http://host/m.gguf";
  index.file = {10 * kPage, "\"v1\"", ""};
  index.page_bytes = kPage;
  index.pages.assign(10, false);
  index.pages[2] = true;
  index.add_range(100, 200);
  index.add_range(300, 400);
  index.add_range(200, 300);  // touches both: one range 100-400
  index.add_range(5 * kPage + 10, 5 * kPage + 20);
  index.add_range(5 * kPage + 15, 6 * kPage + 1);  // overlaps: merged
  EXPECT_EQ(index.ranges, (std::map<uint64_t, uint64_t>{{100, 400}, {5 * kPage + 10, 6 * kPage + 1}}));
  EXPECT_TRUE(index.holds(100, 300));
  EXPECT_FALSE(index.holds(99, 2));
  EXPECT_FALSE(index.holds(399, 2));
  EXPECT_TRUE(index.holds(2 * kPage + 5, kPage - 5));
  EXPECT_FALSE(index.holds(2 * kPage + 5, kPage)) << "runs into page 3";
  EXPECT_EQ(index.cached_bytes(), kPage + 300 + (kPage - 10 + 1));

  const std::string text = index.serialize();
  EXPECT_NE(text.find("\nranges 100-400 20490-24577\nend\n"), std::string::npos) << text;
  const std::optional<CacheIndex> back = CacheIndex::parse(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->ranges, index.ranges);
  EXPECT_EQ(back->cached_bytes(), index.cached_bytes());

  index.drop_ranges(399, 400);
  EXPECT_EQ(index.ranges.size(), 1u);

  const std::string pages(10, '0');
  EXPECT_TRUE(CacheIndex::parse(index_text(10 * kPage, kPage, pages + "\nranges 0-1 2-40960")));
  for (const char* bad : {"5-5", "6-5", "0-40961", "10-20 20-30", "10-20 15-30", "20-30 10-15", "1-2  3-4",
                          "1-", "-2", "a-b", ""}) {
    EXPECT_FALSE(CacheIndex::parse(index_text(10 * kPage, kPage, pages + "\nranges " + bad))) << bad;
  }
}

TEST(HttpCache, RangesPastTheEndOfATruncatedPagesFileAreForgotten) {
  const uint64_t size = 8 * kPage;
  const std::string url = "http://host/m.gguf";
  auto store = std::make_shared<MemoryStore>();
  store->files[cache_index_name(url)] =
      index_text(size, kPage, "10000000\nranges 5000-6000 20000-21000 30000-31000");
  store->files[cache_pages_name(url)] = file_bytes(0, 25000);
  auto server = std::make_shared<FakeServer>(size, size);
  HttpSourceOptions options;
  options.cache = store;
  options.parallel_requests = 1;
  auto source = open_http_source(url, server, options);
  const std::optional<CacheIndex> index = load_cache_index(*store, url);
  ASSERT_TRUE(index);
  EXPECT_EQ(index->ranges, (std::map<uint64_t, uint64_t>{{5000, 6000}, {20000, 21000}}));
  // The forgotten range is fetched again; the kept ones come from the store.
  std::vector<std::string> rows(3, std::string(1000, '\0'));
  std::vector<WeightSource::ReadRequest> reads;
  for (uint64_t i = 0; i < 3; ++i) reads.push_back({i == 0 ? 5000u : i == 1 ? 20000u : 30000u, rows[i].data(), 1000});
  source->read_many(reads);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rows[i], file_bytes(reads[i].offset, 1000)) << i;
  EXPECT_EQ(server->requests, 1);
}

TEST(HttpCache, StoredPagesPastTheEndOfATruncatedPagesFileAreFetchedAgain) {
  // An entry of five pages, all stored, whose pages file kept only the first
  // page and a half (a crash before its bytes reached the disk). Reading the
  // last page first fetches it again and writes it past the file's end;
  // before the fix, pages 1 to 3 then lay in a hole and read back as zeros.
  const uint64_t size = 4 * kPage + 100;
  const std::string url = "http://host/m.gguf";
  auto store = std::make_shared<MemoryStore>();
  store->files[cache_index_name(url)] = index_text(size, kPage, "11111");
  store->files[cache_pages_name(url)] = file_bytes(0, kPage + kPage / 2);
  auto server = std::make_shared<FakeServer>(size, size);
  HttpSourceOptions options;
  options.cache = store;
  options.parallel_requests = 1;
  auto source = open_http_source(url, server, options);
  EXPECT_TRUE(source->stats().opened_from_cache);
  // The index now lists only the page the pages file still holds.
  const std::optional<CacheIndex> index = load_cache_index(*store, url);
  ASSERT_TRUE(index);
  EXPECT_EQ(index->pages, (std::vector<bool>{true, false, false, false, false}));

  std::string read(100, '\0');
  source->read(4 * kPage, read.data(), 100);
  EXPECT_EQ(read, file_bytes(4 * kPage, 100));
  for (uint64_t page : {2, 1, 3, 0}) {
    std::string bytes(kPage, '\0');
    source->read(page * kPage, bytes.data(), kPage);
    EXPECT_EQ(bytes, file_bytes(page * kPage, kPage)) << "page " << page;
  }
  EXPECT_EQ(server->requests, 4);  // pages 4, 2, 1, 3; page 0 came from the store
}

TEST(HttpCache, AFileTooLargeForTheCacheStreamsWithoutIt) {
  // A server that states 2^60 bytes (or 2^64 - 1): the cache would need a
  // page list of 2^40 entries (before the fix it allocated one, and for
  // 2^64 - 1 its size computation wrapped to an empty list instead).
  for (uint64_t stated : {uint64_t{1} << 60, UINT64_MAX}) {
    auto store = std::make_shared<MemoryStore>();
    auto server = std::make_shared<FakeServer>(4u << 20, stated);
    HttpSourceOptions options;
    options.cache = store;
    options.parallel_requests = 1;
    auto source = open_http_source("http://host/huge.gguf", server, options);
    EXPECT_EQ(source->size(), stated);
    const HttpSourceStats stats = source->stats();
    EXPECT_FALSE(stats.caching);
    EXPECT_NE(stats.cache_error.find("more than a cache index can list"), std::string::npos) << stats.cache_error;
    EXPECT_TRUE(store->files.empty());
    // Reads in the head and past it still work, from the network.
    for (uint64_t offset : {uint64_t{100}, uint64_t{3} << 20}) {
      std::string bytes(1000, '\0');
      source->read(offset, bytes.data(), bytes.size());
      EXPECT_EQ(bytes, file_bytes(offset, bytes.size())) << offset;
    }
  }
}

TEST(HttpCache, AnIndexListsAtMostAMillionPages) {
  // 2^20 pages of 4 KiB (4 GiB) get an entry; one byte more is read without
  // the cache, whose index would list a page more than it may.
  constexpr uint64_t kMostPages = uint64_t{1} << 20;
  for (uint64_t stated : {kMostPages * kPage, kMostPages * kPage + 1}) {
    auto store = std::make_shared<MemoryStore>();
    auto server = std::make_shared<FakeServer>(4u << 20, stated);
    HttpSourceOptions options;
    options.cache = store;
    options.parallel_requests = 1;
    options.page_bytes = kPage;
    auto source = open_http_source("http://host/large.gguf", server, options);
    const HttpSourceStats stats = source->stats();
    const bool fits = stated == kMostPages * kPage;
    EXPECT_EQ(stats.caching, fits) << stated << ": " << stats.cache_error;
    if (!fits) {
      EXPECT_NE(stats.cache_error.find("more than a cache index can list"), std::string::npos) << stats.cache_error;
    }
    std::string bytes(1000, '\0');
    source->read(3u << 20, bytes.data(), bytes.size());
    EXPECT_EQ(bytes, file_bytes(3u << 20, bytes.size())) << stated;
    EXPECT_EQ(load_cache_index(*store, "http://host/large.gguf").has_value(), fits) << stated;
  }
}

// A store whose writes to one file, once the gate is closed, wait until it
// opens: as a store call from an engine thread waits for the WebAssembly
// build's main runtime thread to answer it.
class GatedStore final : public CacheStore {
 public:
  explicit GatedStore(std::string gated) : gated_(std::move(gated)) {}

  bool read(const std::string& name, uint64_t offset, void* dst, size_t length) override {
    return files_.read(name, offset, dst, length);
  }
  void write(const std::string& name, uint64_t offset, const void* src, size_t length) override {
    if (name == gated_) {
      std::unique_lock<std::mutex> lock(mutex_);
      if (closed_) {
        ++waiting_;
        changed_.notify_all();
        // The bound only ends the deadlock the test exists to catch, so that
        // the test fails rather than hangs.
        if (!changed_.wait_for(lock, std::chrono::seconds(30), [&] { return !closed_; })) gave_up_ = true;
      }
    }
    files_.write(name, offset, src, length);
  }
  std::vector<std::pair<std::string, uint64_t>> list() override { return files_.list(); }
  void remove(const std::string& name) override { files_.remove(name); }

  void close_gate() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  void wait_for_a_writer_at_the_gate() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return waiting_ > 0; });
  }
  void open_gate() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = false;
    changed_.notify_all();
  }
  bool gave_up() {
    std::lock_guard<std::mutex> lock(mutex_);
    return gave_up_;
  }

 private:
  const std::string gated_;
  MemoryStore files_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool closed_ = false;
  int waiting_ = 0;
  bool gave_up_ = false;
};

TEST(HttpCache, ItsStateCanBeReadWhileAStoreCallWaits) {
  // An engine thread stores a page, then writes the index, which the store
  // keeps waiting. Meanwhile this thread reads the state, as the WebAssembly
  // build's main runtime thread does for every request's stats. Before the
  // fix the index was written under the lock the readers take: the reader
  // waited for the writer, and the writer for the reader's thread.
  const std::string url = "http://host/m.gguf";
  const uint64_t size = 4 * kPage;
  auto store = std::make_shared<GatedStore>(cache_index_name(url));
  PageCache cache(store, url, RemoteFile{size, "\"v1\"", ""}, kPage);
  ASSERT_EQ(cache.claim({0}), std::vector<PageCache::PageState>{PageCache::PageState::kClaimed});
  store->close_gate();
  const std::string page = file_bytes(0, kPage);
  std::thread writer([&] { cache.finish(0, 1, reinterpret_cast<const uint8_t*>(page.data())); });
  store->wait_for_a_writer_at_the_gate();

  EXPECT_TRUE(cache.writing());
  EXPECT_EQ(cache.write_error(), "");
  EXPECT_TRUE(cache.holds(0, kPage));  // stored, though its index is not written yet
  EXPECT_EQ(cache.claim({1}), std::vector<PageCache::PageState>{PageCache::PageState::kClaimed});
  const bool reader_waited_for_the_writer = store->gave_up();
  store->open_gate();
  writer.join();
  EXPECT_FALSE(reader_waited_for_the_writer);
  const std::optional<CacheIndex> index = load_cache_index(*store, url);
  ASSERT_TRUE(index);
  EXPECT_EQ(index->pages, (std::vector<bool>{true, false, false, false}));
}

TEST(HttpCache, StoringRowsWhileTheFileChangesOnTheServerEndsBoth) {
  // A reader stores rows read by the row (store_ranges) while a prefetch
  // thread finds the file changed on the server (invalidate). Before the fix
  // store_ranges wrote the index still holding the files' shared lock, while
  // invalidate holds the index writer's lock and waits for the files'
  // exclusive one: each waited for the other, for good (the range-response
  // fuzzer found it). Forced here: the rows' write waits at the gate, holding
  // the files' lock, until invalidate has had time to take the writer's lock
  // and wait; with the fix both end whatever the timing.
  const std::string url = "http://host/m.gguf";
  const uint64_t size = 4 * kPage;
  // Left to leak if the threads deadlock, so that the test fails instead of hanging.
  auto* store = new std::shared_ptr<GatedStore>(std::make_shared<GatedStore>(cache_pages_name(url)));
  auto* cache = new PageCache(*store, url, RemoteFile{size, "\"v1\"", ""}, kPage);
  const auto* row_text = new std::string(file_bytes(100, 300));
  const std::string& row = *row_text;
  (*store)->close_gate();
  auto* rows = new std::future<void>(std::async(std::launch::async, [=] {
    cache->store_ranges({PageCache::Range{100, reinterpret_cast<const uint8_t*>(row.data()), row.size()}});
  }));
  (*store)->wait_for_a_writer_at_the_gate();
  auto* changed = new std::future<void>(std::async(std::launch::async, [=] { cache->invalidate(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  (*store)->open_gate();
  // The bound only tells a deadlock from a slow machine.
  const bool ended = rows->wait_for(std::chrono::seconds(60)) == std::future_status::ready &&
                     changed->wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  ASSERT_TRUE(ended) << "store_ranges and invalidate deadlocked";
  delete rows;
  delete changed;
  EXPECT_FALSE(cache->writing());
  EXPECT_FALSE(cache->holds(100, 300));  // the changed file's rows are not kept
  EXPECT_FALSE(load_cache_index(**store, url));
  delete cache;
  delete store;
  delete row_text;
}

}  // namespace
}  // namespace sipllm
