#include "model/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "sipllm/error.h"

namespace sipllm {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr uint32_t kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 4;
constexpr size_t kHeaderChunk = 1 << 20;      // header reads come in 1 MiB ranges

[[noreturn]] void format_error(const std::string& message) {
  throw Error(ErrorKind::kFormat, message);
}

// A count the file can hold may still be more than memory can: a size_t is
// 32 bits in WebAssembly, where files past 4 GiB are read too. Checked
// before it is narrowed, so that it is an error rather than a shorter read.
size_t in_memory(uint64_t count, const std::string& what) {
  if (count > std::numeric_limits<size_t>::max() / 2) {
    format_error(what + ": a length of " + std::to_string(count) + " is more than this build can hold in memory");
  }
  return static_cast<size_t>(count);
}

// Sequential little-endian reader over a WeightSource, buffering the header in
// large chunks. Every read is checked against the file size first.
class Cursor {
 public:
  explicit Cursor(WeightSource& source) : source_(source), size_(source.size()) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }

  void read(void* dst, size_t length, const char* what) {
    if (length > remaining()) {
      format_error("truncated file: " + std::string(what) + " needs " + std::to_string(length) +
                   " bytes at offset " + std::to_string(offset_) + " but the file has " +
                   std::to_string(size_) + " bytes");
    }
    auto* out = static_cast<uint8_t*>(dst);
    while (length > 0) {
      if (offset_ < buffer_start_ || offset_ >= buffer_start_ + buffer_.size()) refill();
      const size_t in_buffer = static_cast<size_t>(buffer_start_ + buffer_.size() - offset_);
      const size_t n = std::min(length, in_buffer);
      std::memcpy(out, buffer_.data() + (offset_ - buffer_start_), n);
      out += n;
      offset_ += n;
      length -= n;
    }
  }

  template <typename T>
  T read_scalar(const char* what) {
    T value;
    read(&value, sizeof value, what);
    return value;
  }

  std::string read_string(const char* what) {
    const auto length = read_scalar<uint64_t>(what);
    if (length > remaining()) {
      format_error(std::string(what) + " at offset " + std::to_string(offset_ - 8) +
                   " claims " + std::to_string(length) + " bytes, past the end of the file");
    }
    std::string s(in_memory(length, what), '\0');
    read(s.data(), s.size(), what);
    return s;
  }

 private:
  void refill() {
    buffer_start_ = offset_;
    buffer_.resize(static_cast<size_t>(std::min<uint64_t>(kHeaderChunk, remaining())));
    source_.read(buffer_start_, buffer_.data(), buffer_.size());
  }

  WeightSource& source_;
  uint64_t size_;
  uint64_t offset_ = 0;
  uint64_t buffer_start_ = 0;
  std::vector<uint8_t> buffer_;
};

size_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;  // at least the length prefix
    case GgufType::kArray: return 12;  // at least element type and count
  }
  return 0;
}

bool is_real_type(GgufType type) {
  return type == GgufType::kFloat32 || type == GgufType::kFloat64;
}

bool is_integer_type(GgufType type) {
  return !is_real_type(type) && type != GgufType::kString && type != GgufType::kArray;
}

bool valid_type(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufType::kFloat64); }

// Reads one scalar of `type` into `value` (which must already have `type` set
// for scalars, or is an array element slot).
void read_scalar_into(Cursor& cursor, GgufType type, int64_t* integer, uint64_t* unsigned_integer,
                      double* real, std::string* text, const std::string& key) {
  const char* what = "metadata value";
  switch (type) {
    case GgufType::kUint8: *integer = cursor.read_scalar<uint8_t>(what); break;
    case GgufType::kInt8: *integer = cursor.read_scalar<int8_t>(what); break;
    case GgufType::kUint16: *integer = cursor.read_scalar<uint16_t>(what); break;
    case GgufType::kInt16: *integer = cursor.read_scalar<int16_t>(what); break;
    case GgufType::kUint32: *integer = cursor.read_scalar<uint32_t>(what); break;
    case GgufType::kInt32: *integer = cursor.read_scalar<int32_t>(what); break;
    case GgufType::kInt64: *integer = cursor.read_scalar<int64_t>(what); break;
    case GgufType::kUint64: {
      *unsigned_integer = cursor.read_scalar<uint64_t>(what);
      *integer = static_cast<int64_t>(*unsigned_integer);
      break;
    }
    case GgufType::kBool: {
      const auto b = cursor.read_scalar<uint8_t>(what);
      if (b > 1) format_error("metadata key '" + key + "': bool value " + std::to_string(b));
      *integer = b;
      break;
    }
    case GgufType::kFloat32: *real = cursor.read_scalar<float>(what); break;
    case GgufType::kFloat64: *real = cursor.read_scalar<double>(what); break;
    case GgufType::kString: *text = cursor.read_string("metadata string"); break;
    case GgufType::kArray: break;  // handled by the caller
  }
  if (type != GgufType::kUint64 && is_integer_type(type) && *integer >= 0) {
    *unsigned_integer = static_cast<uint64_t>(*integer);
  }
}

