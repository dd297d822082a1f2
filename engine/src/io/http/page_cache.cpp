#include "io/http/page_cache.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <sstream>

namespace sipllm {
namespace {

constexpr size_t kIndexHeaderBytes = 32;  // "sipllm-cache 1 " + 16 digits + "\n"
constexpr uint64_t kMaxIndexBytes = 64u << 20;
// No writer uses larger pages (HttpSourceOptions allows up to 256 MiB); an
// index that says so is damaged, and offsets computed from such pages could
// overflow.
constexpr uint64_t kMaxIndexPageBytes = 1u << 30;
// Pages an index lists at most: 1 TiB in the default 1 MiB pages. Every page
// stored rewrites the whole list, so a file of tens of millions of small
// pages (a size a server may state) would cost seconds per page and tens of
// megabytes per index; such a file is read without the cache instead.
constexpr uint64_t kMaxIndexPages = uint64_t{1} << 20;
// An index's bytes besides its URL, validators and page list: field names,
// numbers, the header.
constexpr uint64_t kIndexOverheadBytes = 256;
// Ranges an index lists at most (one per row of the largest vocabularies); a
// range read past that is served but not stored. Their text, up to
// kMaxRangeText bytes each, is reserved in every index's size limit.
constexpr size_t kMaxRanges = size_t{1} << 18;
constexpr uint64_t kMaxRangeText = 2 * 20 + 2;

// FNV-1a, 64 bits: a stable file name for a URL (the index holds the URL
// itself, so a collision only costs a cache miss).
std::string url_key(const std::string& url) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : url) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, h);
  return std::string("sipllm-") + hex;
}

bool parse_u64(const std::string& text, uint64_t* value) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const auto digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *value = v;
  return true;
}

}  // namespace

uint64_t cache_page_count(uint64_t file_size, uint64_t page_bytes) {
  return file_size / page_bytes + (file_size % page_bytes != 0 ? 1 : 0);
}

std::string cache_entry_refusal(const std::string& url, const RemoteFile& file, uint64_t page_bytes) {
  const uint64_t pages = cache_page_count(file.size, page_bytes);
  const uint64_t text = url.size() + file.etag.size() + file.last_modified.size() + kIndexOverheadBytes +
                        kMaxRanges * kMaxRangeText;
  if (pages > kMaxIndexPages || text >= kMaxIndexBytes || pages > kMaxIndexBytes - text) {
    return "a file of " + std::to_string(file.size) + " bytes has " + std::to_string(pages) + " pages of " +
           std::to_string(page_bytes) + " bytes, more than a cache index can list";
  }
  return "";
}

uint64_t CacheIndex::page_length(uint64_t page) const {
  const uint64_t start = page * page_bytes;
  return std::min(page_bytes, file.size - start);
}

uint64_t CacheIndex::cached_bytes() const {
  uint64_t total = 0;
  for (uint64_t p = 0; p < page_count(); ++p) {
    if (pages[p]) total += page_length(p);
  }
  // A range's bytes outside stored pages.
  for (const auto& [start, end] : ranges) {
    for (uint64_t at = start; at < end;) {
      const uint64_t p = at / page_bytes;
      const uint64_t next = std::min(end, (p + 1) * page_bytes);
      if (!pages[p]) total += next - at;
      at = next;
    }
  }
  return total;
}

bool CacheIndex::holds(uint64_t offset, uint64_t length) const {
  const uint64_t end = offset + length;
  for (uint64_t at = offset; at < end;) {
    const uint64_t p = at / page_bytes;
    if (pages[p]) {
      at = (p + 1) * page_bytes;
      continue;
    }
    auto range = ranges.upper_bound(at);  // the first range starting past `at`
    if (range == ranges.begin()) return false;
    --range;
    if (range->second <= at) return false;
    at = range->second;
  }
  return true;
}

void CacheIndex::add_range(uint64_t start, uint64_t end) {
  if (start >= end) return;
  // Ranges that meet or touch [start, end) are merged into it.
  auto it = ranges.upper_bound(start);
  if (it != ranges.begin() && std::prev(it)->second >= start) --it;
  while (it != ranges.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    it = ranges.erase(it);
  }
  ranges.emplace(start, end);
}

void CacheIndex::drop_ranges(uint64_t start, uint64_t end) {
  auto it = ranges.upper_bound(start);
  if (it != ranges.begin() && std::prev(it)->second > start) --it;
  while (it != ranges.end() && it->first < end) it = ranges.erase(it);
}

