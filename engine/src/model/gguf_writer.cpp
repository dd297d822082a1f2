#include "model/gguf_writer.h"

#include <algorithm>

#include <cstdio>
#include <cstring>
#include <memory>

#include "sipllm/error.h"

namespace sipllm {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void put_type(std::vector<uint8_t>& out, GgufType t) { put<uint32_t>(out, static_cast<uint32_t>(t)); }

void put_scalar(std::vector<uint8_t>& out, GgufType type, int64_t integer, uint64_t unsigned_integer,
                double real, const std::string& text) {
  switch (type) {
    case GgufType::kUint8: put<uint8_t>(out, static_cast<uint8_t>(integer)); break;
    case GgufType::kInt8: put<int8_t>(out, static_cast<int8_t>(integer)); break;
    case GgufType::kUint16: put<uint16_t>(out, static_cast<uint16_t>(integer)); break;
    case GgufType::kInt16: put<int16_t>(out, static_cast<int16_t>(integer)); break;
    case GgufType::kUint32: put<uint32_t>(out, static_cast<uint32_t>(integer)); break;
    case GgufType::kInt32: put<int32_t>(out, static_cast<int32_t>(integer)); break;
    case GgufType::kUint64: put<uint64_t>(out, unsigned_integer); break;
    case GgufType::kInt64: put<int64_t>(out, integer); break;
    case GgufType::kBool: put<uint8_t>(out, integer != 0 ? 1 : 0); break;
    case GgufType::kFloat32: put<float>(out, static_cast<float>(real)); break;
    case GgufType::kFloat64: put<double>(out, real); break;
    case GgufType::kString: put_string(out, text); break;
    case GgufType::kArray: break;
  }
}

void put_value(std::vector<uint8_t>& out, const GgufValue& v) {
  if (v.type != GgufType::kArray) {
    put_scalar(out, v.type, v.integer, v.unsigned_integer, v.real, v.text);
    return;
  }
  put_type(out, v.element_type);
  put<uint64_t>(out, v.array_size());
  for (const std::string& s : v.strings) put_string(out, s);
  for (int64_t i : v.integers) put_scalar(out, v.element_type, i, static_cast<uint64_t>(i), 0, "");
  for (double r : v.reals) put_scalar(out, v.element_type, 0, 0, r, "");
  for (const GgufValue& item : v.items) put_value(out, item);
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment) : version_(version), alignment_(alignment) {
  if (alignment != 32) set_uint32("general.alignment", static_cast<uint32_t>(alignment));
}

void GgufWriter::store_encoded(const std::string& key, std::vector<uint8_t> encoded) {
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.encoded = std::move(encoded);
      return;
    }
  }
  entries_.push_back({key, std::move(encoded)});
}

void GgufWriter::remove(const std::string& key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->key == key) {
      entries_.erase(it);
      return;
    }
  }
}

void GgufWriter::rename(const std::string& key, const std::string& new_key) {
  for (Entry& e : entries_) {
    if (e.key == key) e.key = new_key;
  }
}

std::vector<std::string> GgufWriter::keys() const {
  std::vector<std::string> keys;
  for (const Entry& e : entries_) keys.push_back(e.key);
  return keys;
}

template <typename T>
GgufWriter& GgufWriter::set_scalar(const std::string& key, GgufType type, T v) {
  std::vector<uint8_t> e;
  put_type(e, type);
  put<T>(e, v);
  store_encoded(key, std::move(e));
  return *this;
}

GgufWriter& GgufWriter::set_uint16(const std::string& key, uint16_t v) {
  return set_scalar(key, GgufType::kUint16, v);
}
GgufWriter& GgufWriter::set_uint32(const std::string& key, uint32_t v) {
  return set_scalar(key, GgufType::kUint32, v);
}
GgufWriter& GgufWriter::set_int32(const std::string& key, int32_t v) {
  return set_scalar(key, GgufType::kInt32, v);
}
GgufWriter& GgufWriter::set_uint64(const std::string& key, uint64_t v) {
  return set_scalar(key, GgufType::kUint64, v);
}
GgufWriter& GgufWriter::set_float32(const std::string& key, float v) {
  return set_scalar(key, GgufType::kFloat32, v);
}
GgufWriter& GgufWriter::set_bool(const std::string& key, bool v) {
  return set_scalar(key, GgufType::kBool, static_cast<uint8_t>(v ? 1 : 0));
}

GgufWriter& GgufWriter::set_string(const std::string& key, const std::string& v) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kString);
  put_string(e, v);
  store_encoded(key, std::move(e));
  return *this;
}

GgufWriter& GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kArray);
  put_type(e, GgufType::kString);
  put<uint64_t>(e, v.size());
  for (const std::string& s : v) put_string(e, s);
  store_encoded(key, std::move(e));
  return *this;
}

