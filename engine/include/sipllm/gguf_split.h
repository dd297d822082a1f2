// Models split by llama.cpp's gguf-split: NAME-00001-of-0000N.gguf up to
// NAME-0000N-of-0000N.gguf, each a complete GGUF file. The first holds all
// of the model's metadata and the first tensors, the others only the rest of
// the tensors; every part says where it belongs with split.no (uint16,
// counting from 0), split.count (uint16) and split.tensors.count (int32, the
// tensors of all parts). open_split_model (sipllm/weight_source.h) reads
// such a set as one model; this header holds the naming rule and a writer of
// split sets (the CLI's `sipllm split`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sipllm/weight_source.h"

namespace sipllm {

inline constexpr const char* kSplitNoKey = "split.no";
inline constexpr const char* kSplitCountKey = "split.count";
inline constexpr const char* kSplitTensorsCountKey = "split.tensors.count";

// The name of part `index` (from 0) of `count`: llama.cpp's llama_split_path,
// "PREFIX-%05d-of-%05d.gguf" with index + 1. For an http(s) URL the query
// and fragment stay at the end: PREFIX may not hold them.
std::string split_part_name(const std::string& prefix, int index, int count,
                            const std::string& query = "");

// Where `name` is part `index` of `count` by that rule: its prefix and, for
// a URL, its query and fragment ("?..." or "#..."). Nullopt when the name
// does not end that way (llama.cpp's llama_split_prefix).
struct SplitName {
  std::string prefix;
  std::string query;
};
std::optional<SplitName> parse_split_name(const std::string& name, int index, int count);

// Writes `source`'s model as `parts` files PREFIX-00001-of-0000N.gguf ... as
// gguf-split --split does: the first part has all the metadata and, like
// every part, a run of tensors in file order (as evenly as they divide);
// every part gets the split keys. `data_gap` leaves that many bytes (sparse
// on disk) before each part's tensor data, so that tests can place tensors
// past 4 GiB. Throws Error naming what is wrong (too many parts for the
// tensors, an unwritable file).
void write_split_model(WeightSource& source, const std::string& prefix, int parts, uint64_t data_gap = 0);

}  // namespace sipllm