GgufValue read_value(Cursor& cursor, GgufType type, const std::string& key, int depth) {
  GgufValue value;
  value.type = type;
  if (type != GgufType::kArray) {
    read_scalar_into(cursor, type, &value.integer, &value.unsigned_integer, &value.real,
                     &value.text, key);
    return value;
  }
  if (depth >= kMaxArrayNesting) format_error("metadata key '" + key + "': arrays nested too deep");
  const uint64_t array_start = cursor.offset();
  const auto raw_element = cursor.read_scalar<uint32_t>("array element type");
  if (!valid_type(raw_element)) {
    format_error("metadata key '" + key + "': unknown array element type " +
                 std::to_string(raw_element) + " at offset " + std::to_string(array_start));
  }
  value.element_type = static_cast<GgufType>(raw_element);
  const auto count = cursor.read_scalar<uint64_t>("array length");
  // Each element takes at least scalar_size() bytes, so a count the rest of the
  // file cannot hold is rejected before anything is allocated for it.
  if (count > cursor.remaining() / scalar_size(value.element_type)) {
    format_error("metadata key '" + key + "': array of " + std::to_string(count) +
                 " elements at offset " + std::to_string(array_start) +
                 " does not fit in the file");
  }
  const size_t n = in_memory(count, "metadata key '" + key + "'");
  switch (value.element_type) {
    case GgufType::kString:
      value.strings.reserve(n);
      for (size_t i = 0; i < n; ++i) value.strings.push_back(cursor.read_string("metadata string"));
      break;
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      value.reals.resize(n);
      for (size_t i = 0; i < n; ++i) {
        int64_t unused_i = 0;
        uint64_t unused_u = 0;
        read_scalar_into(cursor, value.element_type, &unused_i, &unused_u, &value.reals[i],
                         nullptr, key);
      }
      break;
    case GgufType::kArray:
      value.items.reserve(n);
      for (size_t i = 0; i < n; ++i) value.items.push_back(read_value(cursor, GgufType::kArray, key, depth + 1));
      break;
    default:
      value.integers.resize(n);
      for (size_t i = 0; i < n; ++i) {
        uint64_t unused_u = 0;
        read_scalar_into(cursor, value.element_type, &value.integers[i], &unused_u, nullptr,
                         nullptr, key);
      }
      break;
  }
  return value;
}

