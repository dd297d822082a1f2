#include "kernels/recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/simd.h"
#include "core/thread_pool.h"

namespace sipllm {
namespace {

// y += a * x over n floats, n a multiple of 4 (head sizes are: the model
// description checks).
inline void axpy(float* y, float a, const float* x, int n) {
  const v128_t av = wasm_f32x4_splat(a);
  for (int j = 0; j < n; j += 4) {
    simd::store(y + j, wasm_f32x4_add(simd::load(y + j), wasm_f32x4_mul(av, simd::load(x + j))));
  }
}

// a . b over n floats, n a multiple of 4: two vectors of lane sums.
inline float dot(const float* a, const float* b, int n) {
  v128_t s0 = wasm_f32x4_splat(0.0f), s1 = s0;
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    s0 = wasm_f32x4_add(s0, wasm_f32x4_mul(simd::load(a + j), simd::load(b + j)));
    s1 = wasm_f32x4_add(s1, wasm_f32x4_mul(simd::load(a + j + 4), simd::load(b + j + 4)));
  }
  if (j < n) s0 = wasm_f32x4_add(s0, wasm_f32x4_mul(simd::load(a + j), simd::load(b + j)));
  return simd::sum_f32(wasm_f32x4_add(s0, s1));
}

// The rows of one value head: where its q, k, v, g and beta are in row t.
struct HeadRows {
  const float *q, *k, *v, *g, *beta;
  int stride, value_heads;
  const float* q_row(int t) const { return q + static_cast<size_t>(t) * static_cast<size_t>(stride); }
  const float* k_row(int t) const { return k + static_cast<size_t>(t) * static_cast<size_t>(stride); }
  const float* v_row(int t) const { return v + static_cast<size_t>(t) * static_cast<size_t>(stride); }
  float g_at(int t) const { return g[static_cast<size_t>(t) * static_cast<size_t>(value_heads)]; }
  float beta_at(int t) const { return beta[static_cast<size_t>(t) * static_cast<size_t>(value_heads)]; }
};

HeadRows head_rows(const float* qkv, const float* g, const float* beta, const DeltaNetShape& s, int h) {
  const auto keys = static_cast<size_t>(s.key_heads) * static_cast<size_t>(s.head_k);
  const auto kh = static_cast<size_t>(h % s.key_heads);
  return HeadRows{qkv + kh * static_cast<size_t>(s.head_k),
                  qkv + keys + kh * static_cast<size_t>(s.head_k),
                  qkv + 2 * keys + static_cast<size_t>(h) * static_cast<size_t>(s.head_v),
                  g + h,
                  beta + h,
                  2 * s.key_heads * s.head_k + s.value_heads * s.head_v,
                  s.value_heads};
}

// One position of one head: S = exp(g) S; u = beta (v - S^T k); S += k u^T;
// out = S^T q. Two passes over S.
void step_head(const HeadRows& r, int t, const DeltaNetShape& s, float* S, float* out, float* scratch) {
  const int dk = s.head_k, dv = s.head_v;
  const float decay = std::exp(r.g_at(t));
  const float beta = r.beta_at(t);
  const float* q = r.q_row(t);
  const float* k = r.k_row(t);
  const float* v = r.v_row(t);
  float* u = scratch;
  std::fill(u, u + dv, 0.0f);
  for (int i = 0; i < dk; ++i) axpy(u, k[i], S + static_cast<size_t>(i) * dv, dv);  // S^T k, undecayed
  for (int j = 0; j < dv; ++j) u[j] = beta * (v[j] - decay * u[j]);
  std::fill(out, out + dv, 0.0f);
  const v128_t decay4 = wasm_f32x4_splat(decay);
  for (int i = 0; i < dk; ++i) {
    float* row = S + static_cast<size_t>(i) * dv;
    const v128_t ki = wasm_f32x4_splat(k[i]);
    for (int j = 0; j < dv; j += 4) {
      const v128_t updated = wasm_f32x4_add(wasm_f32x4_mul(decay4, simd::load(row + j)),
                                            wasm_f32x4_mul(ki, simd::load(u + j)));
      simd::store(row + j, updated);
    }
    axpy(out, q[i], row, dv);
  }
}

// The work of one chunk of one head, in buffers kept from chunk to chunk.
struct ChunkScratch {
  std::vector<float> G, E, D, A, QK, KS, QS, U, step;  // as in delta_net_chunked's description
  ChunkScratch(size_t chunk, size_t head_v)
      : G(chunk + 3), E(chunk), D(chunk * (chunk + 3)), A(chunk * chunk), QK(chunk * chunk), KS(chunk * head_v),
        QS(chunk * head_v), U(chunk * head_v), step(head_v) {}
};

void chunk_head(const HeadRows& r, int t0, int len, const DeltaNetShape& s, float* S, float* out, size_t out_stride,
                ChunkScratch& w) {
  const int dk = s.head_k, dv = s.head_v;
  const auto L = static_cast<size_t>(len);
  const auto dvs = static_cast<size_t>(dv);
  // Cumulative log-decays, and the decay from position j to t, exp(G_t - G_j),
  // four j at a time (the row padded to a multiple of 4).
  float cumulative = 0;
  for (int t = 0; t < len; ++t) w.G[static_cast<size_t>(t)] = cumulative += r.g_at(t0 + t);
  for (size_t t = L; t < L + 3; ++t) w.G[t] = w.G[L - 1];
  const simd::ExpF32x4 exp4;
  const size_t row_width = (L + 3) & ~size_t{3};
  for (size_t t = 0; t < L; ++t) {
    const v128_t gt = wasm_f32x4_splat(w.G[t]);
    for (size_t j = 0; j <= t; j += 4) {
      simd::store(&w.D[t * row_width + j], exp4(wasm_f32x4_sub(gt, simd::load(&w.G[j]))));
    }
    w.E[t] = std::exp(w.G[t]);
  }
  // A[t][j] = beta_t exp(G_t - G_j) k_t . k_j (j < t) and the decayed q_t . k_j (j <= t).
  for (int t = 0; t < len; ++t) {
    const float* kt = r.k_row(t0 + t);
    const float* qt = r.q_row(t0 + t);
    const float bt = r.beta_at(t0 + t);
    const float* d = &w.D[static_cast<size_t>(t) * row_width];
    for (int j = 0; j <= t; ++j) {
      const float* kj = r.k_row(t0 + j);
      if (j < t) w.A[static_cast<size_t>(t) * L + j] = bt * d[j] * dot(kt, kj, dk);
      w.QK[static_cast<size_t>(t) * L + j] = d[j] * dot(qt, kj, dk);
    }
  }
  // S0^T k_t and S0^T q_t: four positions and four columns at a time, the
  // eight sums in registers over S0's rows.
  for (int t = 0; t < len; t += 4) {
    const int rows = std::min(4, len - t);
    const float* k[4];
    const float* q[4];
    for (int x = 0; x < 4; ++x) {
      k[x] = r.k_row(t0 + t + std::min(x, rows - 1));
      q[x] = r.q_row(t0 + t + std::min(x, rows - 1));
    }
    for (int c = 0; c < dv; c += 4) {
      v128_t ks[4], qs[4];
      for (int x = 0; x < 4; ++x) ks[x] = qs[x] = wasm_f32x4_splat(0.0f);
      for (int i = 0; i < dk; ++i) {
        const v128_t row = simd::load(S + static_cast<size_t>(i) * dvs + c);
        for (int x = 0; x < 4; ++x) {
          ks[x] = wasm_f32x4_add(ks[x], wasm_f32x4_mul(wasm_f32x4_splat(k[x][i]), row));
          qs[x] = wasm_f32x4_add(qs[x], wasm_f32x4_mul(wasm_f32x4_splat(q[x][i]), row));
        }
      }
      for (int x = 0; x < rows; ++x) {
        simd::store(&w.KS[static_cast<size_t>(t + x) * dvs + c], ks[x]);
        simd::store(&w.QS[static_cast<size_t>(t + x) * dvs + c], qs[x]);
      }
    }
  }
  // The updates, by forward substitution, and the outputs: four columns at
  // a time, the sum over earlier positions in a register.
  for (int t = 0; t < len; ++t) {
    float* u = &w.U[static_cast<size_t>(t) * dvs];
    const float* vt = r.v_row(t0 + t);
    const float* ks = &w.KS[static_cast<size_t>(t) * dvs];
    const float* qs = &w.QS[static_cast<size_t>(t) * dvs];
    const float* a = &w.A[static_cast<size_t>(t) * L];
    const float* qk = &w.QK[static_cast<size_t>(t) * L];
    const v128_t bt = wasm_f32x4_splat(r.beta_at(t0 + t));
    const v128_t et = wasm_f32x4_splat(w.E[static_cast<size_t>(t)]);
    float* o = out + static_cast<size_t>(t0 + t) * out_stride;
    for (int c = 0; c < dv; c += 4) {
      v128_t acc = wasm_f32x4_mul(bt, wasm_f32x4_sub(simd::load(vt + c), wasm_f32x4_mul(et, simd::load(ks + c))));
      for (int j = 0; j < t; ++j) {
        acc = wasm_f32x4_sub(acc, wasm_f32x4_mul(wasm_f32x4_splat(a[j]), simd::load(&w.U[static_cast<size_t>(j) * dvs + c])));
      }
      simd::store(u + c, acc);
      v128_t sum = wasm_f32x4_mul(et, simd::load(qs + c));
      for (int j = 0; j <= t; ++j) {
        sum = wasm_f32x4_add(sum, wasm_f32x4_mul(wasm_f32x4_splat(qk[j]), simd::load(&w.U[static_cast<size_t>(j) * dvs + c])));
      }
      simd::store(o + c, sum);
    }
  }
  // The state after the chunk: exp(G_last) S0 + sum_j exp(G_last - G_j) k_j u_j^T,
  // four positions per pass over S.
  const float* last = &w.D[(L - 1) * row_width];  // exp(G_last - G_j)
  const v128_t e_last = wasm_f32x4_splat(w.E[L - 1]);
  for (int i = 0; i < dk; ++i) {
    float* row = S + static_cast<size_t>(i) * dvs;
    for (int j = 0; j < dv; j += 4) simd::store(row + j, wasm_f32x4_mul(e_last, simd::load(row + j)));
  }
  for (int j0 = 0; j0 < len; j0 += 4) {
    const int n = std::min(4, len - j0);
    const float* u[4];
    const float* kj[4];
    for (int x = 0; x < 4; ++x) {
      u[x] = &w.U[static_cast<size_t>(j0 + std::min(x, n - 1)) * dvs];
      kj[x] = r.k_row(t0 + j0 + std::min(x, n - 1));
    }
    for (int i = 0; i < dk; ++i) {
      float* row = S + static_cast<size_t>(i) * dvs;
      v128_t c[4];
      for (int x = 0; x < 4; ++x) c[x] = wasm_f32x4_splat(x < n ? last[j0 + x] * kj[x][i] : 0.0f);
      for (int j = 0; j < dv; j += 4) {
        v128_t acc = simd::load(row + j);
        for (int x = 0; x < 4; ++x) acc = wasm_f32x4_add(acc, wasm_f32x4_mul(c[x], simd::load(u[x] + j)));
        simd::store(row + j, acc);
      }
    }
  }
}

}  // namespace

