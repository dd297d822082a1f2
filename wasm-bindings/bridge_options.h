// The options that cross the bridge between JavaScript and the engine,
// declared once. Each list below names, per option, its JavaScript name, how
// its value is read, what range it takes, where it lands in the C++ options,
// who sets it and what it means. From these lists:
//   bindings.cpp      reads the option objects JavaScript passes (read_options),
//                     naming the offending option in every error;
//   bridge_types.cpp  writes web/src/bridge/bridge.generated.ts: the TypeScript
//                     interfaces of the same options, their documentation, and
//                     the tables the package checks options against. A ctest
//                     test (BridgeTypes.UpToDate) fails when that file is stale;
//                     scripts/build-wasm.sh writes it afresh.
// A new option is one line here plus its use in the engine.
//
// This header stays free of Emscripten so that the generator builds natively.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "sipllm/engine.h"

namespace sipllm::wasm {

// How a JavaScript value becomes a C++ field, and which TypeScript type
// describes it.
enum class OptionType {
  kInteger,     // a whole number within int                 -> number
  kNumber,      // any number but NaN (double or float field) -> number
  kByteCount,   // a whole number >= 0; 1.8e19 and up: kUnlimitedBudget -> number
  kSafeWhole,   // a whole number from 0 to 2^53 - 1 (a seed) -> number
  kBoolean,     //                                            -> boolean
  kText,        //                                            -> string
  kTextList,    // an array of strings                        -> string[]
  kTokenBiases, // [[token, bias], ...]                       -> Array<[number, number]>
  kChoice,      // one of `choices`, an enum in that order    -> 'a' | 'b'
};

enum class OptionRange {
  kAny,
  kNonNegative,  // checked by the package before a worker starts, and again here
};

// Who gives an option: the package's callers (it is part of a public options
// type), or the worker alone (it is on the wire only).
enum class OptionAudience { kPublic, kWorker };

struct OptionSpec {
  std::string_view js_name;
  OptionType type;
  OptionRange range;
  OptionAudience audience;
  std::span<const std::string_view> choices;  // kChoice only
  std::string_view member;  // the C++ field it sets: "sampling.top_p"
  std::string_view doc;  // for the TypeScript declaration; lines split at '\n'

