// What the engine hands back across the bridge, declared once: the model's
// description and the statistics of the loader, a generation and the HTTP
// source, field by field. As with bridge_options.h, bindings.cpp writes the
// JavaScript objects from these lists and bridge_types.cpp writes their
// TypeScript interfaces into web/src/bridge/bridge.generated.ts.
//
// Free of Emscripten, so that the generator builds natively.
#pragma once

#include <cctype>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sipllm/engine.h"
#include "sipllm/http_source.h"

namespace sipllm::wasm {

// How a C++ field becomes a JavaScript value, and its TypeScript type.
enum class ResultType {
  kNumber,   // any arithmetic field, as a double          -> number
  kBoolean,  //                                            -> boolean
  kText,     //                                            -> string
  kBudget,   // a byte budget; kUnlimitedBudget as -1       -> number
  kName,     // an enum, by its name (stop_reason_name)     -> string
  kNested,   // an object or array of its own (bindings.cpp, to_js) -> the list's `ts`
  kMaybe,    // a std::optional of one, set only when present           -> an optional `ts`
};

struct ResultSpec {
  std::string_view js_name;
  ResultType type;
  std::string_view ts;   // the TypeScript type of a kNested field ("" otherwise)
  std::string_view doc;  // "" when the name says it all
};

// A snake_case name as JavaScript spells it: "n_kv_heads" -> "nKvHeads" (the
// hyper-parameters, SIPLLM_HYPERPARAMETERS in sipllm/engine.h).
inline std::string camel_case(std::string_view snake) {
  std::string out;
  bool upper = false;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
    } else {
      out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      upper = false;
    }
  }
  return out;
}

// X(jsName, type, member, ts, doc): `member` is read from the struct named in
// the list's comment; it may be a call (prompt_tokens_per_s()).

// UnitCounters: one stream unit's counters.
#define SIPLLM_UNIT_COUNTERS_FIELDS(X)                                   \
  X(name, kText, name, "", "")                                           \
  X(loads, kNumber, loads, "", "")                                       \
  X(bytes, kNumber, bytes, "", "Bytes one load reads.")                 \
  X(memoryBytes, kNumber, memory_bytes, "", "Bytes it takes in memory.")\
  X(ioMs, kNumber, io_ms, "", "")                                        \
  X(prepareMs, kNumber, prepare_ms, "", "")                              \
  X(computeMs, kNumber, compute_ms, "", "")                              \
  X(waitMs, kNumber, wait_ms, "", "")                                    \
  X(resident, kBoolean, resident, "", "")                                \
  X(uses, kNumber, uses, "", "An expert's: the positions that chose it.")

// UnitEvent: one load of one unit (block or output-head piece) and its use;
// times in ms since the loader started, 0 where a phase did not happen.
#define SIPLLM_UNIT_EVENT_FIELDS(X)                                      \
  X(unit, kNumber, unit, "", "")                                         \
  X(ioStartMs, kNumber, io_start_ms, "", "")                             \
  X(ioEndMs, kNumber, io_end_ms, "", "")                                 \
  X(prepareEndMs, kNumber, prepare_end_ms, "", "")                       \
  X(computeStartMs, kNumber, compute_start_ms, "", "")                   \
  X(computeEndMs, kNumber, compute_end_ms, "", "")                       \
  X(hit, kBoolean, hit, "", "Ready when asked for.")                    \
  X(resident, kBoolean, resident, "", "Served from resident memory.")

// LoaderStats.
#define SIPLLM_LOADER_STATS_FIELDS(X)                                                                   \
  X(prefetchHits, kNumber, prefetch_hits, "", "")                                                       \
  X(prefetchMisses, kNumber, prefetch_misses, "", "")                                                   \
  X(residentHits, kNumber, resident_hits, "", "")                                                       \
  X(unitsLoaded, kNumber, units_loaded, "", "")                                                         \
  X(bytesRead, kNumber, bytes_read, "", "")                                                             \
  X(bytesConsumed, kNumber, bytes_consumed, "", "")                                                     \
  X(embeddingBytesRead, kNumber, embedding_bytes_read, "", "")                                          \
  X(ioMs, kNumber, io_ms, "", "")                                                                       \
  X(prepareMs, kNumber, prepare_ms, "", "")                                                             \
  X(waitMs, kNumber, wait_ms, "", "")                                                                   \
  X(computeMs, kNumber, compute_ms, "", "")                                                             \
  X(residentBytes, kNumber, resident_bytes, "", "")                                                     \
  X(ringBytes, kNumber, ring_bytes, "", "")                                                             \
  X(peakWeightBytes, kNumber, peak_weight_bytes, "", "")                                                \
  X(memoryBudget, kBudget, memory_budget, "", "Bytes the engine may take; -1: no budget.")             \
  X(workingBytes, kNumber, working_bytes, "", "Of those, activations, scratch and the KV cache so far.") \
  X(activationBytes, kNumber, activation_bytes, "", "Of those, a prefill chunk's activations and scratch.") \
  X(prefillChunk, kNumber, prefill_chunk, "", "Positions a prefill sweeps through each block at a time.") \
  X(residentUnits, kNumber, resident_units, "", "")                                                     \
  X(streamedUnits, kNumber, streamed_units, "", "")                                                     \
  X(loadThreads, kNumber, load_threads, "", "Units loaded side by side (0: the sync loader).")          \
  X(unpacked5bit, kBoolean, unpacked_5bit, "", "Q5_0 and Q5_1 matrices kept a value per byte.")        \
  X(units, kNested, units, "UnitCounters[]", "")                                                        \
  X(timeline, kNested, timeline, "UnitEvent[]", "")                                                    \
  X(timelineOriginMs, kNumber, timeline_origin_ms, "", "The timeline's 0 in ms since the Unix epoch.")

