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
  void add_tensor(const std::string& name, const std::vector<uint64_t>& dims, TensorType type,
                  std::vector<uint8_t> data);

  std::vector<uint8_t> to_bytes() const;
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
  void write(const std::function<void(const uint8_t*, size_t)>& sink) const;

  uint32_t version_;
  uint64_t alignment_;
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace sipllm
