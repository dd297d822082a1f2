#include "runtime/memory_plan.h"

#include <algorithm>
#include <limits>

#include "core/kv_cache.h"
#include "runtime/recent_rows.h"
#include "runtime/recurrent_state.h"
#include "runtime/transformer.h"
#include "sipllm/error.h"

namespace sipllm {
namespace {

constexpr size_t kBufferAlignment = 64;
// Tensors of a unit closer than this in the file are read in one range: the
// gap (alignment padding, usually) costs less than another request.
constexpr uint64_t kMaxCoalesceGap = 4096;

uint64_t align_up(uint64_t n) { return (n + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }

uint64_t recent_rows_bytes(const ModelDescription& model) {
  const GgufTensorInfo* table = model.per_layer_token_embd;
  if (table == nullptr) return 0;
  const auto row_bytes = static_cast<size_t>(table->bytes / static_cast<uint64_t>(model.shape.n_vocab));
  return static_cast<uint64_t>(RecentRows::capacity_for(row_bytes)) * row_bytes;
}

WorkingMemory working_memory(const ModelDescription& model, const EngineOptions& options, int chunk, int threads) {
  WorkingMemory w;
  w.activations = Transformer::working_bytes(model, chunk, threads);
  w.kv_first_page = KvCache::first_page_bytes(model.layer_kv_dims(), options.kv_cache_type);
  w.recurrent_state = RecurrentState::bytes_with_checkpoint(model);
  w.recent_rows = recent_rows_bytes(model);
  return w;
}

size_t largest_unit_bytes(const ModelDescription& model) {
  size_t largest = 0;
  for (int u = 0; u < model.n_units(); ++u) largest = std::max(largest, lay_out_unit(model, u, false).buffer_bytes);
  return largest;
}

// The largest prefill chunk, up to the option's, whose activations leave the
// budget room for the prefetch ring. Smaller chunks cost less memory but
// stream the weights once per chunk, so the chunk shrinks only as far as the
// budget demands: for a second ring buffer (which overlaps loading with
// compute) down to kMinOverlapChunk positions, for one buffer as far as it
// takes.
int fit_prefill_chunk_to_budget(const ModelDescription& model, const EngineOptions& options, int threads) {
  constexpr int kMinOverlapChunk = 64;
  const uint64_t budget = options.loader.memory_budget;
  if (budget == kUnlimitedBudget || budget == 0) return options.prefill_chunk;
  const uint64_t largest = largest_unit_bytes(model);
  const auto fits = [&](int chunk, int buffers) {
    return working_memory(model, options, chunk, threads).total() + static_cast<uint64_t>(buffers) * largest <= budget;
  };
  const bool overlap = options.loader.mode == LoaderMode::kRing && options.loader.n_buffers >= 2;
  for (int chunk = options.prefill_chunk; overlap && chunk >= std::min(kMinOverlapChunk, options.prefill_chunk);
       chunk /= 2) {
    if (fits(chunk, 2)) return chunk;
  }
  for (int chunk = options.prefill_chunk; chunk >= 1; chunk /= 2) {
    if (fits(chunk, 1)) return chunk;
  }
  return options.prefill_chunk;  // nothing fits: planning the weights says what is needed
}

int fit_prefill_chunk(const ModelDescription& model, const EngineOptions& options, int threads) {
  int chunk = fit_prefill_chunk_to_budget(model, options, threads);
  if (model.has_recurrent_state()) {
    // The DeltaNet chunks of a hybrid model fall where they would in one
    // long prefill, whatever the budget, when every prefill chunk is a whole
    // number of them; the smallest is one of them, or the option's own
    // chunk when smaller.
    constexpr int kStep = Transformer::kDeltaNetChunk;
    chunk = chunk < kStep ? std::min(options.prefill_chunk, kStep) : chunk / kStep * kStep;
  }
  return chunk;
}

}  // namespace

size_t addressable(uint64_t bytes, const std::string& what) {
  if (bytes > std::numeric_limits<size_t>::max() / 2) {
    throw Error(ErrorKind::kOutOfBudget, what + " needs one buffer of " + std::to_string(bytes) +
                                             " bytes, more than this build can address");
  }
  return static_cast<size_t>(bytes);
}

UnitPlan lay_out_unit(const ModelDescription& model, int unit_index, bool unpack_5bit) {
  const UnitTensors& unit = model.units[static_cast<size_t>(unit_index)];
  UnitPlan plan;
  plan.name = unit.name;
  std::vector<size_t> order;
  for (size_t i = 0; i < unit.tensors.size(); ++i) {
    if (unit.tensors[i].tensor != nullptr) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return unit.tensors[a].offset() < unit.tensors[b].offset(); });

