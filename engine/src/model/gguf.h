// GGUF reader (versions 2 and 3).
//
// Parses the header, every metadata value and the tensor infos through a
// WeightSource, reading the header in a few large chunks so that a network
// source needs one or two range requests. Every length, count and offset is
// checked against the file size before it is used, so a corrupt or hostile
// file yields an Error naming the field, never a huge allocation or a crash.
// Tensor data is not read here: the loader streams it later.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "sipllm/weight_source.h"
#include "model/tensor_type.h"

namespace sipllm {

// GGUF metadata value types, as stored in the file.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* gguf_type_name(GgufType type);

struct GgufValue {
  GgufType type = GgufType::kUint8;
  // Scalars: integers and bools in `integer`, floats in `real`, strings in `text`.
  int64_t integer = 0;
  uint64_t unsigned_integer = 0;  // exact value for kUint64
  double real = 0;
  std::string text;
  // Arrays: element type and elements. Elements go to `strings`, `integers` or
  // `reals` by element type; nested arrays go to `items`.
  GgufType element_type = GgufType::kUint8;
  std::vector<std::string> strings;
  std::vector<int64_t> integers;
  std::vector<double> reals;
  std::vector<GgufValue> items;

  bool is_integer() const;  // any integer type or bool
  bool is_real() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
  uint64_t array_size() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ne0 (row length) first
  uint32_t type_id = 0;
  TensorType type = TensorType::kF32;
  uint64_t offset = 0;  // absolute file offset of the first byte
  uint64_t bytes = 0;
  uint64_t elements = 0;

  uint64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  uint64_t rows() const { return row_length() == 0 ? 0 : elements / row_length(); }
};

class GgufFile {
 public:
  // Throws Error (kFormat or kUnsupported) naming what is wrong.
  static GgufFile parse(WeightSource& source);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;

  // Typed lookups. The `require_*` forms throw a kFormat Error naming the key
  // when it is missing or of the wrong type.
  uint64_t require_uint(const std::string& key) const;
  uint64_t get_uint(const std::string& key, uint64_t fallback) const;
  double require_real(const std::string& key) const;
  double get_real(const std::string& key, double fallback) const;
  std::string require_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  const GgufValue& require_array(const std::string& key, GgufType element_type) const;
  const GgufValue* find_array(const std::string& key, GgufType element_type) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;

 private:
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace sipllm
