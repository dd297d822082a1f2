// The cache tier's bookkeeping: which pages of which model a CacheStore holds.
//
// Each cached URL has two files in the store, named after a hash of the URL:
//   sipllm-HASH.pages  the model's bytes at their own offsets (a sparse copy)
//   sipllm-HASH.index  text, see CacheIndex::serialize():
//     sipllm-cache 1 LENGTH          (exactly 32 bytes: LENGTH is the index's
//                                     size in bytes, 16 digits, so that a
//                                     reader knows how much to read)
//     url URL
//     size BYTES
//     etag ETAG                      (may be empty)
//     last-modified DATE             (may be empty)
//     page-bytes BYTES
//     pages 0110...                  (one character per page: 1 stored, 0 not)
//     ranges 5000-9952 81920-86872   (optional: byte ranges [start, end) stored
//                                     outside whole pages, see below)
//     end
// Ranges are the rows of tables read by the row (a token's embedding row,
// Gemma 4's per-layer row): a prompt needs a few hundred rows of a table of
// a gigabyte, scattered, and storing the page around each one would fetch
// and keep a megabyte per row of a few kilobytes. A range is stored exactly.
// Pages are written before the index that lists them, so an index never
// claims a page that is not stored. An entry is one version of one URL: its
// size, ETag and Last-Modified; a response that contradicts them means the
// file changed, and the entry is deleted.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "io/http/range_response.h"
#include "sipllm/http_source.h"

namespace sipllm {

struct CacheIndex {
  std::string url;
  RemoteFile file;
  uint64_t page_bytes = 0;
  std::vector<bool> pages;  // ceil(file.size / page_bytes) entries
  // Stored byte ranges besides the pages, start -> end: disjoint, none
  // touching another, none past the file's end.
  std::map<uint64_t, uint64_t> ranges;

  uint64_t page_count() const { return pages.size(); }
  uint64_t page_length(uint64_t page) const;  // the last page may be short
  uint64_t cached_bytes() const;
  // Whether every byte of [offset, offset + length) is stored, in pages or ranges.
  bool holds(uint64_t offset, uint64_t length) const;
  // Records [start, end) as stored, merged with the ranges it meets.
  void add_range(uint64_t start, uint64_t end);
  // Forgets every range that meets [start, end).
  void drop_ranges(uint64_t start, uint64_t end);
  std::string serialize() const;
  // Nullopt when `text` is not a well-formed, self-consistent index.
  static std::optional<CacheIndex> parse(const std::string& text);
};

// ceil(file_size / page_bytes), without overflowing near 2^64.
uint64_t cache_page_count(uint64_t file_size, uint64_t page_bytes);
// Why `file` cannot get a cache entry with pages of `page_bytes` ("" when it
// can): its index would list more pages than an index may hold, so it could
// never be read back (a server stating an absurd size would otherwise have
// the cache allocate a page list of that size).
std::string cache_entry_refusal(const std::string& url, const RemoteFile& file, uint64_t page_bytes);

// Store names of a URL's entry.
std::string cache_index_name(const std::string& url);
std::string cache_pages_name(const std::string& url);

// The entry of `url` in `store`, when there is a valid one for exactly that URL.
std::optional<CacheIndex> load_cache_index(CacheStore& store, const std::string& url);
// Reads an index file of the store by name (nullopt when missing or invalid).
std::optional<CacheIndex> read_cache_index(CacheStore& store, const std::string& name);

// One open model's pages, for the life of one source. Thread-safe.
//
// No lock that a reader of the state (writing(), write_error(), holds(),
// claim()) takes is held across a call to the store. In the WebAssembly
// build a store call from an engine thread waits for the main runtime
// thread, which answers it; that thread also reads this state (the stats of
// every request). It answers queued calls while it waits for a lock, but not
// from inside one, and a reader should never wait on another thread's I/O
// (see wasm-bindings/js_host.h).
class PageCache {
 public:
  // Uses an existing entry, but for pages past the end of its pages file
  // (see forget_pages_past_the_end).
  PageCache(std::shared_ptr<CacheStore> store, CacheIndex index);
  // Starts a new entry for `url`, replacing any other: removes its old files
  // and writes an index with no pages. Caching is off if that write fails.
  // The file must be one cache_entry_refusal() accepts.
  PageCache(std::shared_ptr<CacheStore> store, const std::string& url, const RemoteFile& file,
            uint64_t page_bytes);

  const RemoteFile& file() const { return index_.file; }
  uint64_t page_bytes() const { return index_.page_bytes; }
  uint64_t page_count() const { return index_.page_count(); }
  uint64_t page_length(uint64_t page) const { return index_.page_length(page); }

  // Whether fetched pages are still being stored, and if not, why.
  bool writing() const;
  std::string write_error() const;

  // Claims, for the calling reader, those of `pages` that are neither stored
  // nor being fetched by another reader. Returns for each page: kStored,
  // kClaimed (the caller must fetch it, then call finish), or kBusy (another
  // reader is fetching it; see wait_for).
  enum class PageState { kStored, kClaimed, kBusy };
  std::vector<PageState> claim(const std::vector<uint64_t>& pages);
  // Blocks until `page` is no longer being fetched; then true if it is
  // stored, or false after claiming it for the caller.
  bool wait_for(uint64_t page);
  // Ends a claim on pages [first, first + count): `bytes` (all of them, page
  // aligned) are stored when given, and the pages are marked stored if the
  // store took them; nullptr releases the claim after a failed fetch.
  void finish(uint64_t first, uint64_t count, const uint8_t* bytes);

  // Whether [offset, offset + length) can be read from the store.
  bool holds(uint64_t offset, uint64_t length) const;
  // Stores ranges read by the row (each one's bytes, at its file offset) and
  // records them in the index, which is written once for all of them. A
  // range's bytes may overlap pages or ranges stored already: they are the
  // file's same bytes.
  struct Range {
    uint64_t offset;
    const uint8_t* bytes;
    uint64_t length;
  };
  void store_ranges(const std::vector<Range>& ranges);

  // Copies stored bytes; false (and the pages and ranges are forgotten) when
  // the store no longer has them.
  bool read(uint64_t offset, void* dst, size_t length);

  // The file changed on the server: deletes the entry and stops caching.
  void invalidate();

 private:
  void forget_pages_past_the_end();
  bool stored_through(uint64_t end);  // the pages file holds byte end - 1
  // Writes the index as it stands; called without mutex_.
  void save_index();
  void stop_writing_locked(const std::string& why);

  std::shared_ptr<CacheStore> store_;
  const std::string index_name_;
  const std::string pages_name_;
  // Held shared while a page is written to the store, exclusively while the
  // entry is deleted: a write that was under way when the file changed
  // cannot land after the deletion and leave stale bytes behind.
  std::shared_mutex files_mutex_;
  std::mutex index_write_mutex_;  // one index write at a time, taken before the others
  mutable std::mutex mutex_;      // the state below; never held across a store call
  std::condition_variable fetched_;  // a claim ended
  CacheIndex index_;
  std::vector<bool> in_flight_;
  bool writing_ = true;
  std::string write_error_;
};

}  // namespace sipllm
