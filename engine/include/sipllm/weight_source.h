// WeightSource: the one seam between the model's bytes and the math.
//
// The engine reads a model file only through this interface: the GGUF header,
// each transformer block, embedding rows. Backends differ in where the bytes
// live (a file, a memory map, a buffer, the network) and are chosen for the
// storage profile, never for correctness: every backend yields the same bytes,
// so every backend yields the same logits.
//
// read() may block (a disk seek, an HTTP range request); it is called from the
// loader's prefetch threads as well as the compute thread, so implementations
// must allow concurrent calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sipllm {

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  // Total size of the file in bytes.
  virtual uint64_t size() const = 0;

  // Copies exactly `length` bytes starting at `offset` into `dst`, or throws
  // sipllm::Error (kIo or kNetwork) naming the offset. Never returns short.
  virtual void read(uint64_t offset, void* dst, size_t length) = 0;

  // Several small reads at once (the embedding rows of a prompt). A network
  // source overrides this to have them in flight together; the default reads
  // them one after another.
  struct ReadRequest {
    uint64_t offset;
    void* dst;
    size_t length;
  };
  virtual void read_many(const std::vector<ReadRequest>& requests) {
    for (const ReadRequest& r : requests) read(r.offset, r.dst, r.length);
  }

  // Where the bytes come from (a path or URL), for error messages.
  virtual std::string describe() const = 0;

  // The engine has parsed the header; block reads in any order follow. A
  // source that kept the start of the file while the header was read
  // sequentially may drop it now, so memory stays within the budget.
  virtual void header_done() {}

  // How many units the loader should read side by side. A source whose reads
  // wait on round trips (a network) keeps its link busy with two: the next
  // unit's requests are out while the last bytes of one arrive. A local file
  // gains nothing, and a second reader would take CPU time from the math.
  virtual int parallel_reads() const { return 1; }
};

// pread() on a file descriptor: one system call per read, no caching of its own.
std::unique_ptr<WeightSource> open_file_source(const std::string& path);

// A read-only memory map. Reads still copy out of the mapping; what the map buys
// is the OS page cache's readahead and buffering.
std::unique_ptr<WeightSource> open_mmap_source(const std::string& path);

// The bytes are already in memory (tests, or a file the caller fetched whole).
std::unique_ptr<WeightSource> make_memory_source(std::vector<uint8_t> bytes,
                                                 std::string name = "memory");

// Imitates slow storage or a network around any source: each read waits
// `latency_ms` (times a random factor in [1 - jitter, 1 + jitter] from a seeded
// generator), then its bytes cross one link of the given bandwidth that
// concurrent reads share, as they would share a connection. A bandwidth of 0
// means unlimited.
struct ThrottleOptions {
  double bandwidth_mb_per_s = 0;  // MB = 1e6 bytes
  double latency_ms = 0;
  double jitter = 0;              // 0..1
  uint64_t seed = 1;
};
std::unique_ptr<WeightSource> make_throttled_source(std::unique_ptr<WeightSource> inner,
                                                    const ThrottleOptions& options);

// A model split by llama.cpp's gguf-split into files NAME-00001-of-0000N.gguf
// ... NAME-0000N-of-0000N.gguf, each a GGUF file of its own (the first holds
// the metadata and the first tensors), read as one model.
//
// `first` is the source of the file named `first_name` (a path or a URL).
// When the name is not in gguf-split's form, or the header names no split
// (or a split into one part), it is returned as it is (a part opened by
// another name is refused by the engine, which tells why). Otherwise the
// other parts are opened by name with `open_part` (the names derived from
// `first_name` as llama.cpp derives them; a URL keeps its query) and the result is one source whose bytes form a single
// GGUF file: a header holding the first part's metadata and every part's
// tensors, then each part's tensor data, read from that part. Offsets are
// 64-bit throughout, so the whole can exceed 4 GiB as each part can. Each
// part stays its own source (its own cache entry, for HTTP); a read
// spanning parts is split between them.
//
// Throws Error naming the part at fault: one that cannot be opened (the
// error open_part gave, kind kept), one from another split (split.count or
// split.no wrong), a tensor defined in two parts, a total that is not
// split.tensors.count, or a first part opened by a name that does not
// follow the rule (or that is not the first part).
using OpenPart = std::function<std::unique_ptr<WeightSource>(const std::string& name)>;
std::unique_ptr<WeightSource> open_split_model(std::unique_ptr<WeightSource> first,
                                               const std::string& first_name, const OpenPart& open_part);

}  // namespace sipllm