void causal_conv(const float* in, int n, int channels, int kernel, const float* weights, float* state, float* out,
                 ThreadPool& pool) {
  const int history = kernel - 1;
  const auto width = static_cast<size_t>(channels);
  // The taps by position in the window, each a row over the channels.
  std::vector<float> taps(static_cast<size_t>(kernel) * width);
  for (size_t c = 0; c < width; ++c) {
    for (int j = 0; j < kernel; ++j) taps[static_cast<size_t>(j) * width + c] = weights[c * static_cast<size_t>(kernel) + j];
  }
  // Input row p of the run (negative: from the state).
  const auto input = [&](int p) {
    return p >= 0 ? in + static_cast<size_t>(p) * width : state + static_cast<size_t>(history + p) * width;
  };
  // Channel ranges of whole vectors; each channel's sum in tap order, so
  // that any split of the run gives the same bits.
  const size_t vectors = (width + 3) / 4;
  const size_t per_task = std::max<size_t>(16, vectors / static_cast<size_t>(4 * pool.size()));
  pool.parallel_for(vectors, per_task, [&](size_t begin, size_t end, int) {
    const size_t c0 = begin * 4, c1 = std::min(width, end * 4);
    const size_t whole = c0 + (c1 - c0) / 4 * 4;
    for (int t = 0; t < n; ++t) {
      float* o = out + static_cast<size_t>(t) * width;
      for (size_t c = c0; c < whole; c += 4) {
        v128_t sum = wasm_f32x4_splat(0.0f);
        for (int j = 0; j < kernel; ++j) {
          sum = wasm_f32x4_add(sum, wasm_f32x4_mul(simd::load(&taps[static_cast<size_t>(j) * width + c]),
                                                   simd::load(input(t + j - history) + c)));
        }
        simd::store(o + c, sum);
      }
      for (size_t c = whole; c < c1; ++c) {
        float sum = 0;
        for (int j = 0; j < kernel; ++j) sum += taps[static_cast<size_t>(j) * width + c] * input(t + j - history)[c];
        o[c] = sum;
      }
    }
  });
  // The last `history` inputs, oldest first, become the state.
  std::vector<float> kept(static_cast<size_t>(history) * width);
  for (int j = 0; j < history; ++j) std::copy_n(input(n - history + j), width, &kept[static_cast<size_t>(j) * width]);
  std::copy(kept.begin(), kept.end(), state);
}