// ParallelTime: the loops a phase split between the compute threads.
#define SIPLLM_PARALLEL_TIME_FIELDS(X)                                                    \
  X(loops, kNumber, loops, "", "")                                                        \
  X(loopMs, kNumber, loop_ms, "", "Time in them, seen from the thread that opens them.") \
  X(waitMs, kNumber, wait_ms, "", "Of that, waiting for the other threads' last chunks.")

// GenerationStats.
#define SIPLLM_GENERATION_STATS_FIELDS(X)                                                             \
  X(promptTokens, kNumber, prompt_tokens, "", "")                                                     \
  X(reusedTokens, kNumber, reused_tokens, "", "")                                                     \
  X(generatedTokens, kNumber, generated_tokens, "", "")                                               \
  X(promptMs, kNumber, prompt_ms, "", "")                                                             \
  X(decodeMs, kNumber, decode_ms, "", "")                                                             \
  X(ttftMs, kNumber, ttft_ms, "", "")                                                                 \
  X(promptTokensPerS, kNumber, prompt_tokens_per_s(), "", "")                                         \
  X(decodeTokensPerS, kNumber, decode_tokens_per_s(), "", "")                                         \
  X(stopReason, kName, stop_reason, "",                                                               \
    "'end of text' | 'max tokens' | 'stop string' | 'cancelled' | 'grammar complete' | ...")          \
  X(prefillBytesRead, kNumber, prefill_bytes_read, "", "")                                            \
  X(decodeBytesRead, kNumber, decode_bytes_read, "", "")                                              \
  X(kvCacheBytes, kNumber, kv_cache_bytes, "", "")                                                    \
  X(recurrentStateBytes, kNumber, recurrent_state_bytes, "",                                          \
    "A hybrid model's recurrent state and its checkpoint (0 for other models).")                      \
  X(loader, kNested, loader, "LoaderStats", "This request's loader counters.")                        \
  X(prefillParallel, kNested, prefill_parallel, "ParallelTime", "")                                   \
  X(decodeParallel, kNested, decode_parallel, "ParallelTime", "")                                     \
  X(kernels, kText, kernels, "", "The matrix products' instructions on this CPU, in words.")

// HttpSourceStats (sipllm/http_source.h).
#define SIPLLM_SOURCE_STATS_FIELDS(X)                          \
  X(requests, kNumber, requests, "", "")                       \
  X(retries, kNumber, retries, "", "")                         \
  X(bytesFetched, kNumber, bytes_fetched, "", "")              \
  X(bytesFromCache, kNumber, bytes_from_cache, "", "")         \
  X(openedFromCache, kBoolean, opened_from_cache, "", "")      \
  X(wholeFile, kBoolean, whole_file, "", "")                   \
  X(caching, kBoolean, caching, "", "")                        \
  X(cacheError, kText, cache_error, "", "")