  // The C++ options' name for it ("top_p"), as InvalidOption names it.
  std::string_view engine_name() const { return member.substr(member.rfind('.') + 1); }
};

// Enum names as JavaScript spells them, in the enum's order.
inline constexpr std::string_view kKvCacheTypeNames[] = {"f16", "f32"};
static_assert(static_cast<int>(KvCacheType::kF16) == 0 && static_cast<int>(KvCacheType::kF32) == 1);
inline constexpr std::string_view kPoolingNames[] = {"model", "mean", "cls", "last"};
static_assert(static_cast<int>(Pooling::kModel) == 0 && static_cast<int>(Pooling::kMean) == 1 &&
              static_cast<int>(Pooling::kCls) == 2 && static_cast<int>(Pooling::kLast) == 3);

inline constexpr std::span<const std::string_view> kNoChoices{};

// X(jsName, type, range, audience, choices, member, doc): `member` is the
// field of OpenOptions (wasm-bindings/session.h) the option sets; an option
// left undefined (or null) keeps that field's default. The ranges of the
// generation options are the engine's (SIPLLM_GENERATE_RANGES, which the
// generator adds to their documentation); `range` here is for the others.
#define SIPLLM_OPEN_OPTIONS(X)                                                                                      \
  X(threads, kInteger, kNonNegative, kPublic, kNoChoices, engine.threads,                                          \
    "Compute threads (threaded build only). Default: the machine's cores.")                                        \
  X(memoryBudget, kByteCount, kNonNegative, kPublic, kNoChoices, engine.loader.memory_budget,                      \
    "Bytes of weights kept in memory, prefetch ring included; units beyond it\n"                                   \
    "stream from the source (or the cache) on every token. Default: unlimited.")                                   \
  X(contextLength, kInteger, kAny, kPublic, kNoChoices, engine.context_length,                                     \
    "Tokens; default: the model's own.")                                                                           \
  X(kvCacheType, kChoice, kAny, kPublic, kKvCacheTypeNames, engine.kv_cache_type,                                  \
    "How the KV cache keeps keys and values; default 'f16' (as llama.cpp).")                                       \
  X(ringBuffers, kInteger, kAny, kPublic, kNoChoices, engine.loader.n_buffers,                                     \
    "Prefetch ring size; default 2.")                                                                              \
  X(loadThreads, kInteger, kNonNegative, kPublic, kNoChoices, engine.loader.load_threads,                          \
    "Units loaded side by side; 0 (the default): as the source prefers, 2 over\n"                                   \
    "the network, 1 from memory (the single build's sync loader: none).")                                          \
  X(prefillChunk, kInteger, kAny, kPublic, kNoChoices, engine.prefill_chunk,                                       \
    "Prompt positions per block load; default 512.")                                                              \
  X(unpack5bit, kBoolean, kAny, kPublic, kNoChoices, engine.loader.unpack_5bit,                                    \
    "Keep Q5_0 and Q5_1 matrices (a Q4_K_M file has some) a value per byte\n"                                      \
    "when the memory budget holds the whole model so: their kernels run\n"                                         \
    "about twice as fast, for half as much memory again. Default true; false\n"                                    \
    "saves that memory. The output is the same.")                                                                  \
  X(parallelRequests, kInteger, kNonNegative, kPublic, kNoChoices, http.parallel_requests,                         \
    "Range requests in flight for one read; default 4 (1 in the single build).")                                   \
  X(maxRetries, kInteger, kAny, kPublic, kNoChoices, http.max_retries,                                             \
    "Per request, on network errors, stalls, short bodies, 5xx and 429; default 4.")                               \
  X(backoffMs, kNumber, kAny, kPublic, kNoChoices, http.backoff_ms,                                                \
    "First retry delay, doubling; default 100.")                                                                   \
  X(readTimeoutMs, kNumber, kNonNegative, kPublic, kNoChoices, http.read_timeout_ms,                               \
    "No byte for this long fails the attempt (then retried); a slow transfer\n"                                    \
    "that keeps moving is never cut. Default 30000. (The single-thread build\n"                                    \
    "in a browser cannot watch bytes arrive: it gives a request this plus\n"                                       \
    "the range's time at 64 kB/s.)")                                                                               \
  X(maxRetryAfterMs, kNumber, kNonNegative, kPublic, kNoChoices, http.max_retry_after_ms,                          \
    "A 429 or 503 with Retry-After waits as asked up to this; a longer wait\n"                                     \
    "asked for fails at once, naming it. Default 30000.")                                                          \
  X(allowWholeFile, kBoolean, kAny, kPublic, kNoChoices, http.allow_whole_file,                                    \
    "Accept a server that ignores Range by downloading the whole file (a file\n"                                  \
    "larger than memoryBudget is refused); default false.")                            \
  X(cachePageBytes, kByteCount, kAny, kPublic, kNoChoices, http.page_bytes,                                        \
    "Cache page size for new entries; default 1 MiB.")                                                             \
  X(readChunkBytes, kByteCount, kAny, kWorker, kNoChoices, engine.loader.read_chunk_bytes,                         \
    "Streamed units are read in pieces of at most this many bytes.")                                               \
  X(cacheStoreId, kInteger, kAny, kWorker, kNoChoices, cache_store_id,                                             \
    "The cache store the worker registered; 0: no cache.")

// As SIPLLM_OPEN_OPTIONS, for GenerateOptions (sipllm/engine.h).
#define SIPLLM_GENERATE_OPTIONS(X)                                                                                  \
  X(maxTokens, kInteger, kAny, kPublic, kNoChoices, max_tokens, "Default 256.")                                    \
  X(temperature, kNumber, kAny, kPublic, kNoChoices, sampling.temperature, "0: greedy; default 0.8.")           \
  X(topK, kInteger, kAny, kPublic, kNoChoices, sampling.top_k, "0: all; default 40.")                           \
  X(topP, kNumber, kAny, kPublic, kNoChoices, sampling.top_p, "1: off; default 0.95.")                          \
  X(minP, kNumber, kAny, kPublic, kNoChoices, sampling.min_p, "0: off; default 0.05.")                          \
  X(typicalP, kNumber, kAny, kPublic, kNoChoices, sampling.typical_p, "Locally typical sampling; 1: off (default).") \
  X(repeatPenalty, kNumber, kAny, kPublic, kNoChoices, sampling.repeat_penalty, "Default 1 (off).")                \
  X(repeatLastN, kInteger, kAny, kPublic, kNoChoices, sampling.repeat_last_n, "-1: all; default 64.")                       \
  X(presencePenalty, kNumber, kAny, kPublic, kNoChoices, sampling.presence_penalty,                                \
    "Subtracted from the logit of each token of the last repeatLastN: once\n"                                      \
    "(presence), once per occurrence (frequency), as OpenAI defines them. Default 0.")                             \
  X(frequencyPenalty, kNumber, kAny, kPublic, kNoChoices, sampling.frequency_penalty,                              \
    "As presencePenalty, once per occurrence. Default 0.")                                                         \
  X(seed, kSafeWhole, kAny, kPublic, kNoChoices, sampling.seed, "Default: random.")                                \
  X(stop, kTextList, kAny, kPublic, kNoChoices, stop, "Generation ends before any of these.")                      \
  X(logitBias, kTokenBiases, kAny, kPublic, kNoChoices, sampling.logit_bias,                                       \
    "Added to a token's logit, as [token, bias] pairs: a finite number, or\n"                                     \
    "-Infinity, which bans the token.")                                   \
  X(addSpecial, kBoolean, kAny, kPublic, kNoChoices, add_special,                                                  \
    "BOS/EOS as the model asks; default true (false for chat).")                                                   \
  X(parseSpecial, kBoolean, kAny, kPublic, kNoChoices, parse_special,                                              \
    "\"<|im_start|>\" in the prompt is a token; default true.")                                                    \
  X(grammar, kText, kAny, kPublic, kNoChoices, grammar,                                                            \
    "A GBNF grammar (llama.cpp's format, from rule `root`) every generated\n"                                      \
    "token must continue, whatever the sampling settings; see\n"                                                   \
    "SipLLM.jsonSchemaToGrammar. Generation ends by itself once the grammar's\n"                                   \
    "sentence is complete (stopReason 'grammar complete').")

// As SIPLLM_OPEN_OPTIONS, for EmbedOptions (sipllm/engine.h).
#define SIPLLM_EMBED_OPTIONS(X)                                                                                     \
  X(pooling, kChoice, kAny, kPublic, kPoolingNames, pooling,                                                       \
    "How a text's per-position vectors become one embedding; default 'model'.")                                    \
  X(normalize, kBoolean, kAny, kPublic, kNoChoices, normalize, "To unit length (L2); default true.")               \
  X(addSpecial, kBoolean, kAny, kPublic, kNoChoices, add_special, "BOS/EOS as the model asks; default true.")

// One entry of a list as an OptionSpec (the member aside).
#define SIPLLM_OPTION_SPEC(js_name, type, range, audience, choices, member, doc) \
  OptionSpec{#js_name, OptionType::type, OptionRange::range, OptionAudience::audience, choices, #member, doc}
#define SIPLLM_OPTION_SPEC_ITEM(...) SIPLLM_OPTION_SPEC(__VA_ARGS__),

inline constexpr OptionSpec kOpenOptionSpecs[] = {SIPLLM_OPEN_OPTIONS(SIPLLM_OPTION_SPEC_ITEM)};
inline constexpr OptionSpec kGenerateOptionSpecs[] = {SIPLLM_GENERATE_OPTIONS(SIPLLM_OPTION_SPEC_ITEM)};
inline constexpr OptionSpec kEmbedOptionSpecs[] = {SIPLLM_EMBED_OPTIONS(SIPLLM_OPTION_SPEC_ITEM)};

#undef SIPLLM_OPTION_SPEC_ITEM

}  // namespace sipllm::wasm