GgufWriter& GgufWriter::set_float32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kArray);
  put_type(e, GgufType::kFloat32);
  put<uint64_t>(e, v.size());
  for (float f : v) put<float>(e, f);
  store_encoded(key, std::move(e));
  return *this;
}

GgufWriter& GgufWriter::set_int32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kArray);
  put_type(e, GgufType::kInt32);
  put<uint64_t>(e, v.size());
  for (int32_t i : v) put<int32_t>(e, i);
  store_encoded(key, std::move(e));
  return *this;
}

GgufWriter& GgufWriter::set_value(const std::string& key, const GgufValue& v) {
  std::vector<uint8_t> e;
  put_type(e, v.type);
  put_value(e, v);
  store_encoded(key, std::move(e));
  return *this;
}

bool GgufWriter::remove_tensor(const std::string& name) {
  const auto found = std::find_if(tensors_.begin(), tensors_.end(), [&](const Tensor& t) { return t.name == name; });
  if (found == tensors_.end()) return false;
  tensors_.erase(found);
  return true;
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<uint64_t>& dims,
                            uint32_t type_id, uint64_t bytes, Producer produce) {
  tensors_.push_back({name, dims, type_id, bytes, std::move(produce)});
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<uint64_t>& dims,
                            TensorType type, std::vector<uint8_t> data) {
  const uint64_t bytes = data.size();
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
  add_tensor(name, dims, static_cast<uint32_t>(type), bytes,
             [shared](std::vector<uint8_t>& out) { out = *shared; });
}

void GgufWriter::set_data_gap(uint64_t bytes) {
  data_gap_ = (bytes + alignment_ - 1) / alignment_ * alignment_;
}

void GgufWriter::write(const std::function<void(const uint8_t*, size_t)>& sink,
                       const std::function<void(uint64_t)>& skip) const {
  std::vector<uint8_t> header;
  put<uint32_t>(header, 0x46554747);
  put<uint32_t>(header, version_);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, entries_.size());
  for (const Entry& e : entries_) {
    put_string(header, e.key);
    header.insert(header.end(), e.encoded.begin(), e.encoded.end());
  }
  uint64_t offset = data_gap_;
  for (const Tensor& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(header, d);
    put<uint32_t>(header, t.type_id);
    put<uint64_t>(header, offset);
    offset += (t.bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  header.resize((header.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  sink(header.data(), header.size());
  if (data_gap_ > 0) skip(data_gap_);

  std::vector<uint8_t> data;
  const std::vector<uint8_t> padding(alignment_, 0);
  for (const Tensor& t : tensors_) {
    data.clear();
    t.produce(data);
    if (data.size() != t.bytes) {
      throw Error(ErrorKind::kInvalidArgument, "tensor '" + t.name + "' produced " +
                                                   std::to_string(data.size()) + " bytes, declared " +
                                                   std::to_string(t.bytes));
    }
    sink(data.data(), data.size());
    const uint64_t pad = (alignment_ - t.bytes % alignment_) % alignment_;
    sink(padding.data(), static_cast<size_t>(pad));
  }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  write([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); },
        [&](uint64_t n) { out.resize(out.size() + static_cast<size_t>(n), 0); });
  return out;
}

void GgufWriter::write_file(const std::string& path) const {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) throw Error(ErrorKind::kIo, path + ": cannot open for writing");
  write(
      [&](const uint8_t* p, size_t n) {
        if (n > 0 && std::fwrite(p, 1, n, file.get()) != n) {
          throw Error(ErrorKind::kIo, path + ": write failed");
        }
      },
      [&](uint64_t n) {
        // The data written after the gap extends the file over it.
        if (::fseeko(file.get(), static_cast<off_t>(n), SEEK_CUR) != 0) {
          throw Error(ErrorKind::kIo, path + ": cannot seek past a gap of " + std::to_string(n) + " bytes");
        }
      });
  if (std::fflush(file.get()) != 0) throw Error(ErrorKind::kIo, path + ": write failed");
}

std::vector<uint8_t> encode_gguf_header(uint32_t version,
                                        const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                        const std::vector<GgufTensorInfo>& tensors,
                                        const std::vector<uint64_t>& relative_offsets) {
  std::vector<uint8_t> header;
  put<uint32_t>(header, 0x46554747);
  put<uint32_t>(header, version);
  put<uint64_t>(header, tensors.size());
  put<uint64_t>(header, metadata.size());
  for (const auto& [key, value] : metadata) {
    put_string(header, key);
    put_type(header, value.type);
    put_value(header, value);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = tensors[i];
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(header, d);
    put<uint32_t>(header, t.type_id);
    put<uint64_t>(header, relative_offsets[i]);
  }
  return header;
}

}  // namespace sipllm