void delta_net_steps(const float* qkv, const float* g, const float* beta, int n, const DeltaNetShape& s,
                     float* state, float* out, ThreadPool& pool) {
  const size_t out_stride = static_cast<size_t>(s.value_heads) * static_cast<size_t>(s.head_v);
  const size_t state_floats = static_cast<size_t>(s.head_k) * static_cast<size_t>(s.head_v);
  pool.parallel_for(static_cast<size_t>(s.value_heads), 1, [&](size_t begin, size_t end, int) {
    std::vector<float> scratch(static_cast<size_t>(s.head_v));
    for (size_t h = begin; h < end; ++h) {
      const HeadRows r = head_rows(qkv, g, beta, s, static_cast<int>(h));
      for (int t = 0; t < n; ++t) {
        step_head(r, t, s, state + h * state_floats, out + static_cast<size_t>(t) * out_stride + h * s.head_v,
                  scratch.data());
      }
    }
  });
}

void delta_net_chunked(const float* qkv, const float* g, const float* beta, int n, const DeltaNetShape& s, int chunk,
                       float* state, float* out, ThreadPool& pool) {
  const size_t out_stride = static_cast<size_t>(s.value_heads) * static_cast<size_t>(s.head_v);
  const size_t state_floats = static_cast<size_t>(s.head_k) * static_cast<size_t>(s.head_v);
  pool.parallel_for(static_cast<size_t>(s.value_heads), 1, [&](size_t begin, size_t end, int) {
    ChunkScratch scratch(static_cast<size_t>(std::min(chunk, n)), static_cast<size_t>(s.head_v));
    for (size_t h = begin; h < end; ++h) {
      const HeadRows r = head_rows(qkv, g, beta, s, static_cast<int>(h));
      float* S = state + h * state_floats;
      float* head_out = out + h * static_cast<size_t>(s.head_v);
      for (int t0 = 0; t0 < n; t0 += chunk) {
        const int len = std::min(chunk, n - t0);
        if (len == 1) {  // a lone position: the step itself
          step_head(r, t0, s, S, head_out + static_cast<size_t>(t0) * out_stride, scratch.step.data());
        } else {
          chunk_head(r, t0, len, s, S, head_out, out_stride, scratch);
        }
      }
    }
  });
}

}  // namespace sipllm