  plan.read_offsets.assign(unit.tensors.size(), 0);
  uint64_t buffer_end = 0;
  for (size_t i : order) {
    const uint64_t offset = unit.tensors[i].offset();
    const uint64_t bytes = unit.tensors[i].bytes();
    if (!plan.ranges.empty()) {
      // Tensors that share bytes in the file (a malformed one) get a range
      // each, so that preparing one in place cannot change the other.
      UnitPlan::ReadRange& last = plan.ranges.back();
      const uint64_t last_end = last.file_offset + last.length;
      if (offset >= last_end && offset <= last_end + kMaxCoalesceGap) {
        last.length = offset + bytes - last.file_offset;
        buffer_end = last.buffer_offset + last.length;
        addressable(buffer_end, unit.name);
        plan.read_offsets[i] = last.buffer_offset + static_cast<size_t>(offset - last.file_offset);
        continue;
      }
    }
    const uint64_t buffer_offset = align_up(buffer_end);
    buffer_end = buffer_offset + bytes;
    addressable(buffer_end, unit.name);
    plan.ranges.push_back({offset, bytes, static_cast<size_t>(buffer_offset)});
    plan.read_offsets[i] = static_cast<size_t>(buffer_offset);
  }
  for (const UnitPlan::ReadRange& r : plan.ranges) plan.read_bytes += r.length;

  // Matrices unpacked for the kernels take more room than they were read
  // in: everything is read `growth` bytes further into the buffer, and
  // preparing moves each tensor, in buffer order, down to where it lies
  // prepared, unpacking as it goes. A tensor then ends no later than the
  // next one's bytes begin, nor than its own did: nothing is overwritten
  // before it is read (unpack_5bit_blocks).
  plan.tensor_offsets = plan.read_offsets;
  uint64_t growth = 0;
  for (size_t i : order) {
    const TensorSlice& slice = unit.tensors[i];
    plan.tensor_offsets[i] += static_cast<size_t>(growth);
    const TensorType type = prepared_type(slice, unpack_5bit);
    if (type != slice.tensor->type) {
      const uint64_t elements = slice.rows * slice.tensor->row_length();
      growth += align_up(tensor_bytes(tensor_type_traits(type), elements) - slice.bytes());
    }
  }
  if (growth > 0) {
    for (size_t i : order) plan.read_offsets[i] += static_cast<size_t>(growth);
    for (UnitPlan::ReadRange& r : plan.ranges) r.buffer_offset += static_cast<size_t>(growth);
    buffer_end = addressable(buffer_end + growth, unit.name);
    plan.moves = std::move(order);
  }

