// The plain options an Engine takes: how it loads its weights, how it
// generates, how it embeds. Part of the public API (sipllm/engine.h includes
// it); kept apart so that the engine's lower floors can use the structs
// without the Engine interface.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sipllm {

struct EngineProbe;  // sipllm/engine_probe.h

enum class LoaderMode {
  kSync,  // the compute thread reads each unit itself; one streamed unit in memory
  kRing,  // prefetch threads load the next units while the current computes
};

constexpr uint64_t kUnlimitedBudget = std::numeric_limits<uint64_t>::max();

struct LoaderOptions {
  LoaderMode mode = LoaderMode::kRing;
  int n_buffers = 2;  // ring size, at least 1 (a budget too small for it gets fewer)
  // Ring mode: units loaded side by side, each by a thread of the loader's;
  // 0 asks the source (WeightSource::parallel_reads: 2 for the network, so
  // the link stays busy across unit boundaries; 1 for a local file).
  int load_threads = 0;
  // Bytes of memory the engine may take: weights (resident units and the
  // ring), the KV cache, activations and scratch. Units stay resident in
  // stream order while the budget lasts; the rest stream on every pass; as
  // the conversation's KV cache grows, resident units give way and stream.
  // 0 keeps no weights resident: only the ring (the minimum possible), the
  // working memory unbounded.
  uint64_t memory_budget = kUnlimitedBudget;
  // Streamed units are read in pieces of at most this many bytes, so that
  // cancellation is prompt and progress is smooth.
  size_t read_chunk_bytes = 4u << 20;
  // Ring mode: start loading the first pass's units as soon as the header is
  // parsed, before any request asks for them. Over a slow link the bytes then
  // come while the tokenizer is built and the first request is awaited;
  // otherwise loading starts with the first request (or warm_up).
  bool prefetch_on_open = false;
  // Q5_0 and Q5_1 matrices (a Q4_K_M file has some) kept with each 5-bit
  // value in a byte of its own, 34 or 36 bytes per 32 values instead of 22
  // or 24, when the memory budget holds the whole model so (a streamed unit
  // would pay the unpacking on every pass, more than its kernels save).
  // Their kernels then skip spreading the fifth bits, which cost more than
  // the dot products: about twice as fast in WebAssembly, and faster
  // natively too, where the extra bytes cost less than the work saved.
  // false saves that memory. The output is the same either way.
  bool unpack_5bit = true;
};

// How the KV cache stores keys and values. F16 is llama.cpp's default and
// takes half the memory; F32 keeps them exactly as computed.
enum class KvCacheType { kF16, kF32 };

struct EngineOptions {
  int threads = 0;  // compute threads; 0 means one per core
  KvCacheType kv_cache_type = KvCacheType::kF16;
  LoaderOptions loader;
  // Prompt positions swept through each block per load; bounds activation
  // scratch. Each chunk streams each block once.
  int prefill_chunk = 512;
  // false: run the prompt one token at a time (streams the model per token;
  // each token attends as a generated one does, so a prompt of 64 tokens or
  // more rounds differently: see the README); only for comparison in
  // benchmarks.
  bool layer_major_prefill = true;
  // 0: the model's own. It also picks Phi-3's long or short rope factors, as
  // llama.cpp picks them by its context size.
  int context_length = 0;
  // Kept current while the engine works (sipllm/engine_probe.h); owned by
  // the caller, and must outlive the engine. nullptr: none.
  EngineProbe* probe = nullptr;
};

struct SamplingOptions {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: all tokens
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  // Locally typical sampling (llama.cpp's typical_p): the tokens whose
  // surprise is closest to the distribution's entropy, as many as make up
  // this much probability. > 0; >= 1: off.
  float typical_p = 1.0f;
  float repeat_penalty = 1.0f;
  // Subtracted from the logit of each token of the last repeat_last_n: the
  // presence penalty once, the frequency penalty once per occurrence
  // (OpenAI's definitions, applied as llama.cpp applies them). 0: off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int repeat_last_n = 64;
  std::optional<uint64_t> seed;  // none: a random seed
  // Added to the logits before sampling (e.g. -infinity bans a token).
  std::map<int32_t, float> logit_bias;
};

