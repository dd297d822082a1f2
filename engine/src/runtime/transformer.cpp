#include "runtime/transformer.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/recurrent.h"
#include "sipllm/error.h"

namespace sipllm {
namespace {

// Elements of per-position work (norms, rope, activations) below which a
// chunk's positions are processed on the calling thread alone.
constexpr size_t kParallelElements = 1 << 14;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// ggml_softplus: log(1 + e^x), x itself above 20.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// ggml_l2_norm: x / max(|x|, eps).
void l2_normalize(float* x, int n, float eps) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  scale_in_place(x, n, 1.0f / std::max(std::sqrt(sum), eps));
}

// Row `row` of a buffer of rows `width` floats wide.
float* at(std::vector<float>& v, int row, int width) {
  return &v[static_cast<size_t>(row) * static_cast<size_t>(width)];
}

void silu_in_place(float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

}  // namespace

Transformer::Transformer(const ModelDescription& model, LayerLoader& loader, ThreadPool& pool,
                         int prefill_chunk)
    : model_(model),
      shape_(model.shape),
      loader_(loader),
      pool_(&pool),
      chunk_(std::max(1, prefill_chunk)) {
  if (model.rope_factors != nullptr) {
    rope_factors_ = loader.read_vector(*model.rope_factors);
    for (size_t i = 0; i < rope_factors_.size(); ++i) {
      if (!(rope_factors_[i] > 0) || !std::isfinite(rope_factors_[i])) {
        throw Error(ErrorKind::kFormat, "tensor '" + model.rope_factors->name + "' element " + std::to_string(i) +
                                            " = " + std::to_string(rope_factors_[i]) +
                                            " must be a positive finite frequency factor");
      }
    }
  }
  for (const RotarySetup& setup : model.rotary) {
    RopeParams p;
    p.dims = setup.dims;
    p.style = model.family->rope_style;
    p.freq_base = setup.freq_base;
    p.freq_scale = setup.freq_scale;
    p.attn_factor = shape_.rope_attn_factor;
    p.factors = setup.factors && !rope_factors_.empty() ? rope_factors_.data() : nullptr;
    rope_.push_back(p);
  }
  rope_tables_.resize(rope_.size());
  if (model.family->value_norm) ones_.assign(static_cast<size_t>(shape_.max_head_dim()), 1.0f);
}

uint64_t Transformer::working_bytes(const ModelDescription& model, int prefill_chunk, int threads) {
  const ModelShape& s = model.shape;
  const auto chunk = static_cast<uint64_t>(std::max(1, std::min(prefill_chunk, s.context_length)));
  // The widest layer's sizes (hidden_dim is the widest feed-forward).
  const int q_dim = model.max_q_dim();
  const int kv_dim = model.max_kv_dim();
  // x, xb, proj; q, att_out; k, v; gate, up; rope tables.
  uint64_t floats_per_position = 3ull * s.dim + 2ull * q_dim + 2ull * kv_dim + 2ull * s.hidden_dim;
  for (const RotarySetup& setup : model.rotary) floats_per_position += 2ull * static_cast<uint64_t>(setup.dims);
  // Per-layer inputs: every layer's, their projection, a layer's gate.
  const auto per_layer_all = static_cast<uint64_t>(s.size(Dim::kEmbdAllLayers));
  floats_per_position += 2 * per_layer_all + static_cast<uint64_t>(s.n_embd_per_layer);
  // A gated attention's query and gate; the recurrent layers' buffers.
  if (model.family->attention_output_gate) floats_per_position += 3ull * q_dim;
  int widest_mix = 0;
  if (model.has_recurrent_state()) {
    const uint64_t mix = std::max(s.ssm_qkv(), 3 * s.dim);
    const uint64_t conv = std::max(s.ssm_qkv(), s.dim);
    floats_per_position += mix + 2 * conv + 2ull * s.ssm_inner + 2ull * s.ssm_value_heads;
    widest_mix = s.ssm_inner;
  }
  // A mixture of experts: each position's probabilities, choices and
  // weights, its rows gathered for one expert, that expert's output, the
  // shared expert's, and each choice's output.
  if (s.n_experts > 0) {
    floats_per_position += static_cast<uint64_t>(s.n_experts) + 2ull * s.n_experts_used + 3ull * s.dim +
                           static_cast<uint64_t>(s.n_experts_used) * static_cast<uint64_t>(s.dim);
  }
  // Both 8-bit forms of the widest input.
  const int widest = std::max({s.dim, q_dim, s.hidden_dim, widest_mix, s.n_embd_per_layer});
  const uint64_t quantized_per_position = quantized_bytes_per_position(ActivationFormat::kQ8_0, widest) +
                                          quantized_bytes_per_position(ActivationFormat::kQ8_K, widest);
  AttentionShape attention_shape;
  attention_shape.n_heads = s.n_heads;
  attention_shape.n_kv_heads = s.n_kv_heads;
  attention_shape.head_dim = s.max_head_dim();
  const uint64_t scores = attention_scratch_floats(attention_shape, s.context_length, threads) * 4;
  return chunk * (floats_per_position * 4 + quantized_per_position) + scores + static_cast<uint64_t>(s.n_vocab) * 4;
}

std::vector<int> Transformer::attention_windows() const {
  std::vector<int> windows;
  for (const LayerShape& layer : model_.layers) windows.push_back(layer.sliding_window ? shape_.sliding_window : 0);
  return windows;
}

std::vector<int> Transformer::kv_capacity() const {
  std::vector<int> capacity = attention_windows();
  // A chunk writes all its keys before its first position attends, and that
  // position still needs the window before it.
  for (int& c : capacity) {
    if (c > 0) c += chunk_ - 1;
  }
  return capacity;
}

void Transformer::prefill(const int32_t* tokens, int n, int start_pos, KvCache& cache, RecurrentState& state,
                          std::vector<float>& logits, bool all_positions) {
  const int n_layers = shape_.n_layers;
  const int n_chunks = (n + chunk_ - 1) / chunk_;

  // Tell the loader the whole sequence of units up front, so it can prefetch
  // across chunk boundaries too.
  std::vector<int> plan;
  for (int c = 0; c < n_chunks; ++c) {
    for (int l = 0; l < n_layers; ++l) plan.push_back(l);
    if (all_positions || c == n_chunks - 1) {
      for (int u = model_.first_head_unit(); u < model_.end_head_unit(); ++u) plan.push_back(u);
    }
  }
  loader_.announce(plan);

  const auto vocab = static_cast<size_t>(shape_.n_vocab);
  logits.assign(all_positions ? static_cast<size_t>(n) * vocab : vocab, 0.0f);

  for (int c = 0; c < n_chunks; ++c) {
    const int first = c * chunk_;
    const int m = std::min(chunk_, n - first);
    const int pos0 = start_pos + first;
    loader_.claim(cache.growth_bytes(pos0 + m));  // may make resident weights stream instead
    cache.reserve(pos0 + m);

    forward_rows(tokens + first, {Segment{0, m, pos0, &cache, &state, n}});

    if (all_positions) {
      run_head(0, m, &logits[static_cast<size_t>(first) * vocab]);
    } else if (c == n_chunks - 1) {
      run_head(m - 1, 1, logits.data());
    }
  }
}

void Transformer::forward_rows(const int32_t* tokens, const std::vector<Segment>& segments) {
  const int m = size_rows(segments);
  loader_.begin_pass(m);
  loader_.embed(tokens, m, x_.data());
  if (model_.family->scale_embedding) scale_in_place(x_.data(), m * shape_.dim, std::sqrt(static_cast<float>(shape_.dim)));
  // Every layer's per-layer token embeddings, one range read per distinct
  // token; block 0 adds the projection of x_ to them (per_layer_inputs).
  if (model_.per_layer_token_embd != nullptr) {
    loader_.embed(tokens, m, per_layer_in_.data(), LayerLoader::RowTable::kPerLayer);
  }

  for (int l = 0; l < shape_.n_layers; ++l) {
    const UnitWeights& w = loader_.acquire(l);
    run_block(l, w, m, segments);
    loader_.release(l);
    // A mixture of experts: the experts the positions chose, each its own
    // unit, read once for all the positions that chose it.
    if (model_.layers[static_cast<size_t>(l)].experts) {
      const std::vector<int> experts = chosen_experts();
      std::vector<int> units, positions;
      for (int e : experts) {
        units.push_back(model_.expert_unit(l, e));
        positions.push_back(static_cast<int>(std::count(expert_choices_.begin(), expert_choices_.end(), e)));
      }
      loader_.announce_experts(units, positions);
      run_experts(l, m, experts, [&](int e) -> const UnitWeights& { return loader_.acquire(model_.expert_unit(l, e)); },
                  [&](int e) { loader_.release(model_.expert_unit(l, e)); });
    }
  }
}

std::vector<int> Transformer::chosen_experts() const {
  std::vector<int> experts(expert_choices_.begin(), expert_choices_.end());
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  return experts;
}

void Transformer::run_synthetic_block(int layer, const UnitWeights& w, const UnitWeights* expert, const float* input,
                                      int n, int start_pos, KvCache& cache, RecurrentState& state, ThreadPool& pool) {
  struct RestorePool {
    ThreadPool*& current;
    ThreadPool* const own;
    ~RestorePool() { current = own; }
  } restore{pool_, pool_};
  pool_ = &pool;
  const std::vector<Segment> segments = {Segment{0, n, start_pos, &cache, &state, n}};
  size_rows(segments);
  std::copy_n(input, static_cast<size_t>(n) * static_cast<size_t>(shape_.dim), x_.begin());
  run_block(layer, w, n, segments);
  if (model_.layers[static_cast<size_t>(layer)].experts) {
    run_experts(layer, n, chosen_experts(), [&](int) -> const UnitWeights& { return *expert; }, [](int) {});
  }
}

int Transformer::size_rows(const std::vector<Segment>& segments) {
  int m = 0;
  for (const Segment& seg : segments) m = std::max(m, seg.first_row + seg.n);
  const size_t rows = static_cast<size_t>(m);
  const auto dim = static_cast<size_t>(shape_.dim);
  // The widest layer's sizes (hidden_dim is the widest feed-forward).
  const auto q_dim = static_cast<size_t>(model_.max_q_dim());
  const auto kv_dim = static_cast<size_t>(model_.max_kv_dim());
  x_.resize(rows * dim);
  xb_.resize(rows * dim);
  q_.resize(rows * q_dim);
  k_.resize(rows * kv_dim);
  v_.resize(rows * kv_dim);
  att_out_.resize(rows * q_dim);
  proj_.resize(rows * dim);
  gate_.resize(rows * static_cast<size_t>(shape_.hidden_dim));
  up_.resize(rows * static_cast<size_t>(shape_.hidden_dim));
  if (model_.family->attention_output_gate) {
    q_gated_.resize(2 * rows * q_dim);
    attn_gate_.resize(rows * q_dim);
  }
  if (model_.per_layer_token_embd != nullptr) {
    const auto all_layers = static_cast<size_t>(shape_.size(Dim::kEmbdAllLayers));
    per_layer_in_.resize(rows * all_layers);
    per_layer_proj_.resize(rows * all_layers);
    per_layer_gate_.resize(rows * static_cast<size_t>(shape_.n_embd_per_layer));
  }
  if (model_.has_recurrent_state()) {
    const auto conv_width = static_cast<size_t>(std::max(shape_.ssm_qkv(), shape_.dim));
    mix_in_.resize(rows * static_cast<size_t>(std::max(shape_.ssm_qkv(), 3 * shape_.dim)));
    conv_in_.resize(rows * conv_width);
    conv_out_.resize(rows * conv_width);
    ssm_z_.resize(rows * static_cast<size_t>(shape_.ssm_inner));
    ssm_y_.resize(rows * static_cast<size_t>(shape_.ssm_inner));
    ssm_g_.resize(rows * static_cast<size_t>(shape_.ssm_value_heads));
    ssm_beta_.resize(rows * static_cast<size_t>(shape_.ssm_value_heads));
  }
  for (size_t r = 0; r < rope_.size(); ++r) {
    const size_t table_size = 2 * static_cast<size_t>(rope_[r].dims);
    rope_tables_[r].resize(rows * table_size);
    for (const Segment& seg : segments) {
      for (int i = 0; i < seg.n; ++i) {
        rope_table(seg.start_pos + i, rope_[r], &rope_tables_[r][static_cast<size_t>(seg.first_row + i) * table_size]);
      }
    }
  }
  return m;
}

void Transformer::hidden_states(const std::vector<Sequence>& sequences, std::vector<float>& out) {
  // Whole sequences go together while their rows fit in a chunk; a longer
  // one runs alone, chunk by chunk.
  const auto dim = static_cast<size_t>(shape_.dim);
  size_t total = 0;
  for (const Sequence& seq : sequences) total += static_cast<size_t>(seq.n);
  out.assign(total * dim, 0.0f);
  std::vector<int> plan;
  size_t done = 0;
  for (size_t begin = 0; begin < sequences.size();) {
    size_t end = begin;
    int rows = 0;
    while (end < sequences.size() && (end == begin || rows + sequences[end].n <= chunk_)) rows += sequences[end++].n;
    std::vector<int32_t> tokens;
    std::vector<Segment> segments;
    const int chunk_rows = std::min(rows, chunk_);
    for (int first = 0; first < rows; first += chunk_rows) {
      // Only a lone long sequence takes more than one pass.
      tokens.clear();
      segments.clear();
      for (size_t k = begin; k < end; ++k) {
        const Sequence& seq = sequences[k];
        const int n = end - begin == 1 ? std::min(chunk_rows, seq.n - first) : seq.n;
        const int from = end - begin == 1 ? first : 0;
        seq.cache->reserve(from + n);
        segments.push_back(Segment{static_cast<int>(tokens.size()), n, from, seq.cache, seq.state, seq.n});
        tokens.insert(tokens.end(), seq.tokens + from, seq.tokens + from + n);
      }
      plan.clear();
      for (int l = 0; l < shape_.n_layers; ++l) plan.push_back(l);
      plan.push_back(model_.first_head_unit());
      loader_.announce(plan);
      forward_rows(tokens.data(), segments);
      // The final norm's output: what the output head would read.
      const UnitWeights& w = loader_.acquire(model_.first_head_unit());
      const auto n_rows = static_cast<int>(tokens.size());
      for_each_position(n_rows, shape_.dim, [&](int i) {
        rmsnorm(&out[(done + static_cast<size_t>(i)) * dim], &x_[static_cast<size_t>(i) * dim], w.output_norm,
                shape_.dim, shape_.rms_eps);
      });
      loader_.release(model_.first_head_unit());
      done += static_cast<size_t>(n_rows);
    }
    begin = end;
  }
}

template <class Fn>
void Transformer::for_each_position(int n, int width, const Fn& fn) {
  const size_t per_chunk = std::max<size_t>(1, kParallelElements / static_cast<size_t>(width));
  pool_->parallel_for(static_cast<size_t>(n), per_chunk, [&](size_t begin, size_t end, int) {
    for (size_t i = begin; i < end; ++i) fn(static_cast<int>(i));
  });
}

void Transformer::per_layer_inputs(const UnitWeights& w, int n) {
  // As llama.cpp's Gemma 4: for each layer's slice of npl floats,
  //   (RMSNorm(per_layer_model_proj(x) / sqrt(dim)) + per_layer_token_embd[token] * sqrt(npl)) / sqrt(2)
  // with x the scaled embedding (x_ as block 0 starts).
  const int npl = shape_.n_embd_per_layer;
  const auto all_layers = static_cast<int>(shape_.size(Dim::kEmbdAllLayers));
  activations_.reset(x_.data(), n, shape_.dim);
  matmul(w.per_layer_model_proj, activations_, per_layer_proj_.data(), *pool_);
  const float projection_scale = 1.0f / std::sqrt(static_cast<float>(shape_.dim));
  const float token_scale = std::sqrt(static_cast<float>(npl));
  const float input_scale = 1.0f / std::sqrt(2.0f);
  for_each_position(n, all_layers, [&](int i) {
    for (int l = 0; l < shape_.n_layers; ++l) {
      const size_t at = static_cast<size_t>(i) * static_cast<size_t>(all_layers) + static_cast<size_t>(l * npl);
      float* proj = &per_layer_proj_[at];
      float* in = &per_layer_in_[at];
      scale_in_place(proj, npl, projection_scale);
      rmsnorm(proj, proj, w.per_layer_proj_norm, npl, shape_.rms_eps);
      for (int j = 0; j < npl; ++j) in[j] = (proj[j] + in[j] * token_scale) * input_scale;
    }
  });
}

void Transformer::run_block(int layer, const UnitWeights& w, int n, const std::vector<Segment>& segments) {
  const ModelShape& s = shape_;
  const int dim = s.dim;
  // A branch's output joins the residual stream, normalized first where the
  // family has a post-norm (Gemma).
  const auto add_branch = [&](const float* post_norm) {
    for_each_position(n, dim, [&](int i) {
      if (post_norm != nullptr) rmsnorm(at(proj_, i, dim), at(proj_, i, dim), post_norm, dim, s.rms_eps);
      add_in_place(at(x_, i, dim), at(proj_, i, dim), dim);
    });
  };
  if (w.per_layer_model_proj) per_layer_inputs(w, n);  // block 0, before x_ changes

  // Attention, or a hybrid model's recurrence.
  for_each_position(n, dim, [&](int i) { rmsnorm(at(xb_, i, dim), at(x_, i, dim), w.attn_norm, dim, s.rms_eps); });
  activations_.reset(xb_.data(), n, dim);
  switch (model_.layers[static_cast<size_t>(layer)].kind) {
    case LayerKind::kAttention: attend(layer, w, n, segments); break;
    case LayerKind::kDeltaNet: delta_net(layer, w, n, segments); break;
    case LayerKind::kShortConv: short_conv(layer, w, n, segments); break;
  }
  add_branch(w.post_attention_norm);

  // Feed-forward.
  for_each_position(n, dim, [&](int i) { rmsnorm(at(xb_, i, dim), at(x_, i, dim), w.ffn_norm, dim, s.rms_eps); });
  activations_.reset(xb_.data(), n, dim);
  if (model_.layers[static_cast<size_t>(layer)].experts) {
    route(w, n);  // the experts themselves run after this unit (run_experts)
    return;
  }
  feed_forward(layer, w, n);
  add_branch(w.post_ffw_norm);

  // Gemma 4's per-layer input: x += post_norm(proj(gelu(gate x) * input)).
  if (w.per_layer_gate) {
    const int npl = s.n_embd_per_layer;
    const auto all_layers = static_cast<int>(s.size(Dim::kEmbdAllLayers));
    activations_.reset(x_.data(), n, dim);
    matmul(w.per_layer_gate, activations_, per_layer_gate_.data(), *pool_);
    for_each_position(n, npl, [&](int i) {
      gelu_tanh_glu(at(per_layer_gate_, i, npl), at(per_layer_in_, i, all_layers) + layer * npl, npl);
    });
    activations_.reset(per_layer_gate_.data(), n, npl);
    matmul(w.per_layer_proj, activations_, proj_.data(), *pool_);
    add_branch(w.per_layer_post_norm);
  }
  // The layer's output scaled (Gemma 4), residual stream and all.
  if (w.layer_output_scale != nullptr) scale_in_place(x_.data(), n * dim, w.layer_output_scale[0]);
}

void Transformer::feed_forward(int layer, const UnitWeights& w, int n) {
  const int hidden = model_.layers[static_cast<size_t>(layer)].hidden_dim;
  matmul_each({{&w.ffn_gate, gate_.data()}, {&w.ffn_up, up_.data()}}, activations_, *pool_);
  const auto activate = model_.family->feed_forward == FeedForward::kGeluTanh ? gelu_tanh_glu : swiglu;
  for_each_position(n, hidden, [&](int i) { activate(at(gate_, i, hidden), at(up_, i, hidden), hidden); });
  activations_.reset(gate_.data(), n, hidden);
  matmul(w.ffn_down, activations_, proj_.data(), *pool_);
}

void Transformer::route(const UnitWeights& w, int n) {
  // As llama.cpp's build_moe_ffn: the router's probabilities (softmax, or
  // sigmoid), the expert_used_count highest (by probability plus the
  // choice's bias, where the family has one) in that order, weighted by
  // their probabilities renormalised (the sum at least F16's smallest normal
  // number). The shared expert (Qwen3.5-MoE), gated by sigmoid(its gate . x),
  // goes to shared_out_.
  const ModelShape& s = shape_;
  const int dim = s.dim;
  const int experts = s.n_experts;
  const int used = s.n_experts_used;
  const auto rows = static_cast<size_t>(n);
  expert_probs_.resize(rows * static_cast<size_t>(experts));
  expert_weights_.resize(rows * static_cast<size_t>(used));
  expert_choices_.resize(rows * static_cast<size_t>(used));
  expert_in_.resize(rows * static_cast<size_t>(dim));
  expert_out_.resize(rows * static_cast<size_t>(dim));
  choice_out_.resize(rows * static_cast<size_t>(used) * static_cast<size_t>(dim));
  matmul(w.ffn_gate_inp, activations_, expert_probs_.data(), *pool_);
  for_each_position(n, experts, [&](int i) {
    float* p = at(expert_probs_, i, experts);
    if (s.sigmoid_gating) {
      for (int e = 0; e < experts; ++e) p[e] = sigmoid(p[e]);
    } else {
      softmax(p, experts);
    }
    int* chosen = &expert_choices_[static_cast<size_t>(i) * static_cast<size_t>(used)];
    float* weight = at(expert_weights_, i, used);
    const auto score = [&](int e) { return w.expert_bias != nullptr ? p[e] + w.expert_bias[e] : p[e]; };
    float sum = 0;
    for (int k = 0; k < used; ++k) {
      // The highest not yet chosen; the lower index on a tie.
      int best = -1;
      for (int e = 0; e < experts; ++e) {
        if (std::find(chosen, chosen + k, e) != chosen + k) continue;
        if (best < 0 || score(e) > score(best)) best = e;
      }
      chosen[k] = best;
      weight[k] = p[best];
      sum += p[best];
    }
    scale_in_place(weight, used, 1.0f / std::max(sum, 6.103515625e-5f));
  });
  shared_out_.clear();
  if (w.ffn_gate_shexp) {
    const int shared = s.shared_expert_hidden_dim;
    shared_out_.resize(rows * static_cast<size_t>(dim));
    matmul_each({{&w.ffn_gate_shexp, gate_.data()}, {&w.ffn_up_shexp, up_.data()}}, activations_, *pool_);
    for_each_position(n, shared, [&](int i) { swiglu(at(gate_, i, shared), at(up_, i, shared), shared); });
    activations_.reset(gate_.data(), n, shared);
    matmul(w.ffn_down_shexp, activations_, shared_out_.data(), *pool_);
    for_each_position(n, dim, [&](int i) {
      const float* x = at(xb_, i, dim);
      float g = 0;
      for (int j = 0; j < dim; ++j) g += w.shared_expert_gate[j] * x[j];
      scale_in_place(at(shared_out_, i, dim), dim, sigmoid(g));
    });
  }
}

void Transformer::run_experts(int layer, int n, const std::vector<int>& experts,
                              const std::function<const UnitWeights&(int)>& acquire,
                              const std::function<void(int)>& release) {
  // out = the sum over a position's choices of weight * down(silu(gate x) *
  // up x), in the order chosen, plus the shared expert's output; x += out.
  const int dim = shape_.dim;
  const int used = shape_.n_experts_used;
  const int hidden = model_.layers[static_cast<size_t>(layer)].hidden_dim;
  for (int e : experts) {
    expert_rows_.clear();
    for (size_t c = 0; c < expert_choices_.size(); ++c) {
      if (expert_choices_[c] == e) expert_rows_.push_back(static_cast<int>(c));
    }
    const auto m = static_cast<int>(expert_rows_.size());
    for (int r = 0; r < m; ++r) {
      std::copy_n(at(xb_, expert_rows_[static_cast<size_t>(r)] / used, dim), dim, at(expert_in_, r, dim));
    }
    const UnitWeights& w = acquire(e);
    activations_.reset(expert_in_.data(), m, dim);
    matmul_each({{&w.ffn_gate_exps, gate_.data()}, {&w.ffn_up_exps, up_.data()}}, activations_, *pool_);
    for_each_position(m, hidden, [&](int r) { swiglu(at(gate_, r, hidden), at(up_, r, hidden), hidden); });
    activations_.reset(gate_.data(), m, hidden);
    matmul(w.ffn_down_exps, activations_, expert_out_.data(), *pool_);
    release(e);
    for_each_position(m, dim, [&](int r) {
      const int c = expert_rows_[static_cast<size_t>(r)];  // position * used + choice
      float* out = at(choice_out_, c, dim);
      const float* y = at(expert_out_, r, dim);
      const float weight = expert_weights_[static_cast<size_t>(c)];
      for (int j = 0; j < dim; ++j) out[j] = y[j] * weight;
    });
  }
  for_each_position(n, dim, [&](int i) {
    float* out = at(proj_, i, dim);
    std::copy_n(at(choice_out_, i * used, dim), dim, out);
    for (int k = 1; k < used; ++k) add_in_place(out, at(choice_out_, i * used + k, dim), dim);
    if (!shared_out_.empty()) add_in_place(out, at(shared_out_, i, dim), dim);
    add_in_place(at(x_, i, dim), out, dim);
  });
}

void Transformer::attend(int layer, const UnitWeights& w, int n, const std::vector<Segment>& segments) {
  const ModelShape& s = shape_;
  const LayerShape& this_layer = model_.layers[static_cast<size_t>(layer)];
  const int head_dim = this_layer.head_dim;
  const int q_dim = s.n_heads * head_dim;
  const int kv_dim = s.n_kv_heads * head_dim;
  // A layer that shares (Gemma 4's last layers) computes queries only, and
  // attends over the keys and values its source layer cached.
  const bool own_kv = this_layer.kv_source == layer;
  const bool gated = model_.family->attention_output_gate;
  // Each head of `vec` normalized on its own (Qwen 3, Gemma 3's Q/K norms).
  const auto norm_heads = [&](float* vec, int n_heads, const float* weight) {
    for (int h = 0; h < n_heads; ++h) {
      float* head = vec + static_cast<size_t>(h) * static_cast<size_t>(head_dim);
      rmsnorm(head, head, weight, head_dim, s.rms_eps);
    }
  };

  float* q_out = gated ? q_gated_.data() : q_.data();
  if (!own_kv) {
    matmul(w.attn_q, activations_, q_out, *pool_);
  } else if (w.attn_v) {
    matmul_each({{&w.attn_q, q_out}, {&w.attn_k, k_.data()}, {&w.attn_v, v_.data()}}, activations_, *pool_);
  } else {  // Gemma 4 without attn_v: the values are the keys' projection
    matmul_each({{&w.attn_q, q_out}, {&w.attn_k, k_.data()}}, activations_, *pool_);
    std::copy_n(k_.data(), static_cast<size_t>(n) * static_cast<size_t>(kv_dim), v_.data());
  }
  // Which sequence's cache, and which position in it, each row is.
  row_slots_.resize(static_cast<size_t>(n));
  for (const Segment& seg : segments) {
    for (int i = 0; i < seg.n; ++i) row_slots_[static_cast<size_t>(seg.first_row + i)] = {seg.cache, seg.start_pos + i};
  }
  for_each_position(n, q_dim + 2 * kv_dim, [&](int i) {
    float* q = at(q_, i, q_dim);
    float* k = at(k_, i, kv_dim);
    float* v = at(v_, i, kv_dim);
    if (gated) {  // each head's query, then its gate
      const float* row = at(q_gated_, i, 2 * q_dim);
      for (int h = 0; h < s.n_heads; ++h) {
        const auto head = static_cast<size_t>(h) * static_cast<size_t>(head_dim);
        std::copy_n(row + 2 * head, head_dim, q + head);
        std::copy_n(row + 2 * head + head_dim, head_dim, at(attn_gate_, i, q_dim) + head);
      }
    }
    if (w.attn_q_bias != nullptr) add_in_place(q, w.attn_q_bias, q_dim);
    if (w.attn_q_norm != nullptr) norm_heads(q, s.n_heads, w.attn_q_norm);
    const float* table = nullptr;
    if (this_layer.rotary >= 0) {
      const auto r = static_cast<size_t>(this_layer.rotary);
      table = at(rope_tables_[r], i, 2 * rope_[r].dims);
      rope_rotate(q, s.n_heads, head_dim, rope_[r], table);
    }
    if (!own_kv) return;
    if (w.attn_k_bias != nullptr) add_in_place(k, w.attn_k_bias, kv_dim);
    if (w.attn_v_bias != nullptr) add_in_place(v, w.attn_v_bias, kv_dim);
    if (w.attn_k_norm != nullptr) norm_heads(k, s.n_kv_heads, w.attn_k_norm);
    if (model_.family->value_norm) norm_heads(v, s.n_kv_heads, ones_.data());
    if (table != nullptr) rope_rotate(k, s.n_kv_heads, head_dim, rope_[static_cast<size_t>(this_layer.rotary)], table);
    const RowSlot& slot = row_slots_[static_cast<size_t>(i)];
    store_kv(*slot.cache, layer, slot.pos, k, v);
  });
  AttentionShape shape;
  shape.n_heads = s.n_heads;
  shape.n_kv_heads = s.n_kv_heads;
  shape.head_dim = head_dim;
  shape.scale = s.attention_scale;
  shape.softcap = s.attn_softcap;
  shape.window = this_layer.sliding_window ? s.sliding_window : 0;
  for (const Segment& seg : segments) {
    const size_t offset = static_cast<size_t>(seg.first_row) * static_cast<size_t>(q_dim);
    attention(q_.data() + offset, seg.n, seg.start_pos, *seg.cache, this_layer.kv_source, shape,
              att_out_.data() + offset, *pool_, scores_,
              seg.batch >= kTiledMinQueries ? AttentionPath::kTiled : AttentionPath::kOneChunk);
  }
  if (gated) {
    for_each_position(n, q_dim, [&](int i) {
      float* out = at(att_out_, i, q_dim);
      const float* gate = at(attn_gate_, i, q_dim);
      for (int j = 0; j < q_dim; ++j) out[j] *= sigmoid(gate[j]);
    });
  }
  activations_.reset(att_out_.data(), n, q_dim);
  matmul(w.attn_output, activations_, proj_.data(), *pool_);
}

template <class Run>
void Transformer::run_recurrence(int layer, const std::vector<Segment>& segments, const Run& run) {
  for (const Segment& seg : segments) {
    RecurrentState& state = *seg.state;
    const int split = state.pending_checkpoint() - seg.start_pos;
    if (split < 0 || split >= seg.n) {
      run(seg.first_row, seg.n, state);
      continue;
    }
    if (split > 0) run(seg.first_row, split, state);
    state.snapshot_layer(layer);
    run(seg.first_row + split, seg.n - split, state);
  }
}

void Transformer::delta_net(int layer, const UnitWeights& w, int n, const std::vector<Segment>& segments) {
  const ModelShape& s = shape_;
  const int qkv_dim = s.ssm_qkv();
  const int heads = s.ssm_value_heads;
  const int inner = s.ssm_inner;
  const int head_v = s.ssm_head_v();
  const int keys = s.ssm_key_heads * s.ssm_head_k;
  matmul_each({{&w.ssm_qkv, mix_in_.data()}, {&w.ssm_gate, ssm_z_.data()}, {&w.ssm_alpha, ssm_g_.data()},
               {&w.ssm_beta, ssm_beta_.data()}},
              activations_, *pool_);
  // Per value head: the log-decay a * softplus(alpha x + dt_bias) and the
  // update's strength sigmoid(beta x).
  for (int i = 0; i < n; ++i) {
    float* g = at(ssm_g_, i, heads);
    float* beta = at(ssm_beta_, i, heads);
    for (int h = 0; h < heads; ++h) {
      g[h] = w.ssm_a[h] * softplus(g[h] + w.ssm_dt_bias[h]);
      beta[h] = sigmoid(beta[h]);
    }
  }
  DeltaNetShape shape;
  shape.key_heads = s.ssm_key_heads;
  shape.head_k = s.ssm_head_k;
  shape.value_heads = heads;
  shape.head_v = head_v;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(s.ssm_head_k));
  run_recurrence(layer, segments, [&](int first, int count, RecurrentState& state) {
    // The causal convolution over q, k and v, SiLU; q and k L2-normed per head.
    causal_conv(at(mix_in_, first, qkv_dim), count, qkv_dim, s.conv_kernel, w.conv_weight, state.conv(layer),
                at(conv_out_, first, qkv_dim), *pool_);
    for_each_position(count, qkv_dim, [&](int i) {
      float* row = at(conv_out_, first + i, qkv_dim);
      silu_in_place(row, qkv_dim);
      for (int h = 0; h < 2 * s.ssm_key_heads; ++h) {
        l2_normalize(row + static_cast<size_t>(h) * static_cast<size_t>(s.ssm_head_k), s.ssm_head_k, s.rms_eps);
      }
      scale_in_place(row, keys, q_scale);
    });
    delta_net_chunked(at(conv_out_, first, qkv_dim), at(ssm_g_, first, heads), at(ssm_beta_, first, heads), count,
                      shape, kDeltaNetChunk, state.matrices(layer), at(ssm_y_, first, inner), *pool_);
  });
  // Each head's output normalized, gated by silu(z), projected.
  for_each_position(n, inner, [&](int i) {
    float* y = at(ssm_y_, i, inner);
    float* z = at(ssm_z_, i, inner);
    for (int h = 0; h < heads; ++h) {
      float* head = y + static_cast<size_t>(h) * static_cast<size_t>(head_v);
      rmsnorm(head, head, w.ssm_norm, head_v, s.rms_eps);
    }
    swiglu(z, y, inner);  // silu(z) * y
  });
  activations_.reset(ssm_z_.data(), n, inner);
  matmul(w.ssm_out, activations_, proj_.data(), *pool_);
}

