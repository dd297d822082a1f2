#include "sipllm/gguf_split.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "sipllm/error.h"

namespace sipllm {
namespace {

constexpr int kMaxParts = 99999;  // five digits in the names
constexpr uint64_t kDefaultAlignment = 32;

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

bool is_http_url(const std::string& name) {
  return name.rfind("http://", 0) == 0 || name.rfind("https://", 0) == 0;
}

std::string part_suffix(int index, int count) {
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", index + 1, count);
  return suffix;
}

// The path (for a URL, before its query) ends like a part's: "-DDDDD-of-DDDDD.gguf".
bool has_part_name(const std::string& name) {
  std::string path = name;
  if (is_http_url(name)) path = name.substr(0, name.find_first_of("?#"));
  const std::string pattern = "-#####-of-#####.gguf";
  if (path.size() <= pattern.size()) return false;
  const std::string tail = path.substr(path.size() - pattern.size());
  for (size_t i = 0; i < pattern.size(); ++i) {
    const bool digit = tail[i] >= '0' && tail[i] <= '9';
    if (pattern[i] == '#' ? !digit : tail[i] != pattern[i]) return false;
  }
  return true;
}

// "NAME (part 2 of 3 of a split model)": how errors name a part.
std::string describe_part(const std::string& name, int index, int count) {
  return name + " (part " + std::to_string(index + 1) + " of " + std::to_string(count) +
         " of a split model)";
}

// One part while the set is checked: its name, source and header.
struct Part {
  std::string name;
  std::unique_ptr<WeightSource> source;
  GgufFile header;
};

// Where one part's tensor data lies: in its file, and in the combined
// address space.
struct PartData {
  std::unique_ptr<WeightSource> source;
  uint64_t data_offset = 0;  // in the part's file
  uint64_t data_bytes = 0;   // from data_offset to the end of the file
  uint64_t base = 0;         // where data_offset lands in the combined address space
};

// The parts of a split model as one GGUF file:
//
//   [0, header_.size())            a header made here: the first part's metadata
//                                  (without the split keys) and every part's
//                                  tensors, at offsets into the ranges below
//   [parts_[k].base, + data_bytes) part k's tensor data, read from part k
//
// Gaps between the ranges (alignment padding) read as zeros.
class SplitSource final : public WeightSource {
 public:
  SplitSource(std::vector<PartData> parts, std::vector<uint8_t> header, uint64_t size)
      : parts_(std::move(parts)), header_(std::move(header)), size_(size) {}

  uint64_t size() const override { return size_; }

  std::string describe() const override { return parts_.front().source->describe(); }

  void read(uint64_t offset, void* dst, size_t length) override {
    std::vector<std::vector<ReadRequest>> per_part(parts_.size());
    plan({offset, dst, length}, per_part);
    for (size_t k = 0; k < parts_.size(); ++k) {
      for (const ReadRequest& r : per_part[k]) parts_[k].source->read(r.offset, r.dst, r.length);
    }
  }

  // Each part gets its share of the requests at once, so that a network
  // part keeps them in flight together.
  void read_many(const std::vector<ReadRequest>& requests) override {
    std::vector<std::vector<ReadRequest>> per_part(parts_.size());
    for (const ReadRequest& r : requests) plan(r, per_part);
    // Always as a batch, even of one: a part's source may keep rows read so
    // apart from whole reads (an HTTP source caches them by the row).
    for (size_t k = 0; k < parts_.size(); ++k) {
      if (!per_part[k].empty()) parts_[k].source->read_many(per_part[k]);
    }
  }

  void header_done() override {
    for (PartData& part : parts_) part.source->header_done();
  }

  int parallel_reads() const override {
    int most = 1;
    for (const PartData& part : parts_) most = std::max(most, part.source->parallel_reads());
    return most;
  }

