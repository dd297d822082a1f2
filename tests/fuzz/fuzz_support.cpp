#include "fuzz_support.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace sipllm::fuzz {

void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz check failed: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

uint16_t Reader::u16() {
  uint16_t v = u8();
  return static_cast<uint16_t>(v | (u8() << 8));
}

uint32_t Reader::u32() {
  uint32_t v = u16();
  return v | (static_cast<uint32_t>(u16()) << 16);
}

uint64_t Reader::u64() {
  uint64_t v = u32();
  return v | (static_cast<uint64_t>(u32()) << 32);
}

float Reader::f32() {
  const uint8_t selector = u8();
  if (selector < kSpecialFloats) return special_float(selector);
  const uint32_t bits = u32();
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

std::string Reader::text(size_t max) {
  const size_t length = std::min<size_t>({u16(), max, remaining()});
  std::string s(reinterpret_cast<const char*>(data_ + pos_), length);
  pos_ += length;
  return s;
}

std::string Reader::rest() {
  std::string s(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
  pos_ = size_;
  return s;
}

float special_float(int index) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  static const float kValues[kSpecialFloats] = {
      0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      kInf, -kInf, FLT_MIN, std::numeric_limits<float>::denorm_min(), FLT_MAX, -FLT_MAX,
      0.5f, 1e-30f, 1e30f, 2.0f};
  return kValues[index % kSpecialFloats];
}

Writer& Writer::u8(uint8_t v) {
  bytes_.push_back(static_cast<char>(v));
  return *this;
}
Writer& Writer::u16(uint16_t v) { return u8(static_cast<uint8_t>(v)).u8(static_cast<uint8_t>(v >> 8)); }
Writer& Writer::u32(uint32_t v) { return u16(static_cast<uint16_t>(v)).u16(static_cast<uint16_t>(v >> 16)); }
Writer& Writer::u64(uint64_t v) { return u32(static_cast<uint32_t>(v)).u32(static_cast<uint32_t>(v >> 32)); }

Writer& Writer::f32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return u8(0xFF).u32(bits);
}

Writer& Writer::text(const std::string& s) {
  u16(static_cast<uint16_t>(s.size()));
  bytes_ += s;
  return *this;
}

Writer& Writer::raw(const std::string& s) {
  bytes_ += s;
  return *this;
}

namespace {

// The pattern repeats every kPeriod bytes (a prime, so that no power-of-two
// page or block shift maps it onto itself): served and checked by memcpy and
// memcmp from a table, as fast as the fuzzers need.
constexpr size_t kPeriod = 65521;

const uint8_t* pattern_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(2 * kPeriod);
    for (size_t i = 0; i < t.size(); ++i) {
      t[i] = static_cast<uint8_t>(((i % kPeriod) * 0x9E3779B97F4A7C15ull) >> 56);
    }
    return t;
  }();
  return table.data();
}

}  // namespace

uint8_t pattern_byte(uint64_t offset) { return pattern_table()[offset % kPeriod]; }

void fill_pattern(uint64_t offset, uint8_t* dst, size_t length) {
  const uint8_t* table = pattern_table();
  while (length > 0) {
    const size_t at = static_cast<size_t>(offset % kPeriod);
    const size_t n = std::min(length, kPeriod);
    std::memcpy(dst, table + at, n);
    dst += n;
    offset += n;
    length -= n;
  }
}

bool is_pattern(uint64_t offset, const uint8_t* bytes, size_t length) {
  const uint8_t* table = pattern_table();
  while (length > 0) {
    const size_t at = static_cast<size_t>(offset % kPeriod);
    const size_t n = std::min(length, kPeriod);
    if (std::memcmp(bytes, table + at, n) != 0) return false;
    bytes += n;
    offset += n;
    length -= n;
  }
  return true;
}

void check_reads(HttpSource& source, const std::vector<ReadRequest>& reads) {
  const uint64_t file_size = source.size();
  if (file_size == 0) return;  // an empty file (a 200 with no body): nothing to read
  std::vector<uint8_t> buffer;
  for (const ReadRequest& r : reads) {
    const uint64_t offset = r.offset % file_size;
    const size_t length = static_cast<size_t>(std::min<uint64_t>(r.length, file_size - offset));
    buffer.assign(length, 0);
    if (!accepts([&] { source.read(offset, buffer.data(), length); })) continue;
    SIPLLM_FUZZ_CHECK(is_pattern(offset, buffer.data(), length),
                      "a read at " + std::to_string(offset) + " gave other bytes than the file's");
  }
  // The same reads as rows of a table (read_many: stored as ranges, with a cache).
  std::vector<std::vector<uint8_t>> rows;
  std::vector<WeightSource::ReadRequest> many;
  for (const ReadRequest& r : reads) {
    const uint64_t offset = r.offset % file_size;
    rows.emplace_back(static_cast<size_t>(std::min<uint64_t>(r.length, file_size - offset)));
    many.push_back({offset, rows.back().data(), rows.back().size()});
  }
  if (!accepts([&] { source.read_many(many); })) return;
  for (const WeightSource::ReadRequest& r : many) {
    SIPLLM_FUZZ_CHECK(is_pattern(r.offset, static_cast<const uint8_t*>(r.dst), r.length),
                      "a row read at " + std::to_string(r.offset) + " gave other bytes than the file's");
  }
}

void MemoryStore::put(const std::string& name, std::string bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  files_[name] = std::move(bytes);
}

bool MemoryStore::read(const std::string& name, uint64_t offset, void* dst, size_t length) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = files_.find(name);
  if (it == files_.end() || offset > it->second.size() || length > it->second.size() - offset) return false;
  std::memcpy(dst, it->second.data() + offset, length);
  return true;
}

void MemoryStore::write(const std::string& name, uint64_t offset, const void* src, size_t length) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A store as small as a browser's quota: a write past it fails as a full
  // disk would, which the cache must survive.
  constexpr uint64_t kQuota = 64u << 20;
  if (offset > kQuota || length > kQuota - offset) {
    throw Error(ErrorKind::kIo, "memory store: quota exceeded writing " + name);
  }
  std::string& file = files_[name];
  if (file.size() < offset + length) file.resize(static_cast<size_t>(offset + length));
  std::memcpy(file.data() + offset, src, length);
}

std::vector<std::pair<std::string, uint64_t>> MemoryStore::list() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [name, bytes] : files_) out.emplace_back(name, bytes.size());
  return out;
}

void MemoryStore::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  files_.erase(name);
}

HttpRangeResponse PatternTransport::get_range(const std::string&, uint64_t offset, uint64_t length,
                                              uint8_t* dst, double /*read_timeout_ms*/) {
  HttpRangeResponse response;
  response.etag = etag_;
  response.last_modified = last_modified_;
  if (offset >= size_ || length == 0) {
    response.status = 416;
    response.content_range = "bytes */" + std::to_string(size_);
    return response;
  }
  const uint64_t n = std::min(length, size_ - offset);
  fill_pattern(offset, dst, static_cast<size_t>(n));
  response.status = 206;
  response.content_range =
      "bytes " + std::to_string(offset) + "-" + std::to_string(offset + n - 1) + "/" + std::to_string(size_);
  response.body_bytes = n;
  return response;
}

}  // namespace sipllm::fuzz