void Transformer::short_conv(int layer, const UnitWeights& w, int n, const std::vector<Segment>& segments) {
  const int dim = shape_.dim;
  // B, C and x; the convolution runs over B * x and its output is gated by C.
  matmul(w.conv_in, activations_, mix_in_.data(), *pool_);
  for_each_position(n, dim, [&](int i) {
    const float* bcx = at(mix_in_, i, 3 * dim);
    float* bx = at(conv_in_, i, dim);
    for (int c = 0; c < dim; ++c) bx[c] = bcx[c] * bcx[2 * dim + c];
  });
  run_recurrence(layer, segments, [&](int first, int count, RecurrentState& state) {
    causal_conv(at(conv_in_, first, dim), count, dim, shape_.conv_kernel, w.conv_weight, state.conv(layer),
                at(conv_out_, first, dim), *pool_);
  });
  for_each_position(n, dim, [&](int i) {
    const float* c_gate = at(mix_in_, i, 3 * dim) + dim;
    float* y = at(conv_out_, i, dim);
    for (int c = 0; c < dim; ++c) y[c] *= c_gate[c];
  });
  activations_.reset(conv_out_.data(), n, dim);
  matmul(w.conv_out, activations_, proj_.data(), *pool_);
}

void Transformer::run_head(int first, int count, float* logits) {
  const int dim = shape_.dim;
  const int vocab = shape_.n_vocab;
  int row = 0;
  for (int u = model_.first_head_unit(); u < model_.end_head_unit(); ++u) {
    const UnitWeights& w = loader_.acquire(u);
    if (u == model_.first_head_unit()) {
      for (int i = 0; i < count; ++i) {
        rmsnorm(&xb_[static_cast<size_t>(i) * dim], &x_[static_cast<size_t>(first + i) * dim], w.output_norm, dim,
                shape_.rms_eps);
      }
      activations_.reset(xb_.data(), count, dim);
    }
    // This piece's rows of every position's logits.
    matmul(w.output, activations_, logits + row, *pool_, vocab);
    row += w.output.rows;
    loader_.release(u);
  }
  if (shape_.final_softcap > 0) {
    for (int i = 0; i < count; ++i) softcap(logits + static_cast<size_t>(i) * vocab, vocab, shape_.final_softcap);
  }
}

}  // namespace sipllm
