// The position-mixing kernels of the recurrent layers of hybrid models: a
// causal depthwise convolution (Qwen3.5's DeltaNet layers and LFM2's short
// convolutions run one) and the gated delta rule (Qwen3.5's linear
// attention). Each takes a run of consecutive positions of one sequence and
// the state that sequence had before the run, and leaves the state after it.
#pragma once

#include <vector>

namespace sipllm {

class ThreadPool;

// out[t][c] = sum_k weights[c][k] * x[t + k - (kernel - 1)][c] for the n
// rows of `in` (channels wide), where the kernel - 1 rows before the run are
// `state` (oldest first): tap kernel - 1 weighs the current position, as in
// ggml_ssm_conv. `state` then holds the run's last kernel - 1 inputs.
void causal_conv(const float* in, int n, int channels, int kernel, const float* weights, float* state, float* out,
                 ThreadPool& pool);

struct DeltaNetShape {
  int key_heads = 0;    // q and k heads
  int head_k = 0;       // their size
  int value_heads = 0;  // v heads, a multiple of key_heads: value head h reads key head h % key_heads
  int head_v = 0;
};

// The gated delta rule over n positions. Row t of qkv holds q and k,
// key_heads heads of head_k each (q already L2-normed and scaled, k
// L2-normed), then v, value_heads heads of head_v; row t of g and beta one
// log-decay (<= 0) and one update strength per value head. Each value head h keeps a state
// matrix S (head_k x head_v, row-major in `state`), and at each position
//
//   S = exp(g) S;   S += k (beta (v - S^T k))^T;   out = S^T q.
//
// delta_net_steps() computes exactly that, one position after another (a
// decode step). delta_net_chunked() computes the same in chunks of `chunk`
// positions, each as small matrix products: within a chunk with decays
// G_t = g_1 + ... + g_t, the updates u_t = beta_t (v_t - S_t'^T k_t) solve
// the unit lower-triangular system
//
//   u_t + sum_{s<t} beta_t exp(G_t - G_s) (k_t . k_s) u_s = beta_t (v_t - exp(G_t) S0^T k_t),
//
// from which out_t = exp(G_t) S0^T q_t + sum_{s<=t} exp(G_t - G_s) (q_t . k_s) u_s and the
// state after the chunk, exp(G_L) S0 + sum_s exp(G_L - G_s) k_s u_s^T. The
// two agree within rounding; the chunks start at position 0 of the run, so
// the result depends only on the run's length, not on how it was scheduled.
void delta_net_steps(const float* qkv, const float* g, const float* beta, int n, const DeltaNetShape& shape,
                     float* state, float* out, ThreadPool& pool);
void delta_net_chunked(const float* qkv, const float* g, const float* beta, int n, const DeltaNetShape& shape,
                       int chunk, float* state, float* out, ThreadPool& pool);

}  // namespace sipllm
