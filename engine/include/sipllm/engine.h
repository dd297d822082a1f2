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
#include "sipllm/options.h"
#include "sipllm/stats.h"
#include "sipllm/weight_source.h"

namespace sipllm {


struct Hyperparameter {
  std::string name;  // snake_case: "n_layers", "sliding_window"
  double value = 0;
};

// Every hyper-parameter a ModelInfo may list, in its order:
// X(name, always, what). Those not `always` are listed only where the model
// has them. The web package's ModelHyperparameters is generated from here.
#define SIPLLM_HYPERPARAMETERS(X)                                                                   \
  X(n_layers, true, "Transformer blocks.")                                                          \
  X(dim, true, "The embedding width.")                                                              \
  X(hidden_dim, true, "The feed-forward's width (the widest layer's).")                             \
  X(n_heads, true, "Attention heads.")                                                              \
  X(n_kv_heads, true, "Key and value heads.")                                                       \
  X(head_dim, true, "Floats of each head.")                                                         \
  X(n_vocab, true, "Tokens of the vocabulary.")                                                     \
  X(context_length, true, "The engine's context, at most trained_context_length.")                  \
  X(trained_context_length, true, "The context the model was trained for.")                         \
  X(rms_eps, true, "The norms' epsilon.")                                                           \
  X(rope_dims, true, "Elements of a head the rotary embedding turns.")                               \
  X(rope_freq_base, true, "The rotary embedding's base.")                                           \
  X(rope_freq_scale, false, "The rotary positions' scale, where not 1.")                            \
  X(rope_attn_factor, false, "The rotary embedding's magnitude factor, where not 1.")               \
  X(sliding_window, false, "Positions a sliding-window layer sees.")                                \
  X(local_rope_freq_base, false, "The sliding-window layers' rotary base.")                         \
  X(attn_softcap, false, "The attention scores' soft cap.")                                         \
  X(final_softcap, false, "The logits' soft cap.")                                                  \
  X(pooling_type, false, "How an embedding model pools (llama.cpp's: 1 mean, 2 CLS, 3 last, 4 rank).")     \
  X(head_dim_swa, false, "Floats of each head of the sliding-window layers.")                       \
  X(rope_dims_swa, false, "Elements the sliding-window layers' rotary embedding turns.")            \
  X(shared_kv_layers, false, "The last layers, which attend over earlier layers' keys and values.")  \
  X(n_embd_per_layer, false, "Floats of each layer's per-layer input.")                            \
  X(n_experts, false, "Experts of each mixture-of-experts layer.")                                  \
  X(n_experts_used, false, "Experts each position runs.")                                           \
  X(expert_hidden_dim, false, "An expert's feed-forward width.")                                    \
  X(shared_expert_hidden_dim, false, "The shared expert's width (Qwen3.5-MoE).")                    \
  X(leading_dense_layers, false, "The first layers, whose feed-forward is dense (LFM2-MoE).")

// The architectures (general.architecture) the engine runs, in its table's
// order: "llama", "qwen2", ...
std::vector<std::string> supported_architectures();

struct ModelInfo {
  std::string architecture;  // general.architecture: one of supported_architectures()
  std::string name;
  // The hyper-parameters that apply to this model (SIPLLM_HYPERPARAMETERS).
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