  // Vectors stored as F16/BF16 get a float copy after the raw bytes.
  plan.vector_offsets.assign(unit.tensors.size(), SIZE_MAX);
  for (size_t i = 0; i < unit.tensors.size(); ++i) {
    const GgufTensorInfo* t = unit.tensors[i].tensor;
    if (t != nullptr && unit.tensors[i].spec->is_vector() && t->type != TensorType::kF32) {
      buffer_end = align_up(buffer_end);
      plan.vector_offsets[i] = static_cast<size_t>(buffer_end);
      buffer_end += t->elements * sizeof(float);
    }
  }
  plan.buffer_bytes = addressable(align_up(buffer_end), unit.name);
  return plan;
}

TensorType prepared_type(const TensorSlice& slice, bool unpack_5bit) {
  const TensorType type = slice.tensor->type;
  return unpack_5bit && !slice.spec->is_vector() ? unpacked_type(type) : type;
}

bool MemoryPlan::any_streamed() const {
  return std::any_of(units.begin(), units.end(), [](const UnitPlan& u) { return !u.resident; });
}

uint64_t MemoryPlan::all_weight_bytes(const ModelDescription& model) const {
  uint64_t bytes = model.tied_output ? 0 : model.token_embd->bytes;
  for (const UnitPlan& u : units) bytes += u.buffer_bytes;
  return bytes;
}

MemoryPlan MemoryPlan::make(const ModelDescription& model, const EngineOptions& options, int threads) {
  const int chunk = fit_prefill_chunk(model, options, threads);
  return for_loader(model, options.loader, working_memory(model, options, chunk, threads), chunk);
}

MemoryPlan MemoryPlan::for_loader(const ModelDescription& model, const LoaderOptions& options,
                                  const WorkingMemory& working, int prefill_chunk) {
  if (options.n_buffers < 1) {
    throw Error(ErrorKind::kInvalidArgument, "the prefetch ring needs at least 1 buffer");
  }
  MemoryPlan plan;
  plan.budget = options.memory_budget;
  plan.prefill_chunk = prefill_chunk;
  plan.working = working;
  const uint64_t working_bytes = working.total();
  const uint64_t budget = plan.budget;
  const auto holds_all = [&](const MemoryPlan& p) {
    return budget == kUnlimitedBudget || (budget != 0 && budget >= working_bytes + p.all_weight_bytes(model));
  };
  for (int u = 0; u < model.n_units(); ++u) plan.units.push_back(lay_out_unit(model, u, false));
  // Unpacked only when the budget holds every unit so: a streamed unit
  // would pay the unpacking on every pass, more than its kernels save.
  if (options.unpack_5bit) {
    MemoryPlan unpacked;
    for (int u = 0; u < model.n_units(); ++u) unpacked.units.push_back(lay_out_unit(model, u, true));
    if (holds_all(unpacked)) {
      plan.units = std::move(unpacked.units);
      plan.unpack_5bit = true;
    }
  }
  for (const UnitPlan& u : plan.units) plan.ring_buffer_bytes = std::max(plan.ring_buffer_bytes, u.buffer_bytes);
  plan.ring_buffers = options.mode == LoaderMode::kSync ? 1 : options.n_buffers;
  if (holds_all(plan)) {
    for (UnitPlan& u : plan.units) u.resident = true;
    plan.embedding_resident = !model.tied_output;
    return plan;
  }
  uint64_t remaining = 0;  // for resident weights
  if (budget != 0) {
    // The ring shrinks to what a small budget holds (down to one buffer,
    // which loads the next unit only once the current one is done); a
    // budget that cannot hold one unit beside the working memory is refused
    // with the size it needs.
    const uint64_t largest = plan.ring_buffer_bytes;
    if (budget < working_bytes + largest) {
      throw Error(ErrorKind::kOutOfBudget,
                  "memory budget of " + std::to_string(budget) +
                      " bytes cannot hold the prefetch ring: it needs at least " +
                      std::to_string(working_bytes + largest) + " bytes (one buffer of the largest unit, " +
                      std::to_string(largest) + " bytes, and " + std::to_string(working_bytes) +
                      " bytes of working memory: activations and the first page of the KV cache)");
    }
    const uint64_t available = budget - working_bytes;
    plan.ring_buffers =
        static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(plan.ring_buffers), available / largest));
    remaining = available - static_cast<uint64_t>(plan.ring_buffers) * largest;
  }
  for (int i = 0; i < model.first_expert; ++i) {
    UnitPlan& u = plan.units[static_cast<size_t>(i)];
    if (u.buffer_bytes <= remaining) {
      u.resident = true;
      remaining -= u.buffer_bytes;
    }
  }
  // Experts, last in stream order, take what is left, by use.
  for (int i = model.first_expert; i < model.n_units(); ++i) {
    plan.kept_expert_bytes = std::max(plan.kept_expert_bytes, plan.units[static_cast<size_t>(i)].buffer_bytes);
  }
  if (plan.kept_expert_bytes > 0) {
    plan.kept_expert_buffers = static_cast<int>(remaining / plan.kept_expert_bytes);
    remaining -= static_cast<uint64_t>(plan.kept_expert_buffers) * plan.kept_expert_bytes;
  }
  // The embedding table comes last: a decode step needs one row of it.
  plan.embedding_resident = !model.tied_output && model.token_embd->bytes <= remaining;
  return plan;
}

}  // namespace sipllm