// ModelInfo.
#define SIPLLM_MODEL_INFO_FIELDS(X)                                                                            \
  X(architecture, kText, architecture, "",                                                                     \
    "general.architecture: one of ARCHITECTURES.")                                                             \
  X(name, kText, name, "", "")                                                                                 \
  X(hyperparameters, kNested, hyperparameters, "ModelHyperparameters", "")                                     \
  X(ggufVersion, kNumber, gguf_version, "", "")                                                                \
  X(fileBytes, kNumber, file_bytes, "", "")                                                                    \
  X(weightBytes, kNumber, weight_bytes, "", "")                                                                \
  X(multiplyAddsPerToken, kNumber, multiply_adds_per_token, "",                                               \
    "Multiply-adds of one position through the blocks' matrices: a prompt token's share of prefill's work.")  \
  X(tiedOutput, kBoolean, tied_output, "", "")                                                                 \
  X(tensorsByType, kNested, tensors_by_type, "Record<string, number>", "")                                     \
  X(tokenizer, kText, tokenizer, "", "")                                                                       \
  X(bos, kNumber, bos, "", "")                                                                                 \
  X(eos, kNumber, eos, "", "")                                                                                 \
  X(bosText, kText, bos_text, "", "")                                                                          \
  X(eosText, kText, eos_text, "", "")                                                                          \
  X(chatTemplate, kText, chat_template, "", "'' when the model has none.")

// CachedModel (sipllm/http_source.h): a model in the cache.
#define SIPLLM_CACHED_MODEL_FIELDS(X)                                      \
  X(url, kText, url, "", "")                                               \
  X(size, kNumber, size, "", "The file's size.")                          \
  X(cachedBytes, kNumber, cached_bytes, "", "How much of it is stored.")  \
  X(etag, kText, etag, "", "")                                             \
  X(lastModified, kText, last_modified, "", "")

// LiveUnit (bindings.cpp, live_units): a stream unit as the loader's
// counters describe it, cheap enough to read every ~100 ms while a request runs.
struct LiveUnit {
  std::string name;
  uint64_t bytes = 0;
  uint64_t loads = 0;
  bool resident = false;
  bool used = false;
};
#define SIPLLM_LIVE_UNIT_FIELDS(X)                                                              \
  X(name, kText, name, "", "")                                                                  \
  X(bytes, kNumber, bytes, "", "")                                                              \
  X(loads, kNumber, loads, "", "In the running (or last) request.")                            \
  X(resident, kBoolean, resident, "", "Kept in memory once loaded.")                           \
  X(used, kBoolean, used, "", "The running (or last) request has computed with it.")

// SessionStats (bindings.cpp, stats): what the package's Stats takes from the engine.
struct SessionStats {
  LoaderStats loader;
  uint64_t kv_cache_bytes = 0;
  uint64_t heap_bytes = 0;
  std::optional<HttpSourceStats> source;
  std::optional<GenerationStats> last_generation;
};
#define SIPLLM_SESSION_STATS_FIELDS(X)                                                                 \
  X(loader, kNested, loader, "LoaderStats", "")                                                        \
  X(kvCacheBytes, kNumber, kv_cache_bytes, "", "")                                                     \
  X(heapBytes, kNumber, heap_bytes, "", "The WebAssembly memory: it only grows, so also its peak.")    \
  X(source, kMaybe, source, "SourceStats", "A model opened from a URL.")                               \
  X(lastGeneration, kMaybe, last_generation, "EngineGenerationStats", "")

// JobResult (session.h, Session::take_result): how a job ended.
#define SIPLLM_JOB_OUTCOME_FIELDS(X)                                                                     \
  X(ok, kBoolean, ok, "", "")                                                                            \
  X(error, kMaybe, error(), "{ kind: string; message: string }", "")                                   \
  X(stats, kMaybe, stats, "EngineGenerationStats", "A generation's.")                                   \
  X(embeddings, kMaybe, embeddings, "{ vectors: Float32Array[]; tokens: number }",                     \
    "An embed job's vectors, and the tokens its texts took.")

#define SIPLLM_RESULT_SPEC_ITEM(js_name, type, member, ts, doc) ResultSpec{#js_name, ResultType::type, ts, doc},

inline constexpr ResultSpec kUnitCountersSpecs[] = {SIPLLM_UNIT_COUNTERS_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kUnitEventSpecs[] = {SIPLLM_UNIT_EVENT_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kLoaderStatsSpecs[] = {SIPLLM_LOADER_STATS_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kParallelTimeSpecs[] = {SIPLLM_PARALLEL_TIME_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kGenerationStatsSpecs[] = {SIPLLM_GENERATION_STATS_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kSourceStatsSpecs[] = {SIPLLM_SOURCE_STATS_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kModelInfoSpecs[] = {SIPLLM_MODEL_INFO_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kCachedModelSpecs[] = {SIPLLM_CACHED_MODEL_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kLiveUnitSpecs[] = {SIPLLM_LIVE_UNIT_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kSessionStatsSpecs[] = {SIPLLM_SESSION_STATS_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};
inline constexpr ResultSpec kJobOutcomeSpecs[] = {SIPLLM_JOB_OUTCOME_FIELDS(SIPLLM_RESULT_SPEC_ITEM)};

#undef SIPLLM_RESULT_SPEC_ITEM

}  // namespace sipllm::wasm
