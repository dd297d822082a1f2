// The public Engine: ties the reader, tokenizer, loader, transformer and
// sampler into a conversation with a KV cache.
#include "sipllm/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

#include "model/gguf.h"
#include "runtime/grammar_filter.h"
#include "kernels/matmul.h"
#include "runtime/kernel_warm_up.h"
#include "core/kv_cache.h"
#include "runtime/layer_loader.h"
#include "runtime/recurrent_state.h"
#include "model/model_description.h"
#include "runtime/sampler.h"
#include "text/stop_strings.h"
#include "core/thread_pool.h"
#include "text/tokenizer.h"
#include "runtime/transformer.h"

namespace sipllm {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

ParallelTime parallel_since(const ParallelTime& before, const ParallelTime& after) {
  return {after.loops - before.loops, after.loop_ms - before.loop_ms, after.wait_ms - before.wait_ms};
}

ModelInfo describe(const GgufFile& gguf, const ModelDescription& model, const Tokenizer& tokenizer) {
  ModelInfo info;
  info.architecture = model.architecture;
  info.name = model.name;
  for (auto& [name, value] : model.hyperparameters()) info.hyperparameters.push_back({name, value});
  info.gguf_version = gguf.version();
  info.file_bytes = gguf.file_size();
  info.weight_bytes = model.weight_bytes();
  info.multiply_adds_per_token = model.block_multiply_adds();
  info.tied_output = model.tied_output;
  for (const GgufTensorInfo& t : gguf.tensors()) ++info.tensors_by_type[tensor_type_name(t.type_id)];
  info.tokenizer = tokenizer.kind();
  info.bos = tokenizer.bos();
  info.eos = tokenizer.eos();
  if (info.bos >= 0) info.bos_text = tokenizer.token_text(info.bos);
  if (info.eos >= 0) info.eos_text = tokenizer.token_text(info.eos);
  info.chat_template = gguf.get_string("tokenizer.chat_template", "");
  return info;
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<WeightSource> source, const EngineOptions& options)
      : source_(std::move(source)),
        options_(options),
        gguf_(GgufFile::parse(*source_)),
        model_(describe_model(gguf_, options.context_length)),
        pool_(options.threads, options.probe),
        plan_(MemoryPlan::make(model_, options, pool_.size())),
        // Made before the tokenizer, so that a loader told to prefetch on
        // open has its requests out while the vocabulary is built.
        loader_(*source_, model_, plan_, options.loader, options.probe),
        tokenizer_(Tokenizer::from_gguf(gguf_)),
        info_(describe(gguf_, model_, *tokenizer_)),
        transformer_(model_, loader_, pool_, plan_.prefill_chunk),
        cache_(model_.layer_kv_dims(), model_.shape.context_length, options.kv_cache_type,
               transformer_.kv_capacity()),
        state_(model_) {
    source_->header_done();
    cache_.reserve(1);
    if (tokenizer_->n_vocab() != model_.shape.n_vocab) {
      throw Error(ErrorKind::kFormat, "the tokenizer has " + std::to_string(tokenizer_->n_vocab()) +
                                          " tokens but token_embd.weight has " +
                                          std::to_string(model_.shape.n_vocab) + " rows");
    }
  }

  const ModelInfo& info() const override { return info_; }

