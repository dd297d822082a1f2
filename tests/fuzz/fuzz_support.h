// What the fuzz targets share: reading structured values out of the fuzzer's
// bytes (and writing them, for the seed corpora), the check that turns a
// broken promise into a crash the fuzzer reports, and in-memory stand-ins for
// the HTTP transport and the cache store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sipllm/error.h"
#include "sipllm/http_source.h"

namespace sipllm::fuzz {

// Reports a promise the engine broke and aborts, so that libFuzzer keeps the
// input and the replay test fails on it.
[[noreturn]] void fail(const std::string& what);
#define SIPLLM_FUZZ_CHECK(condition, what) \
  do {                                     \
    if (!(condition)) ::sipllm::fuzz::fail(what); \
  } while (0)

// Runs f; an sipllm::Error is the engine's answer to bad input and fine.
// Anything else escapes (std::bad_alloc, std::length_error, ...): a crash
// to the fuzzer, since bad input must give an Error naming what was wrong.
template <typename F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Sequential reader of the fuzzer's bytes. Past the end every value is 0 and
// every string empty, so any input decodes to something.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - pos_; }
  bool empty() const { return pos_ == size_; }

  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool flag() { return (u8() & 1) != 0; }
  uint16_t u16();
  uint32_t u32();
  uint64_t u64();
  int32_t i32() { return static_cast<int32_t>(u32()); }
  // A selector byte: below kSpecialFloats one of special_float(), otherwise
  // the next four bytes as a float (any bit pattern).
  float f32();
  // A u16 length, then up to that many bytes (fewer when the input ends or
  // beyond `max`).
  std::string text(size_t max);
  std::string rest();

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// NaN, infinities, zeros of both signs, the smallest and largest floats, ...
constexpr int kSpecialFloats = 16;
float special_float(int index);

// Writes what Reader reads, for the seed generator.
class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u16(uint16_t v);
  Writer& u32(uint32_t v);
  Writer& u64(uint64_t v);
  Writer& i32(int32_t v) { return u32(static_cast<uint32_t>(v)); }
  Writer& special(int index) { return u8(static_cast<uint8_t>(index)); }
  Writer& f32(float v);
  Writer& text(const std::string& s);
  Writer& raw(const std::string& s);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// The byte at `offset` of the file the fake servers serve: bytes delivered
// from another place than asked (but a multiple of 65521 bytes away) show.
uint8_t pattern_byte(uint64_t offset);
void fill_pattern(uint64_t offset, uint8_t* dst, size_t length);
bool is_pattern(uint64_t offset, const uint8_t* bytes, size_t length);

// A read the input asks of a source: wrapped into the file's size.
struct ReadRequest {
  uint64_t offset;
  uint64_t length;
};
// Each read, at its offset modulo the file's size and cut at its end, either
// fails with an sipllm::Error or gives the pattern's bytes there.
void check_reads(HttpSource& source, const std::vector<ReadRequest>& reads);

// A CacheStore in memory.
class MemoryStore final : public CacheStore {
 public:
  void put(const std::string& name, std::string bytes);
  bool read(const std::string& name, uint64_t offset, void* dst, size_t length) override;
  void write(const std::string& name, uint64_t offset, const void* src, size_t length) override;
  std::vector<std::pair<std::string, uint64_t>> list() override;
  void remove(const std::string& name) override;

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> files_;
};

// A well-behaved server of a pattern file of `size` bytes: 206 with the
// exact Content-Range, the given validators, 416 past the end.
class PatternTransport final : public HttpTransport {
 public:
  PatternTransport(uint64_t size, std::string etag, std::string last_modified)
      : size_(size), etag_(std::move(etag)), last_modified_(std::move(last_modified)) {}
  HttpRangeResponse get_range(const std::string& url, uint64_t offset, uint64_t length,
                              uint8_t* dst, double /*read_timeout_ms*/) override;

 private:
  uint64_t size_;
  std::string etag_;
  std::string last_modified_;
};

}  // namespace sipllm::fuzz