std::string CacheIndex::serialize() const {
  std::string body;
  body += "url " + url + "\n";
  body += "size " + std::to_string(file.size) + "\n";
  body += "etag " + file.etag + "\n";
  body += "last-modified " + file.last_modified + "\n";
  body += "page-bytes " + std::to_string(page_bytes) + "\n";
  body += "pages ";
  for (bool stored : pages) body += stored ? '1' : '0';
  body += "\n";
  if (!ranges.empty()) {
    body += "ranges";
    for (const auto& [start, end] : ranges) {
      body += ' ';
      body += std::to_string(start);
      body += '-';
      body += std::to_string(end);
    }
    body += "\n";
  }
  body += "end\n";
  char header[kIndexHeaderBytes + 1];
  std::snprintf(header, sizeof header, "sipllm-cache 1 %016" PRIu64 "\n",
                static_cast<uint64_t>(kIndexHeaderBytes + body.size()));
  return std::string(header, kIndexHeaderBytes) + body;
}

std::optional<CacheIndex> CacheIndex::parse(const std::string& text) {
  const std::string magic = "sipllm-cache 1 ";
  if (text.size() < kIndexHeaderBytes || text.compare(0, magic.size(), magic) != 0 ||
      text[kIndexHeaderBytes - 1] != '\n') {
    return std::nullopt;
  }
  uint64_t length = 0;
  if (!parse_u64(text.substr(magic.size(), kIndexHeaderBytes - 1 - magic.size()), &length) ||
      length > text.size() || length < kIndexHeaderBytes) {
    return std::nullopt;
  }
  std::istringstream lines(text.substr(kIndexHeaderBytes, length - kIndexHeaderBytes));
  auto field = [&](const char* key, std::string* value) {
    std::string line;
    if (!std::getline(lines, line)) return false;
    const std::string prefix = std::string(key) + " ";
    if (line.compare(0, prefix.size(), prefix) != 0) return false;
    *value = line.substr(prefix.size());
    return true;
  };
  CacheIndex index;
  std::string size, page_bytes, pages, end;
  if (!field("url", &index.url) || !field("size", &size) || !field("etag", &index.file.etag) ||
      !field("last-modified", &index.file.last_modified) || !field("page-bytes", &page_bytes) ||
      !field("pages", &pages) || !std::getline(lines, end)) {
    return std::nullopt;
  }
  std::string ranges;
  if (end.compare(0, 7, "ranges ") == 0) {
    ranges = end.substr(7);
    if (ranges.empty() || !std::getline(lines, end)) return std::nullopt;
  }
  if (end != "end") return std::nullopt;
  if (index.url.empty() || !parse_u64(size, &index.file.size) || index.file.size == 0 ||
      !parse_u64(page_bytes, &index.page_bytes) || index.page_bytes == 0 ||
      index.page_bytes > kMaxIndexPageBytes) {
    return std::nullopt;
  }
  const uint64_t count = cache_page_count(index.file.size, index.page_bytes);
  if (pages.size() != count || count > kMaxIndexPages) return std::nullopt;
  index.pages.resize(count);
  for (uint64_t p = 0; p < count; ++p) {
    if (pages[p] != '0' && pages[p] != '1') return std::nullopt;
    index.pages[p] = pages[p] == '1';
  }
  // Ranges as written: ascending, disjoint, not touching, within the file.
  std::istringstream items(ranges);
  std::string item;
  uint64_t previous_end = 0;
  while (std::getline(items, item, ' ')) {
    const size_t dash = item.find('-');
    uint64_t start = 0, stop = 0;
    if (dash == std::string::npos || !parse_u64(item.substr(0, dash), &start) ||
        !parse_u64(item.substr(dash + 1), &stop) || start >= stop || stop > index.file.size ||
        (!index.ranges.empty() && start <= previous_end) || index.ranges.size() == kMaxRanges) {
      return std::nullopt;
    }
    index.ranges.emplace(start, stop);
    previous_end = stop;
  }
  return index;
}

std::string cache_index_name(const std::string& url) { return url_key(url) + ".index"; }
std::string cache_pages_name(const std::string& url) { return url_key(url) + ".pages"; }

