// The recurrent layers' kernels: the chunked gated delta rule against the
// step-by-step recurrence, and the causal convolution run in pieces against
// one run.
#include "kernels/recurrent.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace sipllm {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rows of fused q, k, v as a DeltaNet layer has them: q and k L2-normed per
// head (q also scaled), v anything.
std::vector<float> deltanet_inputs(int n, const DeltaNetShape& s, std::mt19937& rng) {
  const int keys = s.key_heads * s.head_k;
  const int width = 2 * keys + s.value_heads * s.head_v;
  std::vector<float> qkv = random_floats(static_cast<size_t>(n) * width, rng, -1, 1);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < 2 * s.key_heads; ++h) {
      float* head = &qkv[static_cast<size_t>(t) * width + static_cast<size_t>(h) * s.head_k];
      float sum = 0;
      for (int i = 0; i < s.head_k; ++i) sum += head[i] * head[i];
      const float scale = (h < s.key_heads ? 1.0f / std::sqrt(static_cast<float>(s.head_k)) : 1.0f) / std::sqrt(sum);
      for (int i = 0; i < s.head_k; ++i) head[i] *= scale;
    }
  }
  return qkv;
}

TEST(DeltaNet, ChunkedFormMatchesTheStepsOverLengthsAroundTheChunk) {
  DeltaNetShape s;
  s.key_heads = 2, s.head_k = 32, s.value_heads = 4, s.head_v = 16;
  const size_t state_floats = static_cast<size_t>(s.value_heads) * s.head_k * s.head_v;
  const int out_width = s.value_heads * s.head_v;
  ThreadPool pool(2);
  std::mt19937 rng(5);
  for (int n : {1, 2, 3, 15, 16, 17, 31, 33, 64, 100}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const std::vector<float> qkv = deltanet_inputs(n, s, rng);
    // Log-decays from near 0 (long memory) to -3, strengths in (0, 1).
    const std::vector<float> g = random_floats(static_cast<size_t>(n) * s.value_heads, rng, -3.0f, -0.001f);
    const std::vector<float> beta = random_floats(static_cast<size_t>(n) * s.value_heads, rng, 0.0f, 1.0f);
    const std::vector<float> start = random_floats(state_floats, rng, -0.5f, 0.5f);
    std::vector<float> state_steps = start, state_chunked = start;
    std::vector<float> out_steps(static_cast<size_t>(n) * out_width), out_chunked(out_steps.size());
    delta_net_steps(qkv.data(), g.data(), beta.data(), n, s, state_steps.data(), out_steps.data(), pool);
    delta_net_chunked(qkv.data(), g.data(), beta.data(), n, s, 16, state_chunked.data(), out_chunked.data(), pool);
    double worst = 0;
    for (size_t i = 0; i < out_steps.size(); ++i) worst = std::max(worst, std::fabs(double(out_steps[i]) - out_chunked[i]));
    for (size_t i = 0; i < start.size(); ++i) {
      worst = std::max(worst, std::fabs(double(state_steps[i]) - state_chunked[i]));
    }
    // Values of order 1; float rounding in different orders.
    EXPECT_LT(worst, 2e-5);
    // And the recurrence did something: the state moved.
    double moved = 0;
    for (size_t i = 0; i < start.size(); ++i) moved = std::max(moved, std::fabs(double(state_steps[i]) - start[i]));
    EXPECT_GT(moved, 1e-3);
  }
}

TEST(DeltaNet, ValueHeadsReadKeyHeadsInTurn) {
  // Value head h reads key head h % key_heads (llama.cpp's tiling): with
  // two key heads, heads 0 and 2 see the same keys, so from the same state
  // and the same values they give the same output; heads 0 and 1 do not.
  DeltaNetShape s;
  s.key_heads = 2, s.head_k = 8, s.value_heads = 4, s.head_v = 4;
  ThreadPool pool(1);
  std::mt19937 rng(3);
  const int n = 5;
  std::vector<float> qkv = deltanet_inputs(n, s, rng);
  const int keys = s.key_heads * s.head_k, width = 2 * keys + s.value_heads * s.head_v;
  for (int t = 0; t < n; ++t) {  // every value head the same values
    float* v = &qkv[static_cast<size_t>(t) * width + 2 * keys];
    for (int h = 1; h < s.value_heads; ++h) std::copy_n(v, s.head_v, v + h * s.head_v);
  }
  const std::vector<float> g(static_cast<size_t>(n) * s.value_heads, -0.1f), beta(g.size(), 0.5f);
  std::vector<float> state(static_cast<size_t>(s.value_heads) * s.head_k * s.head_v, 0.0f);
  std::vector<float> out(static_cast<size_t>(n) * s.value_heads * s.head_v);
  delta_net_chunked(qkv.data(), g.data(), beta.data(), n, s, 64, state.data(), out.data(), pool);
  const float* last = &out[static_cast<size_t>(n - 1) * s.value_heads * s.head_v];
  for (int j = 0; j < s.head_v; ++j) EXPECT_EQ(last[j], last[2 * s.head_v + j]);
  bool differ = false;
  for (int j = 0; j < s.head_v; ++j) differ |= last[j] != last[s.head_v + j];
  EXPECT_TRUE(differ);
}

TEST(CausalConv, RunsInPiecesEqualOneRunBitForBit) {
  const int channels = 24, kernel = 4, n = 13;
  ThreadPool pool(2);
  std::mt19937 rng(11);
  const std::vector<float> in = random_floats(static_cast<size_t>(n) * channels, rng, -1, 1);
  const std::vector<float> weights = random_floats(static_cast<size_t>(channels) * kernel, rng, -1, 1);
  std::vector<float> state_whole(static_cast<size_t>(kernel - 1) * channels, 0.0f), out_whole(in.size());
  causal_conv(in.data(), n, channels, kernel, weights.data(), state_whole.data(), out_whole.data(), pool);
  // Position t's output from its own window, tap kernel-1 on t itself.
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < channels; ++c) {
      float expected = 0;
      for (int j = 0; j < kernel; ++j) {
        const int p = t + j - (kernel - 1);
        if (p >= 0) expected += weights[static_cast<size_t>(c) * kernel + j] * in[static_cast<size_t>(p) * channels + c];
      }
      EXPECT_NEAR(out_whole[static_cast<size_t>(t) * channels + c], expected, 1e-6f);
    }
  }
  // Pieces of 1, 2 and the rest (shorter than the history, then longer).
  std::vector<float> state(static_cast<size_t>(kernel - 1) * channels, 0.0f), out(in.size());
  int done = 0;
  for (int piece : {1, 2, n - 3}) {
    causal_conv(&in[static_cast<size_t>(done) * channels], piece, channels, kernel, weights.data(), state.data(),
                &out[static_cast<size_t>(done) * channels], pool);
    done += piece;
  }
  EXPECT_EQ(out, out_whole);
  EXPECT_EQ(state, state_whole);
}

}  // namespace
}  // namespace sipllm