struct GenerateOptions {
  int max_tokens = 256;
  SamplingOptions sampling;
  std::vector<std::string> stop;  // generation ends before any of these
  bool add_special = true;        // BOS/EOS as the model's metadata asks
  bool parse_special = true;      // "<|im_start|>" in the prompt is a token
  // A GBNF grammar (llama.cpp's format, starting at rule `root`; see
  // sipllm/grammar.h, which also turns a JSON Schema into one). Empty: none.
  // Every sampled token then continues the grammar, whatever the sampling
  // settings; the end of generation is allowed only where the grammar may
  // end, and generation stops by itself (kGrammarComplete) once nothing can
  // follow. A text cut short by max_tokens or a stop string may be
  // incomplete. A malformed grammar throws Error(kInvalidArgument) before
  // anything runs.
  std::string grammar;
};

// The values each numeric generation option takes, declared once: the engine
// refuses a request with anything else (check_generate_options), with one
// message its clients pass on under their own names for the option; the
// package's documentation of each option is written from this list.
// X(name, member of GenerateOptions, lowest, highest, lowest excluded).
#define SIPLLM_GENERATE_RANGES(X)                                              \
  X(max_tokens, max_tokens, 0, kNoHighest, false)                              \
  X(temperature, sampling.temperature, 0, 2, false)   /* 0: greedy */          \
  X(top_k, sampling.top_k, 0, kNoHighest, false)      /* 0: all tokens */      \
  X(top_p, sampling.top_p, 0, 1, true)                /* 1: off */             \
  X(min_p, sampling.min_p, 0, 1, false)               /* 0: off */             \
  X(typical_p, sampling.typical_p, 0, 1, true)        /* 1: off */             \
  X(repeat_penalty, sampling.repeat_penalty, 0, kNoHighest, true)              \
  X(presence_penalty, sampling.presence_penalty, -2, 2, false)                 \
  X(frequency_penalty, sampling.frequency_penalty, -2, 2, false)               \
  X(repeat_last_n, sampling.repeat_last_n, -1, kNoHighest, false) /* -1: all */

struct OptionRange {
  std::string_view name;    // as GenerateOptions spells it: "top_p"
  std::string_view member;  // its path in GenerateOptions: "sampling.top_p"
  double lowest;
  double highest;           // kNoHighest: none
  bool lowest_excluded;
  // "must be above 0 and at most 1": the words every refusal uses.
  std::string requirement() const;
};

constexpr double kNoHighest = std::numeric_limits<double>::infinity();

#define SIPLLM_OPTION_RANGE_ITEM(name, member, lowest, highest, excluded) \
  OptionRange{#name, #member, lowest, highest, excluded},
inline constexpr OptionRange kGenerateOptionRanges[] = {SIPLLM_GENERATE_RANGES(SIPLLM_OPTION_RANGE_ITEM)};
#undef SIPLLM_OPTION_RANGE_ITEM

// Throws InvalidOption (sipllm/error.h) naming the first option outside its
// range, a logit bias that is not a finite number or -infinity (which bans
// the token), or (when n_vocab > 0) one for a token the vocabulary lacks.
// The engine calls it on every request; a client may call it first, to
// refuse before any work.
void check_generate_options(const GenerateOptions& options, int n_vocab = 0);

// How a text's per-position vectors become one embedding, as llama.cpp's
// llama_pooling_type: their mean, the first position's (CLS), or the last
// position's. kModel: what the file says ({arch}.pooling_type), the mean
// when it says nothing.
enum class Pooling { kModel, kMean, kCls, kLast };

struct EmbedOptions {
  Pooling pooling = Pooling::kModel;
  bool normalize = true;    // to unit length (L2), as llama.cpp's embedding tool does
  bool add_special = true;  // BOS/EOS as the model's metadata asks
};

}  // namespace sipllm