std::optional<CacheIndex> read_cache_index(CacheStore& store, const std::string& name) {
  std::string header(kIndexHeaderBytes, '\0');
  if (!store.read(name, 0, header.data(), header.size())) return std::nullopt;
  uint64_t length = 0;
  if (header.compare(0, 15, "sipllm-cache 1 ") != 0 ||
      !parse_u64(header.substr(15, kIndexHeaderBytes - 16), &length) ||
      length < kIndexHeaderBytes || length > kMaxIndexBytes) {
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(length), '\0');
  if (!store.read(name, 0, text.data(), text.size())) return std::nullopt;
  return CacheIndex::parse(text);
}

std::optional<CacheIndex> load_cache_index(CacheStore& store, const std::string& url) {
  std::optional<CacheIndex> index = read_cache_index(store, cache_index_name(url));
  if (index && index->url != url) return std::nullopt;  // another URL with the same hash
  return index;
}

// ---- PageCache ----------------------------------------------------------------

PageCache::PageCache(std::shared_ptr<CacheStore> store, CacheIndex index)
    : store_(std::move(store)),
      index_name_(cache_index_name(index.url)),
      pages_name_(cache_pages_name(index.url)),
      index_(std::move(index)),
      in_flight_(index_.page_count(), false) {
  forget_pages_past_the_end();
}

bool PageCache::stored_through(uint64_t end) {
  uint8_t byte = 0;
  try {
    return store_->read(pages_name_, end - 1, &byte, 1);
  } catch (const std::exception&) {
    return false;
  }
}

// The pages file may have lost its tail while the index survived: a crash
// after the index was written but before the pages' bytes reached the disk (a
// file system may keep either without the other), or a pages file truncated
// or deleted by hand. A page or range past its end would be refetched when
// read, but the first one written after it would leave a hole in its place,
// and a hole reads as zeros: the cache would serve zeros as the model's
// bytes. So what the index lists past the pages file's end is forgotten now,
// before any write. One read of a byte when the file is whole; a binary
// search over the stored ends when it is not.
void PageCache::forget_pages_past_the_end() {
  std::vector<uint64_t> ends;
  for (uint64_t p = 0; p < index_.page_count(); ++p) {
    if (index_.pages[p]) ends.push_back(p * index_.page_bytes + index_.page_length(p));
  }
  for (const auto& range : index_.ranges) ends.push_back(range.second);
  if (ends.empty()) return;
  std::sort(ends.begin(), ends.end());
  if (stored_through(ends.back())) return;
  // ends[0, kept) lie within the file; whether an end does is monotonic, as
  // the file's length is one threshold.
  size_t kept = 0, beyond = ends.size() - 1;
  while (kept < beyond) {
    const size_t middle = kept + (beyond - kept) / 2;
    if (stored_through(ends[middle])) {
      kept = middle + 1;
    } else {
      beyond = middle;
    }
  }
  const uint64_t length = kept == 0 ? 0 : ends[kept - 1];  // the pages file holds at least this much
  for (uint64_t p = 0; p < index_.page_count(); ++p) {
    if (index_.pages[p] && p * index_.page_bytes + index_.page_length(p) > length) index_.pages[p] = false;
  }
  for (auto it = index_.ranges.begin(); it != index_.ranges.end();) {
    it = it->second > length ? index_.ranges.erase(it) : std::next(it);
  }
  save_index();
}

PageCache::PageCache(std::shared_ptr<CacheStore> store, const std::string& url,
                     const RemoteFile& file, uint64_t page_bytes)
    : store_(std::move(store)), index_name_(cache_index_name(url)), pages_name_(cache_pages_name(url)) {
  index_.url = url;
  index_.file = file;
  index_.page_bytes = page_bytes;
  index_.pages.assign(cache_page_count(file.size, page_bytes), false);
  in_flight_.assign(index_.page_count(), false);
  try {
    store_->remove(index_name_);
    store_->remove(pages_name_);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_writing_locked(e.what());
    return;
  }
  save_index();
}

bool PageCache::writing() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return writing_;
}

std::string PageCache::write_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return write_error_;
}

void PageCache::stop_writing_locked(const std::string& why) {
  if (!writing_) return;
  writing_ = false;
  write_error_ = why;
}

void PageCache::save_index() {
  // The text is taken under the writer's lock, so that the writes land in
  // the order the index changed: the last one written is the latest.
  std::lock_guard<std::mutex> writer(index_write_mutex_);
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!writing_) return;
    text = index_.serialize();
  }
  try {
    store_->write(index_name_, 0, text.data(), text.size());
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_writing_locked(e.what());
  }
}

