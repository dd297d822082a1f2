// SipLLM: a GGUF inference engine (Llama, Qwen 2/3, Gemma 2/3, Phi-3, SmolLM3
// families) that streams its weights.
//
//   auto engine = sipllm::Engine::open(sipllm::open_file_source("model.gguf"));
//   sipllm::GenerateOptions options;
//   options.max_tokens = 64;
//   engine->generate("Once upon a time", options,
//                    [](const sipllm::TokenEvent& e) { std::cout << e.text; return true; });
//
// An Engine holds one model and one conversation (its KV cache). Calls on one
// Engine must come from one thread at a time, except cancel() and
// loader_stats().
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sipllm/error.h"
#include "sipllm/weight_source.h"

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
  bool resident = false;
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

struct Hyperparameter {
  std::string name;  // snake_case: "n_layers", "sliding_window"
  double value = 0;
};

struct ModelInfo {
  std::string architecture;  // general.architecture: "llama", "qwen3", ...
  std::string name;
  // The hyper-parameters that apply to this model, in a fixed order:
  // n_layers, dim, hidden_dim, n_heads, n_kv_heads, head_dim, n_vocab,
  // context_length (the engine's), trained_context_length, rms_eps,
  // rope_dims, rope_freq_base; then, where the model has them,
  // rope_freq_scale, rope_attn_factor, sliding_window, local_rope_freq_base,
  // attn_softcap, final_softcap.
  std::vector<Hyperparameter> hyperparameters;
  // The one named `key`; `fallback` when the model has none of that name.
  double hyperparameter(std::string_view key, double fallback = 0) const;
  int n_layers() const { return static_cast<int>(hyperparameter("n_layers")); }
  int n_vocab() const { return static_cast<int>(hyperparameter("n_vocab")); }
  int context_length() const { return static_cast<int>(hyperparameter("context_length")); }

  uint32_t gguf_version = 0;
  uint64_t file_bytes = 0;
  uint64_t weight_bytes = 0;
  // Multiply-adds of one position through the blocks' matrices: a prompt
  // token's share of prefill's matrix products (a prefill runs the output
  // head for its last position only). Against dot_product_peak(), how close
  // prefill comes to what the CPU can do.
  uint64_t multiply_adds_per_token = 0;
  bool tied_output = false;
  std::map<std::string, int> tensors_by_type;  // "Q8_0" -> count
  std::string tokenizer;                       // tokenizer kind
  int32_t bos = -1, eos = -1;
  std::string bos_text, eos_text;  // those tokens' text ("<s>"), for chat templates; "" when absent
  std::string chat_template;  // tokenizer.chat_template, empty when absent
};

class Engine {
 public:
  using TokenCallback = std::function<bool(const TokenEvent&)>;  // false stops

  // Reads the header and prepares the loader; weights stream later.
  static std::unique_ptr<Engine> open(std::unique_ptr<WeightSource> source,
                                      const EngineOptions& options = {});
  virtual ~Engine() = default;

  virtual const ModelInfo& info() const = 0;
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_special = true,
                                        bool parse_special = true) const = 0;
  virtual std::string detokenize(const std::vector<int32_t>& tokens) const = 0;

  // Continues the conversation: the part of `prompt`'s tokens already in the
  // KV cache is reused, the rest is prefilled, then tokens are sampled.
  virtual GenerationStats generate(std::string_view prompt, const GenerateOptions& options,
                                   const TokenCallback& on_token) = 0;
  virtual GenerationStats generate_tokens(const std::vector<int32_t>& prompt,
                                          const GenerateOptions& options,
                                          const TokenCallback& on_token) = 0;

  // Brings the KV cache to exactly `tokens` (reusing the common prefix) and
  // returns the logits of the last one; with all_positions, the logits of every
  // position that was evaluated, row after row.
  virtual std::vector<float> evaluate(const std::vector<int32_t>& tokens,
                                      bool all_positions = false) = 0;

  // Embeddings of `texts`, one vector of the model's embedding width each:
  // the final norm's output at every position of the text, pooled as asked.
  // The texts run together as one batch, layer by layer, apart from the
  // conversation, whose KV cache stays as it was. Throws Error
  // (kInvalidArgument) for an empty text, kContextFull for one longer than
  // the context, kUnsupported for a model that pools by rank.
  virtual std::vector<std::vector<float>> embed(const std::vector<std::string>& texts,
                                                const EmbedOptions& options = {}) = 0;

  // Runs the model's own kernels (the matrix product of every weight type
  // it uses, attention, norms, rope, SwiGLU) on small synthetic data for
  // about `milliseconds`, while the loader starts fetching the weights the
  // first request will need. Where code is compiled in tiers as it runs
  // (WebAssembly in a browser starts on baseline code), this moves the slow
  // first runs out of the first request. The conversation and every later
  // result stay as they were; cancel() ends it early. Throws
  // Error(kInvalidArgument) for a negative or non-finite duration.
  virtual void warm_up(double milliseconds) = 0;
  // From any thread: a running warm_up() returns between two kernels, and
  // the loader goes on fetching (a request has come, and needs the cores more
  // than the warm-up does; cancel() would also drop the loads in flight). A
  // warm_up() called after it, before any other warm_up() ended (a job
  // queued behind the load, as in the web package), returns at once.
  virtual void end_warm_up() = 0;

  // Tokens whose keys and values are in the cache.
  virtual const std::vector<int32_t>& cached_tokens() const = 0;
  virtual void reset() = 0;   // forget the conversation
  virtual void cancel() = 0;  // from any thread: the running call stops soon
  // From any thread too (a snapshot taken under the loader's lock), so that
  // the arrival of the weights can be watched while a request runs.
  virtual LoaderStats loader_stats() const = 0;
  virtual size_t kv_cache_bytes() const = 0;
};

// The ceiling of the matrix products on this CPU, as a read of memory is
// decode's: 8-bit multiply-adds per second that `threads` threads (<= 0: one
// per hardware thread) reach with the instruction the kernels' 8-bit products
// take (GenerationStats::kernels names it), doing nothing else: no loads, no
// unpacking, no scales. Measured for about `milliseconds`; throws
// Error(kInvalidArgument) for a duration that is not positive and finite.
double dot_product_peak(int threads, double milliseconds = 100);

}  // namespace sipllm
