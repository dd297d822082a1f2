// Causal multi-head attention (with grouped KV heads) over the paged KV
// cache: for query position `pos` and head h,
//   out_h = sum over t in the window of softmax_t(cap(scale * q_h . k_t)) v_t
// where k_t and v_t are the cache's rows of h's KV head, the window is
// t <= pos (and t > pos - window for a sliding-window layer), and cap is the
// identity or Gemma 2's soft-cap, c * tanh(x / c).
//
// Two paths, llama.cpp's two (AttentionPath below), which differ in their
// rounding: the one-chunk path takes one query at a time (with an F16 cache
// the query rounded to F16, the weighted sum of values kept in half floats);
// the tiled path, for a batch of queries, keeps floats throughout, with the
// keys and values converted a tile at a time for every query of a task.
//
// Each (position, head) is computed with a fixed order of operations of its
// own on either path, so the result does not depend on the batch, the chunk
// or the thread count. On the one-chunk path, heads that share a KV head go
// through the keys together, so that each key is read and converted once
// for all of them; then each head's weighted sum of values goes through them
// 16 elements at a time, kept in registers. On the tiled path, a task takes
// a KV head's heads for a few positions: each tile of keys and values is
// converted once for all of them, and heads go in pairs through it.
#pragma once

#include <vector>

#include "core/kv_cache.h"

namespace sipllm {

class ThreadPool;

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0;    // of q . k; usually 1 / sqrt(head_dim)
  float softcap = 0;  // 0: none
  int window = 0;     // positions seen, the query's own included; 0: all before it

  // The first position `pos` attends to.
  int first_position(int pos) const { return window > 0 && pos >= window ? pos - window + 1 : 0; }
};

// How llama.cpp's CPU flash attention (its default) computes a batch of
// queries, by their number: fewer than kTiledMinQueries take its one-chunk
// path, one query at a time (with an F16 cache the query rounded to F16 and
// the weighted sum of values kept in half floats, rounded after every key);
// at least that many its tiled path (everything in floats, keys and values
// converted a tile at a time). The caller chooses, so that a prompt's result
// does not depend on how it is split into chunks.
enum class AttentionPath { kOneChunk, kTiled };
inline constexpr int kTiledMinQueries = 64;  // ggml's GGML_FA_TILE_Q

// Writes the key and value rows (the layer's kv_dim floats each) of `pos` in
// `layer` of the cache, rounded to its type.
void store_kv(KvCache& cache, int layer, int pos, const float* key, const float* value);

// One head of one position, in double precision: the tests' reference. The
// query is rounded to F16 for an F16 cache on the one-chunk path, as there.
// `scores` has room for pos + 1 floats.
void attend_reference(const float* q, int pos, int head, const KvCache& cache, int layer,
                      const AttentionShape& shape, float* out, float* scores,
                      AttentionPath path = AttentionPath::kOneChunk);

// The floats attention()'s `scratch` grows to at most, for positions up to
// `context_length` and `threads` threads.
size_t attention_scratch_floats(const AttentionShape& shape, int context_length, int threads);

// Every head of positions start_pos .. start_pos + n - 1, whose queries are
// the rows of q (n x n_heads * head_dim) and whose keys and values are already
// in the cache; writes the rows of out alike. Spreads (position, head) pairs
// over the pool when there is enough work; `scratch` holds per-thread scores.
void attention(const float* q, int n, int start_pos, const KvCache& cache, int layer,
               const AttentionShape& shape, float* out, ThreadPool& pool, std::vector<float>& scratch,
               AttentionPath path = AttentionPath::kOneChunk);

}  // namespace sipllm