std::vector<PageCache::PageState> PageCache::claim(const std::vector<uint64_t>& pages) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PageState> states;
  for (uint64_t p : pages) {
    if (index_.pages[p]) {
      states.push_back(PageState::kStored);
    } else if (in_flight_[p]) {
      states.push_back(PageState::kBusy);
    } else {
      in_flight_[p] = true;
      states.push_back(PageState::kClaimed);
    }
  }
  return states;
}

bool PageCache::wait_for(uint64_t page) {
  std::unique_lock<std::mutex> lock(mutex_);
  fetched_.wait(lock, [&] { return !in_flight_[page]; });
  if (index_.pages[page]) return true;
  in_flight_[page] = true;
  return false;
}

void PageCache::finish(uint64_t first, uint64_t count, const uint8_t* bytes) {
  std::shared_lock<std::shared_mutex> files(files_mutex_, std::defer_lock);
  bool store = false;
  if (bytes != nullptr) {
    files.lock();
    std::lock_guard<std::mutex> lock(mutex_);
    store = writing_;
  }
  bool stored = false;
  std::string error;
  if (store) {
    uint64_t length = 0;
    for (uint64_t p = first; p < first + count; ++p) length += index_.page_length(p);
    try {
      store_->write(pages_name_, first * index_.page_bytes, bytes, static_cast<size_t>(length));
      stored = true;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (files.owns_lock()) files.unlock();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error.empty()) stop_writing_locked(error);
    for (uint64_t p = first; p < first + count; ++p) {
      in_flight_[p] = false;
      if (stored && writing_) index_.pages[p] = true;
    }
    if (stored && writing_) {
      // Ranges wholly inside the pages now stored say nothing more.
      const uint64_t begin = first * index_.page_bytes;
      const uint64_t end = (first + count - 1) * index_.page_bytes + index_.page_length(first + count - 1);
      for (auto it = index_.ranges.lower_bound(begin); it != index_.ranges.end() && it->second <= end;) {
        it = index_.ranges.erase(it);
      }
    }
  }
  fetched_.notify_all();
  if (stored) save_index();
}

bool PageCache::holds(uint64_t offset, uint64_t length) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return index_.holds(offset, length);
}

void PageCache::store_ranges(const std::vector<Range>& ranges) {
  std::shared_lock<std::shared_mutex> files(files_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!writing_) return;
  }
  std::vector<const Range*> stored;
  std::string error;
  for (const Range& range : ranges) {
    try {
      store_->write(pages_name_, range.offset, range.bytes, static_cast<size_t>(range.length));
      stored.push_back(&range);
    } catch (const std::exception& e) {
      error = e.what();
      break;
    }
  }
  // Released before the index is written: save_index takes the index
  // writer's lock, which invalidate() holds while it waits for this one.
  files.unlock();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error.empty()) stop_writing_locked(error);
    if (!writing_) return;
    for (const Range* range : stored) {
      if (index_.ranges.size() < kMaxRanges) index_.add_range(range->offset, range->offset + range->length);
    }
  }
  save_index();
}

bool PageCache::read(uint64_t offset, void* dst, size_t length) {
  bool ok = false;
  try {
    ok = store_->read(pages_name_, offset, dst, length);
  } catch (const std::exception&) {
    ok = false;  // a store that throws on a read is treated as one that lacks the bytes
  }
  if (ok) return true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t first = offset / index_.page_bytes;
    const uint64_t last = (offset + length - 1) / index_.page_bytes;
    for (uint64_t p = first; p <= last; ++p) index_.pages[p] = false;
    index_.drop_ranges(offset, offset + length);
  }
  save_index();
  return false;
}

void PageCache::invalidate() {
  // No index write may land after the deletion either.
  std::lock_guard<std::mutex> writer(index_write_mutex_);
  std::unique_lock<std::shared_mutex> files(files_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_writing_locked("the file changed on the server");
    std::fill(index_.pages.begin(), index_.pages.end(), false);
    index_.ranges.clear();
  }
  try {
    store_->remove(index_name_);
    store_->remove(pages_name_);
  } catch (const std::exception&) {
    // The entry stays; every fetch for it meets the same mismatch and fails
    // the same way, naming the change, until the store lets it be deleted.
  }
  fetched_.notify_all();
}

}  // namespace sipllm
