#include "kernels/recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/thread_pool.h"

namespace sipllm {
namespace {

// y += a * x over n floats.
inline void axpy(float* y, float a, const float* x, int n) {
  for (int j = 0; j < n; ++j) y[j] += a * x[j];
}

inline float dot(const float* a, const float* b, int n) {
  float sum = 0;
  for (int j = 0; j < n; ++j) sum += a[j] * b[j];
  return sum;
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
// out = S^T q.
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
  for (int i = 0; i < dk; ++i) {
    float* row = S + static_cast<size_t>(i) * dv;
    for (int j = 0; j < dv; ++j) row[j] = decay * row[j] + k[i] * u[j];
    axpy(out, q[i], row, dv);
  }
}

}  // namespace

void causal_conv(const float* in, int n, int channels, int kernel, const float* weights, float* state, float* out,
                 ThreadPool& pool) {
  const int history = kernel - 1;
  const auto width = static_cast<size_t>(channels);
  const size_t per_task = std::max<size_t>(16, width / static_cast<size_t>(4 * pool.size()));
  pool.parallel_for(width, per_task, [&](size_t begin, size_t end, int) {
    for (size_t c = begin; c < end; ++c) {
      const float* w = weights + c * static_cast<size_t>(kernel);
      // Input at run position p (negative: from the state).
      const auto input = [&](int p) {
        return p >= 0 ? in[static_cast<size_t>(p) * width + c] : state[static_cast<size_t>(history + p) * width + c];
      };
      for (int t = 0; t < n; ++t) {
        float sum = 0;
        for (int j = 0; j < kernel; ++j) sum += w[j] * input(t + j - history);
        out[static_cast<size_t>(t) * width + c] = sum;
      }
      // The last `history` inputs, oldest first, become the state.
      float last[32];
      for (int j = 0; j < history; ++j) last[j] = input(n - history + j);
      for (int j = 0; j < history; ++j) state[static_cast<size_t>(j) * width + c] = last[j];
    }
  });
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
  const int dk = s.head_k, dv = s.head_v;
  const size_t out_stride = static_cast<size_t>(s.value_heads) * static_cast<size_t>(dv);
  const size_t state_floats = static_cast<size_t>(dk) * static_cast<size_t>(dv);
  const auto L = static_cast<size_t>(chunk);
  pool.parallel_for(static_cast<size_t>(s.value_heads), 1, [&](size_t begin, size_t end, int) {
    // Per chunk: the cumulative decays G, the system's matrix A and q.k
    // (L x L), S0^T k and S0^T q, the updates U (L x dv).
    std::vector<float> G(L), A(L * L), QK(L * L), KS(L * static_cast<size_t>(dv)),
        QS(L * static_cast<size_t>(dv)), U(L * static_cast<size_t>(dv)), scratch(static_cast<size_t>(dv));
    for (size_t h = begin; h < end; ++h) {
      const HeadRows r = head_rows(qkv, g, beta, s, static_cast<int>(h));
      float* S = state + h * state_floats;
      for (int t0 = 0; t0 < n; t0 += chunk) {
        const int len = std::min(chunk, n - t0);
        if (len == 1) {  // a lone position: the step itself
          step_head(r, t0, s, S, out + static_cast<size_t>(t0) * out_stride + h * dv, scratch.data());
          continue;
        }
        float cumulative = 0;
        for (int t = 0; t < len; ++t) G[t] = cumulative += r.g_at(t0 + t);
        // S0^T k_t and S0^T q_t.
        std::fill(KS.begin(), KS.begin() + len * dv, 0.0f);
        std::fill(QS.begin(), QS.begin() + len * dv, 0.0f);
        for (int t = 0; t < len; ++t) {
          const float* kt = r.k_row(t0 + t);
          const float* qt = r.q_row(t0 + t);
          float* ks = &KS[static_cast<size_t>(t) * dv];
          float* qs = &QS[static_cast<size_t>(t) * dv];
          for (int i = 0; i < dk; ++i) {
            const float* row = S + static_cast<size_t>(i) * dv;
            axpy(ks, kt[i], row, dv);
            axpy(qs, qt[i], row, dv);
          }
        }
        // A[t][s] = beta_t exp(G_t - G_s) k_t . k_s and the decayed q_t . k_s.
        for (int t = 0; t < len; ++t) {
          const float* kt = r.k_row(t0 + t);
          const float* qt = r.q_row(t0 + t);
          const float bt = r.beta_at(t0 + t);
          for (int j = 0; j <= t; ++j) {
            const float* kj = r.k_row(t0 + j);
            const float decay = std::exp(G[t] - G[j]);
            if (j < t) A[static_cast<size_t>(t) * L + j] = bt * decay * dot(kt, kj, dk);
            QK[static_cast<size_t>(t) * L + j] = decay * dot(qt, kj, dk);
          }
        }
        // Forward substitution for the updates.
        for (int t = 0; t < len; ++t) {
          float* u = &U[static_cast<size_t>(t) * dv];
          const float* vt = r.v_row(t0 + t);
          const float* ks = &KS[static_cast<size_t>(t) * dv];
          const float bt = r.beta_at(t0 + t);
          const float et = std::exp(G[t]);
          for (int j = 0; j < dv; ++j) u[j] = bt * (vt[j] - et * ks[j]);
          for (int j = 0; j < t; ++j) axpy(u, -A[static_cast<size_t>(t) * L + j], &U[static_cast<size_t>(j) * dv], dv);
        }
        // Outputs.
        for (int t = 0; t < len; ++t) {
          float* o = out + static_cast<size_t>(t0 + t) * out_stride + h * dv;
          const float et = std::exp(G[t]);
          const float* qs = &QS[static_cast<size_t>(t) * dv];
          for (int j = 0; j < dv; ++j) o[j] = et * qs[j];
          for (int j = 0; j <= t; ++j) axpy(o, QK[static_cast<size_t>(t) * L + j], &U[static_cast<size_t>(j) * dv], dv);
        }
        // The state after the chunk.
        const float last = G[len - 1];
        const float e_last = std::exp(last);
        for (int i = 0; i < dk * dv; ++i) S[i] *= e_last;
        for (int j = 0; j < len; ++j) {
          const float* kj = r.k_row(t0 + j);
          const float w = std::exp(last - G[j]);
          const float* u = &U[static_cast<size_t>(j) * dv];
          for (int i = 0; i < dk; ++i) axpy(S + static_cast<size_t>(i) * dv, w * kj[i], u, dv);
        }
      }
    }
  });
}

}  // namespace sipllm