  std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                bool parse_special) const override {
    return tokenizer_->encode(text, add_special, parse_special);
  }

  std::string detokenize(const std::vector<int32_t>& tokens) const override {
    for (int32_t t : tokens) check_token(t);
    return tokenizer_->decode(tokens);
  }

  GenerationStats generate(std::string_view prompt, const GenerateOptions& options,
                           const TokenCallback& on_token) override {
    return generate_tokens(tokenize(prompt, options.add_special, options.parse_special), options,
                           on_token);
  }

  GenerationStats generate_tokens(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                  const TokenCallback& on_token) override {
    const auto start = Clock::now();
    if (prompt.empty()) {
      throw Error(ErrorKind::kInvalidArgument, "the prompt is empty (and the model adds no BOS token)");
    }
    check_generate_options(options, model_.shape.n_vocab);
    for (int32_t t : prompt) check_token(t);
    const int64_t needed = static_cast<int64_t>(prompt.size()) + options.max_tokens;
    if (needed > cache_.context_length()) {
      throw Error(ErrorKind::kContextFull,
                  "the prompt (" + std::to_string(prompt.size()) + " tokens) plus " +
                      std::to_string(options.max_tokens) + " requested tokens exceed the context length " +
                      std::to_string(cache_.context_length()));
    }
    Sampler sampler(options.sampling, model_.shape.n_vocab);
    StopStrings stops(options.stop);
    // Parsed before any work, so that a malformed grammar fails at once.
    std::unique_ptr<GrammarFilter> grammar;
    if (!options.grammar.empty()) {
      std::shared_ptr<const Grammar> parsed = Grammar::parse(options.grammar);
      if (grammar_vocabulary_ == nullptr) grammar_vocabulary_ = std::make_shared<GrammarVocabulary>(*tokenizer_);
      // The decoder drops a SentencePiece leading space at the start of a
      // text, so then the grammar must not see it either.
      bool at_text_start = tokenizer_->strips_leading_space();
      for (int32_t t : prompt) at_text_start = at_text_start && tokenizer_->token_bytes(t).empty();
      grammar = std::make_unique<GrammarFilter>(std::move(parsed), grammar_vocabulary_, at_text_start);
    }

    GenerationStats stats;
    stats.prompt_tokens = static_cast<int>(prompt.size());
    stats.kernels = matmul_kernel_form();
    begin_request();
    const ParallelTime parallel_at_start = pool_.time();

    // While the head computes the prompt's logits, the loader may already
    // fetch block 0 for the first decode step.
    loader_.set_continuation(options.max_tokens > 1);
    std::vector<float> logits;
    stats.reused_tokens = sync_cache(prompt, logits, false, &stats.stop_reason);
    if (stats.stop_reason == StopReason::kCancelled) return finish(stats);
    stats.prompt_ms = ms_since(start);
    stats.prefill_bytes_read = loader_.stats().bytes_consumed;
    const ParallelTime parallel_at_decode = pool_.time();
    stats.prefill_parallel = parallel_since(parallel_at_start, parallel_at_decode);

    TextDecoder decoder(*tokenizer_);
    for (int32_t t : prompt) decoder.push(t);  // context for spacing and split characters
    std::vector<int32_t> context = prompt;
    const auto decode_start = Clock::now();
    stats.stop_reason = StopReason::kMaxTokens;
    for (int i = 0; i < options.max_tokens; ++i) {
      if (grammar != nullptr && grammar->must_end()) {  // an empty `root`, say
        stats.stop_reason = StopReason::kGrammarComplete;
        break;
      }
      const auto sample_start = Clock::now();
      const int32_t token = sampler.sample(logits, context, grammar.get());
      if (grammar != nullptr && !tokenizer_->is_end_of_generation(token)) grammar->accept(token);
      stats.sample_ms += ms_since(sample_start);
      if (stats.generated_tokens == 0) stats.ttft_ms = ms_since(start);
      if (tokenizer_->is_end_of_generation(token)) {
        stats.stop_reason = StopReason::kEndOfText;
        break;
      }
      ++stats.generated_tokens;
      if (options_.probe != nullptr) options_.probe->beat();
      context.push_back(token);
      const StopStrings::Result text = stops.push(decoder.push(token));
      if (!on_token(TokenEvent{token, text.emit})) {
        stats.stop_reason = StopReason::kCallback;
        break;
      }
      if (text.stopped) {
        stats.stop_reason = StopReason::kStopString;
        break;
      }
      if (grammar != nullptr && grammar->must_end()) {  // no forward pass for a token that cannot come
        stats.stop_reason = StopReason::kGrammarComplete;
        break;
      }
      if (i + 1 == options.max_tokens) break;  // the last token needs no forward pass
      if (cancelled_) {
        stats.stop_reason = StopReason::kCancelled;
        break;
      }
      loader_.set_continuation(i + 2 < options.max_tokens);
      if (!step(token, logits)) {
        stats.stop_reason = StopReason::kCancelled;
        break;
      }
    }
    // Text held back (a possible stop string, an unfinished character) that
    // turned out not to be one.
    if (stats.stop_reason != StopReason::kStopString && stats.stop_reason != StopReason::kCallback) {
      std::string tail = stops.push(decoder.flush()).emit;
      if (!stops.stopped()) tail += stops.flush();
      if (!tail.empty()) on_token(TokenEvent{-1, tail});
    }
    stats.decode_ms = ms_since(decode_start);
    stats.decode_parallel = parallel_since(parallel_at_decode, pool_.time());
    return finish(stats);
  }

  std::vector<float> evaluate(const std::vector<int32_t>& tokens, bool all_positions) override {
    if (tokens.empty()) throw Error(ErrorKind::kInvalidArgument, "no tokens to evaluate");
    for (int32_t t : tokens) check_token(t);
    if (tokens.size() > static_cast<size_t>(cache_.context_length())) {
      throw Error(ErrorKind::kContextFull, std::to_string(tokens.size()) +
                                               " tokens exceed the context length " +
                                               std::to_string(cache_.context_length()));
    }
    begin_request();
    loader_.set_continuation(false);
    std::vector<float> logits;
    StopReason reason = StopReason::kMaxTokens;
    sync_cache(tokens, logits, all_positions, &reason);
    if (reason == StopReason::kCancelled) throw Error(ErrorKind::kAborted, "evaluation cancelled");
    return logits;
  }

  std::vector<std::vector<float>> embed(const std::vector<std::string>& texts, const EmbedOptions& options) override {
    const int dim = model_.shape.dim;
    Pooling pooling = options.pooling;
    if (pooling == Pooling::kModel) {
      switch (model_.shape.pooling_type) {
        case 2: pooling = Pooling::kCls; break;
        case 3: pooling = Pooling::kLast; break;
        case 4: throw Error(ErrorKind::kUnsupported, "the model pools by rank (a reranker); it has no embeddings");
        default: pooling = Pooling::kMean; break;
      }
    }
    std::vector<std::vector<int32_t>> tokens;
    for (size_t i = 0; i < texts.size(); ++i) {
      tokens.push_back(tokenize(texts[i], options.add_special, false));
      if (tokens.back().empty()) {
        throw Error(ErrorKind::kInvalidArgument, "text " + std::to_string(i) + " to embed has no tokens");
      }
      if (tokens.back().size() > static_cast<size_t>(cache_.context_length())) {
        throw Error(ErrorKind::kContextFull, "text " + std::to_string(i) + " to embed has " +
                                                 std::to_string(tokens.back().size()) +
                                                 " tokens, more than the context length " +
                                                 std::to_string(cache_.context_length()));
      }
    }
    if (texts.empty()) return {};
    // Each text gets a cache of its own, for this call only, paid from the
    // memory budget while it lasts.
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<std::unique_ptr<RecurrentState>> recurrent_states;
    std::vector<Transformer::Sequence> sequences;
    uint64_t claimed = 0;
    for (const std::vector<int32_t>& t : tokens) {
      caches.push_back(std::make_unique<KvCache>(model_.layer_kv_dims(), cache_.context_length(),
                                                 options_.kv_cache_type, transformer_.kv_capacity()));
      recurrent_states.push_back(std::make_unique<RecurrentState>(model_));
      claimed += caches.back()->growth_bytes(static_cast<int>(t.size())) + recurrent_states.back()->bytes();
      sequences.push_back({t.data(), static_cast<int>(t.size()), caches.back().get(), recurrent_states.back().get()});
    }
    begin_request();
    loader_.set_continuation(false);
    loader_.claim(claimed);
    std::vector<float> states;
    try {
      transformer_.hidden_states(sequences, states);
    } catch (...) {
      loader_.unclaim(claimed);
      loader_.reset();
      throw;
    }
    loader_.unclaim(claimed);
    std::vector<std::vector<float>> out;
    size_t row = 0;
    for (const std::vector<int32_t>& t : tokens) {
      std::vector<double> sum(static_cast<size_t>(dim), 0.0);
      const size_t n = t.size();
      const size_t first = pooling == Pooling::kLast ? n - 1 : 0;
      const size_t count = pooling == Pooling::kMean ? n : 1;
      for (size_t i = first; i < first + count; ++i) {
        const float* v = &states[(row + i) * static_cast<size_t>(dim)];
        for (int d = 0; d < dim; ++d) sum[static_cast<size_t>(d)] += v[d];
      }
      double norm = 0;
      for (double& x : sum) {
        x /= static_cast<double>(count);
        norm += x * x;
      }
      norm = options.normalize && norm > 0 ? std::sqrt(norm) : 1.0;
      std::vector<float> e(static_cast<size_t>(dim));
      for (int d = 0; d < dim; ++d) e[static_cast<size_t>(d)] = static_cast<float>(sum[static_cast<size_t>(d)] / norm);
      out.push_back(std::move(e));
      row += n;
    }
    return out;
  }

  void warm_up(double milliseconds) override {
    if (!std::isfinite(milliseconds) || milliseconds < 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  "the warm-up time must be a finite number of milliseconds >= 0, not " +
                      std::to_string(milliseconds));
    }
    if (milliseconds == 0) return;
    const auto start = Clock::now();
    cancelled_ = false;
    loader_.clear_cancel();
    // The first pass's weights (the resident units, the ring's first units)
    // arrive meanwhile: a request that follows finds them there or on the way.
    loader_.set_continuation(true);
    // Already ended when a request came right behind the load: no work is built.
    const auto stop = [&] { return cancelled_ || warm_up_ended_ || ms_since(start) >= milliseconds; };
    if (!stop()) {
      KernelWarmUp work(model_, plan_, options_.kv_cache_type, transformer_);
      // On this thread alone: the code it optimises is shared by every thread,
      // and the other cores stay free for the download it overlaps.
      ThreadPool one_thread(1);
      while (!stop()) work.run_round(one_thread, stop);
    }
    warm_up_ended_ = false;  // the end applied to this warm-up only
  }

  const std::vector<int32_t>& cached_tokens() const override { return cached_; }

  void reset() override {
    cached_.clear();
    cache_.set_filled(0);
    state_.clear(true);
  }

  void cancel() override {
    cancelled_ = true;
    if (options_.probe != nullptr) options_.probe->cancelled.store(1);
    loader_.cancel();
  }

  void end_warm_up() override { warm_up_ended_ = true; }

  LoaderStats loader_stats() const override { return loader_.stats(); }
  size_t kv_cache_bytes() const override { return cache_.allocated_bytes(); }

 private:
  void check_token(int32_t t) const {
    if (t < 0 || t >= model_.shape.n_vocab) {
      throw Error(ErrorKind::kInvalidArgument, "token id " + std::to_string(t) +
                                                   " is outside the vocabulary (0.." +
                                                   std::to_string(model_.shape.n_vocab - 1) + ")");
    }
  }

  void begin_request() {
    cancelled_ = false;
    if (options_.probe != nullptr) options_.probe->cancelled.store(0);
    loader_.clear_cancel();
    loader_.reset_counters();
  }

  GenerationStats finish(GenerationStats& stats) {
    loader_.set_continuation(false);
    stats.loader = loader_.stats();
    stats.decode_bytes_read = stats.loader.bytes_consumed - stats.prefill_bytes_read;
    stats.kv_cache_bytes = cache_.allocated_bytes();
    stats.recurrent_state_bytes = state_.allocated_bytes();
    return stats;
  }

  // Brings the cache to `tokens`: keeps the common prefix with what is cached,
  // runs the rest. Returns how many tokens were reused; sets *reason on
  // cancellation.
  int sync_cache(const std::vector<int32_t>& tokens, std::vector<float>& logits, bool all_positions,
                 StopReason* reason) {
    size_t common = 0;
    while (common < cached_.size() && common < tokens.size() && cached_[common] == tokens[common]) {
      ++common;
    }
    // Logits come only from evaluating: re-run at least the last token (and
    // everything when every position's logits are wanted).
    if (all_positions) common = 0;
    if (common == tokens.size()) --common;
    // Layers that keep only their last positions may have lost what a
    // continuation from `common` would attend to.
    common = static_cast<size_t>(cache_.reusable_prefix(static_cast<int>(common), transformer_.attention_windows()));
    // A recurrent state resumes only where it, or its checkpoint, was.
    common = static_cast<size_t>(state_.resume(static_cast<int>(common)));
    cached_.resize(common);
    cache_.set_filled(static_cast<int>(common));

    const int n = static_cast<int>(tokens.size() - common);
    bool completed = true;
    if (options_.layer_major_prefill || all_positions) {
      // The state before the last token, where the same prompt (or one that
      // extends it) resumes.
      if (n >= 2) state_.begin_checkpoint(static_cast<int>(tokens.size()) - 1);
      completed = run(tokens.data() + common, n, static_cast<int>(common), logits, all_positions);
      if (completed && n >= 2) state_.commit_checkpoint();
    } else {
      for (int i = 0; i < n && completed; ++i) {
        completed = run(tokens.data() + common + i, 1, static_cast<int>(common) + i, logits, false);
      }
    }
    if (!completed) *reason = StopReason::kCancelled;
    return static_cast<int>(common);
  }

  // One decode step: appends `token` to the cache and computes its logits.
  bool step(int32_t token, std::vector<float>& logits) {
    return run(&token, 1, static_cast<int>(cached_.size()), logits, false);
  }

  // Runs tokens at positions start.. and appends them to the cache. Returns
  // false when cancelled. On failure or cancellation the cache keeps only what
  // was complete before, and the loader starts clean, so the engine stays
  // usable for the next request.
  bool run(const int32_t* tokens, int n, int start, std::vector<float>& logits, bool all_positions) {
    try {
      transformer_.prefill(tokens, n, start, cache_, state_, logits, all_positions);
    } catch (const Error& e) {
      failed();
      if (e.kind() == ErrorKind::kAborted && cancelled_) return false;
      throw;
    } catch (...) {
      failed();
      throw;
    }
    cached_.insert(cached_.end(), tokens, tokens + n);
    cache_.set_filled(start + n);
    state_.set_position(start + n);
    return true;
  }

  // A run that ended partway: the loader starts clean, and a recurrent
  // state that some layers have advanced is lost.
  void failed() {
    loader_.reset();
    state_.set_position(-1);
  }

  std::unique_ptr<WeightSource> source_;
  EngineOptions options_;
  GgufFile gguf_;
  ModelDescription model_;
  ThreadPool pool_;
  MemoryPlan plan_;
  LayerLoader loader_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelInfo info_;
  Transformer transformer_;
  KvCache cache_;
  RecurrentState state_;
  std::vector<int32_t> cached_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> warm_up_ended_{false};
  // The vocabulary's token trie for grammars, built on the first request
  // that has one and kept for the next.
  std::shared_ptr<const GrammarVocabulary> grammar_vocabulary_;
};

}  // namespace

