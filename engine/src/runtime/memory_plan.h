// MemoryPlan: what the memory budget holds, decided once when a model is
// opened, from its description, the budget and the options: the working
// memory set aside first (activations of a prefill chunk, the KV cache's
// first page, a hybrid model's recurrent state, kept per-layer rows), the
// prefill chunk that leaves room for the ring, how each unit lies in memory
// (read ranges, offsets, unpacked or not), which units stay resident, the
// ring's buffers and whether the embedding table stays.
//
// The LayerLoader executes the plan; stats() reports it. The one decision
// left to run time is the loader's: as the conversation's KV cache grows
// past its first page, resident units give way (LayerLoader::claim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_description.h"
#include "sipllm/options.h"

namespace sipllm {

// How one stream unit lies in its buffer and whether it stays resident.
struct UnitPlan {
  struct ReadRange {
    uint64_t file_offset;
    uint64_t length;
    size_t buffer_offset;
  };
  std::string name;
  std::vector<ReadRange> ranges;
  std::vector<size_t> read_offsets;    // where each tensor's bytes land in the buffer
  std::vector<size_t> tensor_offsets;  // where it lies prepared
  std::vector<size_t> moves;           // tensors to move there, in buffer order (none if it is where it lands)
  std::vector<size_t> vector_offsets;  // float copies of non-F32 norm vectors (or SIZE_MAX)
  size_t buffer_bytes = 0;
  uint64_t read_bytes = 0;
  bool resident = false;
};

// The working memory the budget sets aside before any weight.
struct WorkingMemory {
  uint64_t activations = 0;      // Transformer::working_bytes for the plan's prefill chunk
  uint64_t kv_first_page = 0;    // allocated at open; later pages are claimed as they come
  uint64_t recurrent_state = 0;  // a hybrid model's, with its checkpoint
  uint64_t recent_rows = 0;      // per-layer embedding rows kept (Gemma 4)
  uint64_t total() const { return activations + kv_first_page + recurrent_state + recent_rows; }
};

struct MemoryPlan {
  uint64_t budget = kUnlimitedBudget;  // LoaderOptions::memory_budget
  int prefill_chunk = 1;
  WorkingMemory working;
  bool unpack_5bit = false;  // Q5_0 and Q5_1 kept unpacked: asked for, and the budget holds every unit so
  std::vector<UnitPlan> units;
  bool embedding_resident = false;  // the untied token_embd read whole, once
  // Buffers of the ring when something streams (what the budget allows of
  // the ring asked for), each holding the largest unit as the file has it.
  int ring_buffers = 1;
  size_t ring_buffer_bytes = 0;
  // A mixture of experts whose experts the budget cannot all hold: the
  // budget left after the other units keeps experts by use instead of the
  // first ones in stream order (LayerLoader, ExpertUse), in buffers of the
  // largest expert. 0 when every expert is resident or nothing is left.
  int kept_expert_buffers = 0;
  size_t kept_expert_bytes = 0;

  // The plan of an engine with `threads` compute threads. Throws
  // Error(kOutOfBudget) naming the size needed when a non-zero budget cannot
  // hold one unit beside the working memory.
  static MemoryPlan make(const ModelDescription& model, const EngineOptions& options, int threads);
  // The weights' part alone, beside `working` memory and for the given
  // prefill chunk (a loader driven without an engine).
  static MemoryPlan for_loader(const ModelDescription& model, const LoaderOptions& options,
                               const WorkingMemory& working = {}, int prefill_chunk = 1);

  bool any_streamed() const;
  // Bytes of every unit as laid out, and the untied embedding table.
  uint64_t all_weight_bytes(const ModelDescription& model) const;
};

// The type a tensor of a unit is kept in, prepared for the kernels.
TensorType prepared_type(const TensorSlice& slice, bool unpack_5bit);
// How `unit` lies in one buffer, its Q5_0/Q5_1 matrices unpacked or not.
UnitPlan lay_out_unit(const ModelDescription& model, int unit, bool unpack_5bit);
// File offsets and sizes are 64-bit, a size_t is 32 bits in WebAssembly:
// `bytes` narrowed, or Error(kOutOfBudget) naming `what` when no buffer of
// this build can hold them.
size_t addressable(uint64_t bytes, const std::string& what);

}  // namespace sipllm