 private:
  // Serves what lies in the made header or in gaps at once, and turns the
  // rest into reads of the parts (in their own offsets).
  void plan(const ReadRequest& request, std::vector<std::vector<ReadRequest>>& per_part) const {
    if (request.offset > size_ || request.length > size_ - request.offset) {
      throw Error(ErrorKind::kIo, describe() + ": read of " + std::to_string(request.length) +
                                      " bytes at offset " + std::to_string(request.offset) +
                                      " runs past the end of the split model (" + std::to_string(size_) +
                                      " bytes in all)");
    }
    auto* out = static_cast<uint8_t*>(request.dst);
    uint64_t at = request.offset;
    const uint64_t end = request.offset + request.length;
    while (at < end) {
      const auto n_before = [&](uint64_t limit) { return static_cast<size_t>(std::min(end, limit) - at); };
      if (at < header_.size()) {
        const size_t n = n_before(header_.size());
        std::memcpy(out, header_.data() + at, n);
        out += n;
        at += n;
        continue;
      }
      // The last part starting at or before `at`.
      auto next = std::upper_bound(parts_.begin(), parts_.end(), at,
                                   [](uint64_t offset, const PartData& p) { return offset < p.base; });
      if (next != parts_.begin()) {
        const PartData& part = *std::prev(next);
        const size_t k = static_cast<size_t>(std::prev(next) - parts_.begin());
        if (at < part.base + part.data_bytes) {
          const size_t n = n_before(part.base + part.data_bytes);
          per_part[k].push_back({part.data_offset + (at - part.base), out, n});
          out += n;
          at += n;
          continue;
        }
      }
      const size_t n = n_before(next == parts_.end() ? end : next->base);
      std::memset(out, 0, n);
      out += n;
      at += n;
    }
  }

