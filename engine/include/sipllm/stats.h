// What an Engine reports: the tokens it generates, why it stopped, and its
// loader's and generation's figures. Part of the public API (sipllm/engine.h
// includes it); kept apart so that the engine's lower floors can fill the
// structs without the Engine interface.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sipllm/options.h"  // kUnlimitedBudget

namespace sipllm {

struct TokenEvent {
  int32_t token;
  std::string text;  // complete UTF-8 text this token finished (may be empty)
};

enum class StopReason {
  kEndOfText,
  kMaxTokens,
  kStopString,
  kCancelled,
  kCallback,
  kGrammarComplete,  // the grammar's sentence is complete and nothing may follow
};
const char* stop_reason_name(StopReason reason);

// One load of one unit and its use, for timelines. Times in ms since the
// loader started; 0 where a phase did not happen (a resident hit has no I/O).
struct UnitEvent {
  int unit = 0;
  double io_start_ms = 0, io_end_ms = 0, prepare_end_ms = 0;
  double compute_start_ms = 0, compute_end_ms = 0;
  bool hit = false;       // ready when asked for
  bool resident = false;  // served from resident memory
};

struct UnitCounters {
  std::string name;
  uint64_t loads = 0;
  uint64_t bytes = 0;  // bytes one load reads
  // Bytes it takes in memory, prepared for the kernels (more than it reads
  // where matrices are unpacked): what a pass over it reads from memory.
  uint64_t memory_bytes = 0;
  double io_ms = 0, prepare_ms = 0, compute_ms = 0, wait_ms = 0;
  // In memory now: resident, or an expert kept by use (its buffer may go to
  // an expert used more lately).
  bool resident = false;
  uint64_t uses = 0;  // an expert's: the positions that chose it
};

struct LoaderStats {
  uint64_t prefetch_hits = 0;    // asked for a streamed unit that was ready
  uint64_t prefetch_misses = 0;  // had to wait for (or, in sync mode, do) a load
  uint64_t resident_hits = 0;
  uint64_t units_loaded = 0;
  uint64_t bytes_read = 0;            // unit bytes read from the source
  // Of those, bytes of loads the computation has used: a prefetch for a step
  // that never came is read but not consumed. Counted when the unit is taken.
  uint64_t bytes_consumed = 0;
  uint64_t embedding_bytes_read = 0;  // embedding rows read from the source
  double io_ms = 0, prepare_ms = 0, wait_ms = 0, compute_ms = 0;
  uint64_t resident_bytes = 0;     // weights kept in memory for good
  uint64_t ring_bytes = 0;         // buffers currently allocated for streaming
  uint64_t peak_weight_bytes = 0;  // peak of resident + ring
  // The memory budget (kUnlimitedBudget: none), and of it what the working
  // memory takes: activations and scratch, and the KV cache so far.
  uint64_t memory_budget = kUnlimitedBudget;
  uint64_t working_bytes = 0;
  // Of the working memory, what the forward pass keeps for good:
  // activations of a prefill chunk, scratch, one position's logits.
  uint64_t activation_bytes = 0;
  int prefill_chunk = 0;  // positions a prefill sweeps through each block at a time
  int resident_units = 0;
  int streamed_units = 0;
  int load_threads = 0;  // units loaded side by side (0 in sync mode)
  bool unpacked_5bit = false;  // Q5_0, Q5_1 kept unpacked: asked for, and the budget holds the model so
  std::vector<UnitCounters> units;
  std::vector<UnitEvent> timeline;  // since the last reset_counters()
  // The timeline's 0 (the loader's start) in ms since the Unix epoch, to line
  // it up with other clocks: the page's, the server's.
  double timeline_origin_ms = 0;
};

// The loops a phase splits between the compute threads, seen from the
// thread that opens them: how many, the time in them, and of that the time
// spent waiting for the other threads' last chunks. The rest of the phase
// runs on one thread whatever the thread count. With one thread, loop_ms is
// the work that more threads would share; with more, what sharing costs.
struct ParallelTime {
  uint64_t loops = 0;
  double loop_ms = 0;
  double wait_ms = 0;
};

struct GenerationStats {
  int prompt_tokens = 0;    // tokens of the prompt
  int reused_tokens = 0;    // of those, already in the KV cache
  int generated_tokens = 0;
  double prompt_ms = 0;     // prefill of the new prompt tokens
  double decode_ms = 0;
  // Of decode_ms, the time spent choosing tokens: the sampler, and the
  // grammar if there is one (its masks, its state after each token).
  double sample_ms = 0;
  double ttft_ms = 0;       // from the call to the first generated token
  double prompt_tokens_per_s() const;
  double decode_tokens_per_s() const;
  StopReason stop_reason = StopReason::kMaxTokens;
  // Weight bytes streamed for the prefill and for decoding (loads consumed by
  // each phase; a prefetch that overlapped the prefill counts for decode).
  uint64_t prefill_bytes_read = 0;
  uint64_t decode_bytes_read = 0;
  size_t kv_cache_bytes = 0;
  // A hybrid model's recurrent state (convolution histories, DeltaNet
  // matrices) and its checkpoint: a fixed size, whatever the context.
  size_t recurrent_state_bytes = 0;
  LoaderStats loader;  // this request's loader counters
  ParallelTime prefill_parallel;
  ParallelTime decode_parallel;
  // The instructions the matrix products took on this CPU, in words: the
  // vector width and the form of the 8-bit dot product.
  std::string kernels;
};

}  // namespace sipllm