std::unique_ptr<Engine> Engine::open(std::unique_ptr<WeightSource> source, const EngineOptions& options) {
  if (source == nullptr) throw Error(ErrorKind::kInvalidArgument, "no weight source");
  if (options.prefill_chunk < 1) throw Error(ErrorKind::kInvalidArgument, "prefill_chunk must be >= 1");
  return std::make_unique<EngineImpl>(std::move(source), options);
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const Family& f : supported_families()) names.push_back(f.architecture);
  return names;
}

double ModelInfo::hyperparameter(std::string_view key, double fallback) const {
  for (const Hyperparameter& h : hyperparameters) {
    if (h.name == key) return h.value;
  }
  return fallback;
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kEndOfText: return "end of text";
    case StopReason::kMaxTokens: return "max tokens";
    case StopReason::kStopString: return "stop string";
    case StopReason::kCancelled: return "cancelled";
    case StopReason::kCallback: return "stopped by caller";
    case StopReason::kGrammarComplete: return "grammar complete";
  }
  return "unknown";
}

double GenerationStats::prompt_tokens_per_s() const {
  const int processed = prompt_tokens - reused_tokens;
  return prompt_ms > 0 ? processed / (prompt_ms / 1e3) : 0;
}

double GenerationStats::decode_tokens_per_s() const {
  // The first token comes from the prefill's logits; the rest each cost a step.
  return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) / (decode_ms / 1e3) : 0;
}

double dot_product_peak(int threads, double milliseconds) {
  if (!(milliseconds > 0) || !std::isfinite(milliseconds)) {
    throw Error(ErrorKind::kInvalidArgument,
                "dot_product_peak: the duration must be a positive number of milliseconds, not " +
                    std::to_string(milliseconds));
  }
  ThreadPool pool(threads);
  return measure_dot_peak(pool, milliseconds / 1e3);
}

}  // namespace sipllm
