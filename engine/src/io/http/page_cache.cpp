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

uint64_t CacheIndex::page_length(uint64_t page) const {
  const uint64_t start = page * page_bytes;
  return std::min(page_bytes, file.size - start);
}

uint64_t CacheIndex::cached_bytes() const {
  uint64_t total = 0;
  for (uint64_t p = 0; p < page_count(); ++p) {
    if (pages[p]) total += page_length(p);
  }
  return total;
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
  body += "\nend\n";
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
      !field("pages", &pages) || !std::getline(lines, end) || end != "end") {
    return std::nullopt;
  }
  if (index.url.empty() || !parse_u64(size, &index.file.size) || index.file.size == 0 ||
      !parse_u64(page_bytes, &index.page_bytes) || index.page_bytes == 0) {
    return std::nullopt;
  }
  const uint64_t count = (index.file.size + index.page_bytes - 1) / index.page_bytes;
  if (pages.size() != count) return std::nullopt;
  index.pages.resize(count);
  for (uint64_t p = 0; p < count; ++p) {
    if (pages[p] != '0' && pages[p] != '1') return std::nullopt;
    index.pages[p] = pages[p] == '1';
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
      in_flight_(index_.page_count(), false) {}

PageCache::PageCache(std::shared_ptr<CacheStore> store, const std::string& url,
                     const RemoteFile& file, uint64_t page_bytes)
    : store_(std::move(store)), index_name_(cache_index_name(url)), pages_name_(cache_pages_name(url)) {
  index_.url = url;
  index_.file = file;
  index_.page_bytes = page_bytes;
  index_.pages.assign((file.size + page_bytes - 1) / page_bytes, false);
  in_flight_.assign(index_.page_count(), false);
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    store_->remove(index_name_);
    store_->remove(pages_name_);
  } catch (const std::exception& e) {
    stop_writing_locked(e.what());
    return;
  }
  save_index_locked();
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

void PageCache::save_index_locked() {
  if (!writing_) return;
  const std::string text = index_.serialize();
  try {
    store_->write(index_name_, 0, text.data(), text.size());
  } catch (const std::exception& e) {
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
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error.empty()) stop_writing_locked(error);
  for (uint64_t p = first; p < first + count; ++p) {
    in_flight_[p] = false;
    if (stored && writing_) index_.pages[p] = true;
  }
  if (stored) save_index_locked();
  fetched_.notify_all();
}

bool PageCache::read(uint64_t offset, void* dst, size_t length) {
  bool ok = false;
  try {
    ok = store_->read(pages_name_, offset, dst, length);
  } catch (const std::exception&) {
    ok = false;  // a store that throws on a read is treated as one that lacks the bytes
  }
  if (ok) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t first = offset / index_.page_bytes;
  const uint64_t last = (offset + length - 1) / index_.page_bytes;
  for (uint64_t p = first; p <= last; ++p) index_.pages[p] = false;
  save_index_locked();
  return false;
}

void PageCache::invalidate() {
  std::unique_lock<std::shared_mutex> files(files_mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  stop_writing_locked("the file changed on the server");
  std::fill(index_.pages.begin(), index_.pages.end(), false);
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