std::string type_mismatch(const std::string& key, const GgufValue& v, const char* wanted) {
  return "metadata key '" + key + "' has type " + gguf_type_name(v.type) + ", expected " + wanted;
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const { return is_integer_type(type); }

uint64_t GgufValue::array_size() const {
  return strings.size() + integers.size() + reals.size() + items.size();
}

GgufFile GgufFile::parse(WeightSource& source) {
  GgufFile file;
  file.file_size_ = source.size();
  Cursor cursor(source);

  if (cursor.read_scalar<uint32_t>("magic") != kGgufMagic) {
    format_error(source.describe() + ": not a GGUF file (wrong magic at offset 0)");
  }
  file.version_ = cursor.read_scalar<uint32_t>("version");
  if (file.version_ != 2 && file.version_ != 3) {
    throw Error(ErrorKind::kUnsupported, source.describe() + ": GGUF version " +
                                             std::to_string(file.version_) +
                                             " is not supported (versions 2 and 3 are)");
  }
  const auto tensor_count = cursor.read_scalar<uint64_t>("tensor count");
  const auto kv_count = cursor.read_scalar<uint64_t>("metadata count");
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes, a
  // tensor info at least 8 + 4 + 4 + 8.
  if (kv_count > cursor.remaining() / 13) {
    format_error("metadata count " + std::to_string(kv_count) + " at offset 16 exceeds what the file can hold");
  }
  if (tensor_count > cursor.remaining() / 24) {
    format_error("tensor count " + std::to_string(tensor_count) + " at offset 8 exceeds what the file can hold");
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = cursor.read_string("metadata key");
    const uint64_t type_offset = cursor.offset();
    const auto raw_type = cursor.read_scalar<uint32_t>("metadata type");
    if (!valid_type(raw_type)) {
      format_error("metadata key '" + key + "': unknown value type " + std::to_string(raw_type) +
                   " at offset " + std::to_string(type_offset));
    }
    GgufValue value = read_value(cursor, static_cast<GgufType>(raw_type), key, 0);
    if (file.metadata_index_.count(key) != 0) format_error("duplicate metadata key '" + key + "'");
    file.metadata_index_.emplace(key, file.metadata_.size());
    file.metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = file.find("general.alignment")) {
    if (!a->is_integer() || a->unsigned_integer == 0 ||
        (a->unsigned_integer & (a->unsigned_integer - 1)) != 0 || a->unsigned_integer > (1u << 20)) {
      format_error("metadata key 'general.alignment' must be a power of two up to 1 MiB");
    }
    file.alignment_ = a->unsigned_integer;
  }

  file.tensors_.reserve(in_memory(tensor_count, "the tensor count"));
  std::vector<uint64_t> relative_offsets;
  relative_offsets.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    t.name = cursor.read_string("tensor name");
    const auto n_dims = cursor.read_scalar<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      format_error("tensor '" + t.name + "': " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    }
    t.elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = cursor.read_scalar<uint64_t>("tensor dimension");
      // No tensor can have more elements than the file has bits; this also
      // keeps the running product far from overflow.
      if (dim == 0 || dim > file.file_size_ * 8 || t.elements > file.file_size_ * 8 / dim) {
        format_error("tensor '" + t.name + "': dimension " + std::to_string(d) + " = " +
                     std::to_string(dim) + " is impossible for a file of " +
                     std::to_string(file.file_size_) + " bytes");
      }
      t.dims.push_back(dim);
      t.elements *= dim;
    }
    t.type_id = cursor.read_scalar<uint32_t>("tensor type");
    const TensorTypeTraits* traits = tensor_type_traits(t.type_id);
    if (traits == nullptr) {
      throw Error(ErrorKind::kUnsupported, "tensor '" + t.name + "' has type " +
                                               tensor_type_name(t.type_id) +
                                               ", which this engine does not support");
    }
    t.type = static_cast<TensorType>(t.type_id);
    if (t.dims[0] % traits->block_elements != 0) {
      format_error("tensor '" + t.name + "': row length " + std::to_string(t.dims[0]) +
                   " is not a multiple of the " + traits->name + " block size " +
                   std::to_string(traits->block_elements));
    }
    t.bytes = tensor_bytes(*traits, t.elements);
    relative_offsets.push_back(cursor.read_scalar<uint64_t>("tensor offset"));
    if (file.tensor_index_.count(t.name) != 0) format_error("duplicate tensor '" + t.name + "'");
    file.tensor_index_.emplace(t.name, file.tensors_.size());
    file.tensors_.push_back(std::move(t));
  }

  const uint64_t header_end = cursor.offset();
  file.data_offset_ = (header_end + file.alignment_ - 1) / file.alignment_ * file.alignment_;
  if (tensor_count > 0 && file.data_offset_ > file.file_size_) {
    format_error("tensor data section at offset " + std::to_string(file.data_offset_) +
                 " starts past the end of the file (" + std::to_string(file.file_size_) + " bytes)");
  }
  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    GgufTensorInfo& t = file.tensors_[i];
    const uint64_t rel = relative_offsets[i];
    if (rel % file.alignment_ != 0) {
      format_error("tensor '" + t.name + "': data offset " + std::to_string(rel) +
                   " is not aligned to " + std::to_string(file.alignment_));
    }
    const uint64_t room = file.file_size_ - file.data_offset_;
    if (rel > room || t.bytes > room - rel) {
      format_error("tensor '" + t.name + "': data at offset " + std::to_string(file.data_offset_ + rel) +
                   " (" + std::to_string(t.bytes) + " bytes) lies outside the file (" +
                   std::to_string(file.file_size_) + " bytes)");
    }
    t.offset = file.data_offset_ + rel;
  }
  return file;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

uint64_t GgufFile::require_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) format_error("missing required metadata key '" + key + "'");
  if (!v->is_integer() || (v->type != GgufType::kUint64 && v->integer < 0)) {
    format_error(type_mismatch(key, *v, "a non-negative integer"));
  }
  return v->unsigned_integer;
}

uint64_t GgufFile::get_uint(const std::string& key, uint64_t fallback) const {
  return find(key) == nullptr ? fallback : require_uint(key);
}

double GgufFile::require_real(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) format_error("missing required metadata key '" + key + "'");
  if (v->is_real()) return v->real;
  if (v->is_integer()) return static_cast<double>(v->integer);
  format_error(type_mismatch(key, *v, "a number"));
}

double GgufFile::get_real(const std::string& key, double fallback) const {
  return find(key) == nullptr ? fallback : require_real(key);
}

std::string GgufFile::require_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) format_error("missing required metadata key '" + key + "'");
  if (v->type != GgufType::kString) format_error(type_mismatch(key, *v, "string"));
  return v->text;
}

std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return find(key) == nullptr ? fallback : require_string(key);
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_integer()) format_error(type_mismatch(key, *v, "bool"));
  return v->integer != 0;
}

const GgufValue* GgufFile::find_array(const std::string& key, GgufType element_type) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return nullptr;
  if (v->type != GgufType::kArray) format_error(type_mismatch(key, *v, "array"));
  const bool ok = v->element_type == element_type ||
                  (is_integer_type(v->element_type) && is_integer_type(element_type)) ||
                  (is_real_type(v->element_type) && is_real_type(element_type));
  if (!ok) {
    format_error("metadata key '" + key + "' is an array of " + gguf_type_name(v->element_type) +
                 ", expected an array of " + gguf_type_name(element_type));
  }
  return v;
}

const GgufValue& GgufFile::require_array(const std::string& key, GgufType element_type) const {
  const GgufValue* v = find_array(key, element_type);
  if (v == nullptr) format_error("missing required metadata key '" + key + "'");
  return *v;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace sipllm
