// Writes GGUF files (version 3 by default): the model generator's output and
// the test suite's hand-made fixtures. Follows the specification exactly (key
// types, alignment padding, tensor offsets relative to the aligned data
// section) so that other GGUF readers accept what it writes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace sipllm {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  GgufWriter& set_uint16(const std::string& key, uint16_t v);
  GgufWriter& set_uint32(const std::string& key, uint32_t v);
  GgufWriter& set_int32(const std::string& key, int32_t v);
  GgufWriter& set_uint64(const std::string& key, uint64_t v);
  GgufWriter& set_float32(const std::string& key, float v);
  GgufWriter& set_bool(const std::string& key, bool v);
  GgufWriter& set_string(const std::string& key, const std::string& v);
  GgufWriter& set_string_array(const std::string& key, const std::vector<std::string>& v);
  GgufWriter& set_float32_array(const std::string& key, const std::vector<float>& v);
  GgufWriter& set_int32_array(const std::string& key, const std::vector<int32_t>& v);
  // Copies a value read from another file (any type, arrays included).
  GgufWriter& set_value(const std::string& key, const GgufValue& v);
  void remove(const std::string& key);
  void rename(const std::string& key, const std::string& new_key);
  std::vector<std::string> keys() const;

  // Produces a tensor's bytes when the file is written, so generated models
  // never need to be in memory whole. `type_id` is ggml's type number.
  using Producer = std::function<void(std::vector<uint8_t>& bytes)>;
  void add_tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type_id,
                  uint64_t bytes, Producer produce);
  // Drops a tensor added before (a test's damaged file); false when there is none.
  bool remove_tensor(const std::string& name);
  void add_tensor(const std::string& name, const std::vector<uint64_t>& dims, TensorType type,
                  std::vector<uint8_t> data);

  // Leaves `bytes` (rounded up to the alignment) unused at the start of the
  // data section: the tensors' offsets grow by that much. write_file seeks
  // over the gap, so on file systems with sparse files it takes no space;
  // tests use it to place tensors past 4 GiB.
  void set_data_gap(uint64_t bytes);

  std::vector<uint8_t> to_bytes() const;  // a gap is zeros here
  void write_file(const std::string& path) const;  // throws Error(kIo)

  uint64_t alignment() const { return alignment_; }

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> encoded;  // type tag and value, as in the file
  };
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type_id;
    uint64_t bytes;
    Producer produce;
  };
  void store_encoded(const std::string& key, std::vector<uint8_t> encoded);
  template <typename T>
  GgufWriter& set_scalar(const std::string& key, GgufType type, T v);
  // `sink` takes bytes in file order; `skip` passes over a gap.
  void write(const std::function<void(const uint8_t*, size_t)>& sink,
             const std::function<void(uint64_t)>& skip) const;

  uint32_t version_;
  uint64_t alignment_;
  uint64_t data_gap_ = 0;
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

// A GGUF header as bytes: magic, version, counts, the metadata in order and
// the tensor infos, each tensor at `relative_offsets[i]` from the start of
// the data section. Ends where the tensor infos end: the caller pads it to
// the alignment the metadata states (32 when it states none).
std::vector<uint8_t> encode_gguf_header(uint32_t version,
                                        const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                        const std::vector<GgufTensorInfo>& tensors,
                                        const std::vector<uint64_t>& relative_offsets);

}  // namespace sipllm