  std::vector<PartData> parts_;
  const std::vector<uint8_t> header_;
  const uint64_t size_;
};

GgufFile parse_part(WeightSource& source, const std::string& name, int index, int count) {
  try {
    return GgufFile::parse(source);
  } catch (const Error& e) {
    throw Error(e.kind(), describe_part(name, index, count) + ": " + e.what());
  }
}

uint64_t split_key(const GgufFile& header, const char* key, const std::string& name, int index, int count) {
  try {
    return header.require_uint(key);
  } catch (const Error& e) {
    throw Error(ErrorKind::kFormat, describe_part(name, index, count) + ": " + e.what());
  }
}

// Checks that part `index` belongs to the split the first part describes.
void check_part(const Part& part, int index, int count) {
  const uint64_t its_count = split_key(part.header, kSplitCountKey, part.name, index, count);
  if (its_count != static_cast<uint64_t>(count)) {
    throw Error(ErrorKind::kFormat, describe_part(part.name, index, count) + ": it says it is one of " +
                                        std::to_string(its_count) +
                                        " parts (split.count): a part of another split");
  }
  const uint64_t its_index = split_key(part.header, kSplitNoKey, part.name, index, count);
  if (its_index != static_cast<uint64_t>(index)) {
    throw Error(ErrorKind::kFormat, describe_part(part.name, index, count) + ": it says it is part " +
                                        std::to_string(its_index + 1) +
                                        " (split.no " + std::to_string(its_index) +
                                        "): a part of another split, or misnamed");
  }
}

// The made header's metadata: the first part's, without the split keys,
// with the alignment every part's tensors satisfy.
std::vector<std::pair<std::string, GgufValue>> combined_metadata(const GgufFile& first, uint64_t alignment) {
  std::vector<std::pair<std::string, GgufValue>> metadata;
  for (const auto& [key, value] : first.metadata()) {
    if (key == kSplitNoKey || key == kSplitCountKey || key == kSplitTensorsCountKey) continue;
    if (key == "general.alignment") continue;
    metadata.emplace_back(key, value);
  }
  if (alignment != kDefaultAlignment) {
    GgufValue value;
    value.type = GgufType::kUint32;
    value.integer = static_cast<int64_t>(alignment);
    value.unsigned_integer = alignment;
    metadata.emplace_back("general.alignment", value);
  }
  return metadata;
}

}  // namespace

std::string split_part_name(const std::string& prefix, int index, int count, const std::string& query) {
  return prefix + part_suffix(index, count) + query;
}

std::optional<SplitName> parse_split_name(const std::string& name, int index, int count) {
  if (count < 1 || count > kMaxParts || index < 0 || index >= count) return std::nullopt;
  std::string path = name;
  std::string query;
  if (is_http_url(name)) {
    const size_t cut = name.find_first_of("?#");
    if (cut != std::string::npos) {
      path = name.substr(0, cut);
      query = name.substr(cut);
    }
  }
  const std::string suffix = part_suffix(index, count);
  if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  return SplitName{path.substr(0, path.size() - suffix.size()), query};
}

std::unique_ptr<WeightSource> open_split_model(std::unique_ptr<WeightSource> first,
                                               const std::string& first_name, const OpenPart& open_part) {
  // Parsing the header here and again in the engine costs a large
  // vocabulary tens of milliseconds: only a name in gguf-split's form is
  // worth a look (the engine refuses a part opened by any other name).
  if (!has_part_name(first_name)) return first;
  GgufFile first_header = GgufFile::parse(*first);
  uint64_t declared_count = 0, index = 0;
  try {
    declared_count = first_header.get_uint(kSplitCountKey, 0);
    index = first_header.get_uint(kSplitNoKey, 0);
  } catch (const Error& e) {
    throw Error(e.kind(), first_name + ": " + e.what());
  }
  if (declared_count <= 1) return first;
  if (declared_count > kMaxParts) {
    throw Error(ErrorKind::kFormat, first_name + ": split.count " + std::to_string(declared_count) +
                                        " is more parts than names can number (" + std::to_string(kMaxParts) + ")");
  }
  const int count = static_cast<int>(declared_count);
  if (index != 0) {
    std::string hint;
    if (index < declared_count) {
      if (auto name = parse_split_name(first_name, static_cast<int>(index), count)) {
        hint = " (" + split_part_name(name->prefix, 0, count, name->query) + ")";
      }
    }
    throw Error(ErrorKind::kInvalidArgument,
                first_name + " is part " + std::to_string(index + 1) + " of " + std::to_string(count) +
                    " of a split model (split.no " + std::to_string(index) +
                    "): open the model by its first part" + hint);
  }
  const std::optional<SplitName> split_name = parse_split_name(first_name, 0, count);
  if (!split_name) {
    throw Error(ErrorKind::kInvalidArgument,
                first_name + " is the first of " + std::to_string(count) +
                    " parts of a split model, but its name does not end in " + part_suffix(0, count) +
                    ": the other parts' names cannot be derived from it (keep gguf-split's names)");
  }

  std::vector<Part> parts;
  parts.reserve(static_cast<size_t>(count));
  parts.push_back({first_name, std::move(first), std::move(first_header)});
  for (int k = 1; k < count; ++k) {
    Part part;
    part.name = split_part_name(split_name->prefix, k, count, split_name->query);
    try {
      part.source = open_part(part.name);
    } catch (const Error& e) {
      throw Error(e.kind(), describe_part(part.name, k, count) + ": " + e.what());
    }
    part.header = parse_part(*part.source, part.name, k, count);
    check_part(part, k, count);
    parts.push_back(std::move(part));
  }

  // Every tensor once, and as many as the first part announced.
  std::unordered_map<std::string, int> defined_in;
  std::vector<GgufTensorInfo> tensors;
  uint64_t min_alignment = parts.front().header.alignment(), max_alignment = min_alignment;
  for (int k = 0; k < count; ++k) {
    const Part& part = parts[static_cast<size_t>(k)];
    min_alignment = std::min(min_alignment, part.header.alignment());
    max_alignment = std::max(max_alignment, part.header.alignment());
    for (const GgufTensorInfo& t : part.header.tensors()) {
      const auto [it, fresh] = defined_in.emplace(t.name, k);
      if (!fresh) {
        throw Error(ErrorKind::kFormat, "tensor '" + t.name + "' is defined twice: in " +
                                            describe_part(parts[static_cast<size_t>(it->second)].name,
                                                          it->second, count) +
                                            " and in " + describe_part(part.name, k, count));
      }
      tensors.push_back(t);
    }
  }
  if (const GgufValue* announced = parts.front().header.find(kSplitTensorsCountKey)) {
    if (!announced->is_integer() || announced->integer != static_cast<int64_t>(tensors.size())) {
      throw Error(ErrorKind::kFormat,
                  describe_part(first_name, 0, count) + ": split.tensors.count says " +
                      (announced->is_integer() ? std::to_string(announced->integer) : "(not a number)") +
                      " tensors, but the parts hold " + std::to_string(tensors.size()));
    }
  }

  // Lay the parts' data out after the made header. Its length does not
  // depend on the offsets it holds (they are fixed-width), so it is made
  // once to be measured and once more with the offsets.
  const auto metadata = combined_metadata(parts.front().header, min_alignment);
  const uint32_t version = parts.front().header.version();
  std::vector<uint64_t> relative(tensors.size(), 0);
  const uint64_t data_start =
      align_up(encode_gguf_header(version, metadata, tensors, relative).size(), min_alignment);
  uint64_t at = align_up(data_start, max_alignment);
  std::vector<PartData> layout;
  size_t i = 0;
  for (Part& part : parts) {
    PartData data;
    data.data_offset = part.header.data_offset();
    data.data_bytes = part.source->size() > data.data_offset ? part.source->size() - data.data_offset : 0;
    data.base = at;
    at = align_up(at + data.data_bytes, max_alignment);
    for (const GgufTensorInfo& t : part.header.tensors()) {
      relative[i++] = data.base - data_start + (t.offset - data.data_offset);
    }
    data.source = std::move(part.source);
    layout.push_back(std::move(data));
  }
  const uint64_t size = layout.back().base + layout.back().data_bytes;
  std::vector<uint8_t> header = encode_gguf_header(version, metadata, tensors, relative);
  header.resize(static_cast<size_t>(data_start), 0);
  // The parts' headers go here: only where their data lies is kept.
  return std::make_unique<SplitSource>(std::move(layout), std::move(header), size);
}

void write_split_model(WeightSource& source, const std::string& prefix, int parts, uint64_t data_gap) {
  const GgufFile in = GgufFile::parse(source);
  const auto& tensors = in.tensors();
  if (in.find(kSplitCountKey) != nullptr && in.get_uint(kSplitCountKey, 0) > 1) {
    throw Error(ErrorKind::kInvalidArgument, source.describe() + " is itself a part of a split model");
  }
  if (parts < 1 || parts > kMaxParts || static_cast<size_t>(parts) > std::max<size_t>(tensors.size(), 1)) {
    throw Error(ErrorKind::kInvalidArgument,
                "cannot split " + std::to_string(tensors.size()) + " tensors into " + std::to_string(parts) +
                    " parts (each part holds at least one)");
  }
  for (int k = 0; k < parts; ++k) {
    // Later parts have gguf-split's default alignment: only the first
    // carries the model's metadata, general.alignment included.
    GgufWriter writer(3, k == 0 ? in.alignment() : kDefaultAlignment);
    if (k == 0) {
      for (const auto& [key, value] : in.metadata()) {
        if (key != kSplitNoKey && key != kSplitCountKey && key != kSplitTensorsCountKey) writer.set_value(key, value);
      }
    }
    writer.set_uint16(kSplitNoKey, static_cast<uint16_t>(k));
    writer.set_uint16(kSplitCountKey, static_cast<uint16_t>(parts));
    writer.set_int32(kSplitTensorsCountKey, static_cast<int32_t>(tensors.size()));
    const size_t begin = tensors.size() * static_cast<size_t>(k) / static_cast<size_t>(parts);
    const size_t end = tensors.size() * static_cast<size_t>(k + 1) / static_cast<size_t>(parts);
    for (size_t i = begin; i < end; ++i) {
      const GgufTensorInfo& t = tensors[i];
      writer.add_tensor(t.name, t.dims, t.type_id, t.bytes, [&source, &t](std::vector<uint8_t>& bytes) {
        bytes.resize(static_cast<size_t>(t.bytes));
        source.read(t.offset, bytes.data(), bytes.size());
      });
    }
    writer.set_data_gap(data_gap);
    writer.write_file(split_part_name(prefix, k, parts));
  }
}

}  // namespace sipllm
