#!/usr/bin/python3
"""Independent numpy reference forward pass for GGUF models.

Reads the GGUF file itself, dequantises the weights and runs a plain
token-at-a-time forward pass in float64 (or float32 with --float32) for the
llama, smollm3, qwen2, qwen3, gemma2, gemma3 and phi3 families, and a
layer-by-layer pass over the prompt for the hybrid qwen35 (gated DeltaNet +
gated attention), gemma4 and lfm2 (short convolutions + attention) families
and the mixture-of-experts qwen3moe, qwen35moe and lfm2moe,
each as llama.cpp computes it.  It shares no code with the engine, so the
engine's logits can be checked against it.  Needs only Python 3 and numpy.

  gguf_reference.py MODEL.gguf --tokens "1 2 3" --out LOGITS.bin
  gguf_reference.py MODEL.gguf --tokens "1" --greedy 200 [--decode]
  gguf_reference.py MODEL.gguf --tokens "1 2 3" --compare OTHER.bin --tol 1e-3
  gguf_reference.py QWEN35.gguf --tokens "1 2 3" --chunked-deltanet 8 --out LOGITS.bin
  gguf_reference.py --self-test-deltanet

Logits file: int32 n_positions, int32 n_vocab, then n_positions*n_vocab
float32, all little-endian, row-major (one row per position).
Exit codes: 0 ok, 1 --compare mismatch (or --self-test-deltanet failure),
2 bad input.
"""
import argparse
import math
import re
import struct
import sys

import numpy as np


class GGUFError(Exception):
    """Bad or unsupported input; reported as one line, exit code 2."""


# ----------------------------------------------------------------------------
# GGUF container

# metadata value type -> struct format (7 = bool, stored as one byte)
SCALAR_FMT = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f',
              7: '?', 10: 'Q', 11: 'q', 12: 'd'}
SCALAR_NP = {0: '<u1', 1: '<i1', 2: '<u2', 3: '<i2', 4: '<u4', 5: '<i4',
             6: '<f4', 7: '<u1', 10: '<u8', 11: '<i8', 12: '<f8'}
GGUF_STRING, GGUF_ARRAY = 8, 9

# ggml tensor type -> (name, elements per block, bytes per block)
GGML_TYPES = {0: ('F32', 1, 4), 1: ('F16', 1, 2), 2: ('Q4_0', 32, 18),
              3: ('Q4_1', 32, 20), 6: ('Q5_0', 32, 22), 7: ('Q5_1', 32, 24),
              8: ('Q8_0', 32, 34), 12: ('Q4_K', 256, 144), 13: ('Q5_K', 256, 176),
              14: ('Q6_K', 256, 210), 30: ('BF16', 1, 2)}

# Quantized weight types whose products take 8-bit activations in ggml-style
# engines: blocks of 32 for the 32-element formats, 256 for the K-quants.
ACTIVATION_BLOCK = {2: 32, 3: 32, 6: 32, 7: 32, 8: 32, 12: 256, 13: 256, 14: 256}


class Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n, what):
        if self.pos + n > len(self.buf):
            raise GGUFError(f"truncated file: {what} needs {n} bytes at offset "
                            f"{self.pos}, but the file is {len(self.buf)} bytes")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, fmt, what):
        return struct.unpack('<' + fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        n = self.scalar('Q', what + ' length')
        # surrogateescape keeps invalid UTF-8 (possible in token pieces) lossless
        return self.take(n, what).decode('utf-8', errors='surrogateescape')

    def value(self, vtype, what):
        if vtype in SCALAR_FMT:
            return self.scalar(SCALAR_FMT[vtype], what)
        if vtype == GGUF_STRING:
            return self.string(what)
        if vtype == GGUF_ARRAY:
            etype = self.scalar('I', what + ' element type')
            n = self.scalar('Q', what + ' element count')
            if etype in SCALAR_NP:
                size = np.dtype(SCALAR_NP[etype]).itemsize
                arr = np.frombuffer(self.take(n * size, what), SCALAR_NP[etype])
                return arr.astype(bool) if etype == 7 else arr
            if etype in (GGUF_STRING, GGUF_ARRAY):
                if n * 8 > len(self.buf) - self.pos:  # each element takes >= 8 bytes
                    self.take(n * 8, what)             # so a garbage count fails fast
                return [self.value(etype, f"{what}[{i}]") for i in range(n)]
            raise GGUFError(f"unknown array element type {etype} in {what}")
        raise GGUFError(f"unknown metadata value type {vtype} in {what}")


class Tensor:
    def __init__(self, name, dims, ttype, offset):
        self.name, self.dims, self.ttype, self.offset = name, dims, ttype, offset


class GGUF:
    def __init__(self, path):
        try:
            with open(path, 'rb') as f:
                self.buf = f.read()
        except OSError as e:
            raise GGUFError(f"cannot read {path}: {e.strerror}")
        r = Reader(self.buf)
        magic = r.take(4, 'magic')
        if magic != b'GGUF':
            raise GGUFError(f"not a GGUF file: magic is {magic!r}, expected b'GGUF'")
        version = r.scalar('I', 'version')
        if version not in (2, 3):
            hint = " (big-endian file?)" if version >= 1 << 16 else ""
            raise GGUFError(f"unsupported GGUF version {version}{hint}; only 2 and 3")
        n_tensors = r.scalar('Q', 'tensor_count')
        n_kv = r.scalar('Q', 'kv_count')

        self.metadata = {}
        for i in range(n_kv):
            key = r.string(f"metadata key #{i}")
            vtype = r.scalar('I', f"type of metadata {key}")
            self.metadata[key] = r.value(vtype, f"metadata {key}")

        self.tensors = {}
        for i in range(n_tensors):
            name = r.string(f"tensor #{i} name")
            n_dims = r.scalar('I', f"tensor {name} n_dims")
            if not 1 <= n_dims <= 4:
                raise GGUFError(f"tensor {name} has n_dims={n_dims}, expected 1..4")
            dims = [r.scalar('Q', f"tensor {name} dims") for _ in range(n_dims)]
            ttype = r.scalar('I', f"tensor {name} type")
            offset = r.scalar('Q', f"tensor {name} offset")
            if name in self.tensors:
                raise GGUFError(f"duplicate tensor name {name}")
            self.tensors[name] = Tensor(name, dims, ttype, offset)

        align = self.metadata.get('general.alignment', 32)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise GGUFError(f"general.alignment is {align!r}, expected a power of two")
        self.data_start = -(-r.pos // align) * align
        for t in self.tensors.values():
            if t.offset % align:
                raise GGUFError(f"tensor {t.name} offset {t.offset} is not a multiple "
                                f"of the alignment {align}")

    def tensor(self, name):
        """Dequantised tensor as a numpy array of shape dims[::-1] (ne0 = last axis)."""
        t = self.tensors[name]
        if t.ttype not in GGML_TYPES:
            supported = ', '.join(v[0] for v in GGML_TYPES.values())
            raise GGUFError(f"tensor {name} has unsupported ggml type {t.ttype} "
                            f"(supported: {supported})")
        tname, blk, blk_bytes = GGML_TYPES[t.ttype]
        n = math.prod(t.dims)  # Python ints: garbage dims must not overflow
        if t.dims[0] % blk:
            raise GGUFError(f"tensor {name} ({tname}) row length {t.dims[0]} "
                            f"is not a multiple of the block size {blk}")
        nbytes = n // blk * blk_bytes
        start = self.data_start + t.offset
        if start + nbytes > len(self.buf):
            raise GGUFError(f"truncated file: tensor {name} needs bytes {start}.."
                            f"{start + nbytes}, but the file is {len(self.buf)} bytes")
        raw = self.buf[start:start + nbytes]
        return dequantize(raw, t.ttype).reshape(t.dims[::-1])


def blocks(raw, nbytes):
    return np.frombuffer(raw, np.uint8).reshape(-1, nbytes)


def f16(b, at):
    """The fp16 at byte `at` of every block, as a float64 column."""
    return b[:, at:at + 2].copy().view('<f2').astype(np.float64)


def nibbles(qs):
    """Blocks of 16 bytes -> 32 levels: low nibbles are elements 0..15, high 16..31."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int16)


def fifth_bits(qh4):
    """Four bytes per block, read as a little-endian uint32: bit j belongs to element j."""
    qh = qh4.copy().view('<u4')                       # (n, 1)
    return ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int16)


def k_scales_mins(sc):
    """Q4_K/Q5_K: twelve bytes -> eight 6-bit scales and eight 6-bit mins.
    Sub-blocks 0..3 use the low six bits of bytes j and j+4; sub-blocks 4..7
    take their low four bits from byte j+4's nibbles and their top two bits
    from the top bits of bytes j-4 (scale) and j (min)."""
    sc = sc.astype(np.int16)
    lo_scale, lo_min = sc[:, 0:4] & 63, sc[:, 4:8] & 63
    hi_scale = (sc[:, 8:12] & 0xF) | ((sc[:, 0:4] >> 6) << 4)
    hi_min = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return (np.concatenate([lo_scale, hi_scale], axis=1).astype(np.float64),
            np.concatenate([lo_min, hi_min], axis=1).astype(np.float64))


def k_levels_4bit(qs):
    """Q4_K/Q5_K low bits: 128 bytes = four chunks of 32; chunk c holds
    sub-block 2c in its low nibbles and sub-block 2c+1 in its high nibbles.
    Returns (n, 8, 32) levels, one row per sub-block of 32."""
    q = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([q & 0xF, q >> 4], axis=2).reshape(-1, 8, 32).astype(np.int16)


def dequantize(raw, ttype):
    if ttype == 0:
        return np.frombuffer(raw, '<f4')
    if ttype == 1:
        return np.frombuffer(raw, '<f2')
    if ttype == 30:  # bf16 is the top half of an f32
        return (np.frombuffer(raw, '<u2').astype(np.uint32) << 16).view(np.float32)
    if ttype == 8:   # Q8_0: f16 d, int8 qs[32]
        b = blocks(raw, 34)
        return (f16(b, 0) * b[:, 2:].view(np.int8)).reshape(-1)
    if ttype == 2:   # Q4_0: f16 d, 16 bytes of nibbles; x = d * (q - 8)
        b = blocks(raw, 18)
        return (f16(b, 0) * (nibbles(b[:, 2:]) - 8)).reshape(-1)
    if ttype == 3:   # Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = d * q + m
        b = blocks(raw, 20)
        return (f16(b, 0) * nibbles(b[:, 4:]) + f16(b, 2)).reshape(-1)
    if ttype == 6:   # Q5_0: f16 d, 4 bytes of fifth bits, 16 of nibbles; x = d * (q - 16)
        b = blocks(raw, 22)
        q = nibbles(b[:, 6:]) | (fifth_bits(b[:, 2:6]) << 4)
        return (f16(b, 0) * (q - 16)).reshape(-1)
    if ttype == 7:   # Q5_1: f16 d, f16 m, 4 bytes of fifth bits, 16 of nibbles; x = d * q + m
        b = blocks(raw, 24)
        q = nibbles(b[:, 8:]) | (fifth_bits(b[:, 4:8]) << 4)
        return (f16(b, 0) * q + f16(b, 2)).reshape(-1)
    if ttype == 12:  # Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 of nibbles
        b = blocks(raw, 144)
        scale, mn = k_scales_mins(b[:, 4:16])
        q = k_levels_4bit(b[:, 16:])
        x = (f16(b, 0) * scale)[:, :, None] * q - (f16(b, 2) * mn)[:, :, None]
        return x.reshape(-1)
    if ttype == 13:  # Q5_K: as Q4_K plus 32 bytes of fifth bits before the nibbles
        b = blocks(raw, 176)
        scale, mn = k_scales_mins(b[:, 4:16])
        qh = b[:, 16:48].astype(np.int16)                   # (n, 32)
        # bit j of qh[l] is the fifth bit of element l of sub-block j
        high = (qh[:, None, :] >> np.arange(8)[None, :, None]) & 1
        q = k_levels_4bit(b[:, 48:]) | (high << 4)
        x = (f16(b, 0) * scale)[:, :, None] * q - (f16(b, 2) * mn)[:, :, None]
        return x.reshape(-1)
    if ttype == 14:  # Q6_K: 128 bytes low nibbles, 64 bytes 2-bit pairs, 16 int8 scales, f16 d
        b = blocks(raw, 210)
        ql = b[:, 0:128].reshape(-1, 2, 2, 32).astype(np.int16)   # half, ql group, l
        qh = b[:, 128:192].reshape(-1, 2, 1, 32).astype(np.int16)  # half, -, l
        # quarter k (0..3) of each half of 128: nibble k // 2 (low, high) of
        # ql group k % 2, and bits 2k, 2k+1 of qh
        low = np.stack([ql[:, :, 0] & 0xF, ql[:, :, 1] & 0xF,
                        ql[:, :, 0] >> 4, ql[:, :, 1] >> 4], axis=2)   # (n, 2, 4, 32)
        high = (qh >> (2 * np.arange(4, dtype=np.int16))[None, None, :, None]) & 3
        q = (low | (high << 4)).reshape(-1, 256) - 32
        scales = np.repeat(b[:, 192:208].view(np.int8).astype(np.float64), 16, axis=1)
        return (f16(b, 208) * scales * q).reshape(-1)
    raise AssertionError(ttype)


# ----------------------------------------------------------------------------
# The model families, as llama.cpp builds their graphs

# general.architecture -> what sets it apart from the plain Llama block
# (pre-norm RMSNorm attention and SwiGLU feed-forward, each added to the
# residual stream). 'rope' is the rotary layout: 'norm' rotates adjacent pairs
# (2i, 2i+1) of each head, 'neox' rotates (i, i + n_rot/2).
FAMILIES = {
    'llama':   dict(rope='norm'),                # optional rope_freqs.weight (Llama 3)
    'smollm3': dict(rope='norm', nope_step=4),   # no RoPE where (il + 1) % 4 == 0
    'qwen2':   dict(rope='neox', qkv_bias=True),
    'qwen3':   dict(rope='neox', qk_norm=True),
    'gemma2':  dict(rope='neox', gemma=True, swa_pattern=2),
    'gemma3':  dict(rope='neox', gemma=True, qk_norm=True, swa_pattern=6),
    'phi3':    dict(rope='neox', fused=True),    # attn_qkv, gate+up in ffn_up, LongRoPE
}

# llama.cpp gives the Gemma 27B models (and only them) a different attention
# scale; it recognises them by their layer count.
GEMMA_27B_LAYERS = {'gemma2': 46, 'gemma3': 62}

GELU_COEF_A = 0.044715
SQRT_2_OVER_PI = 0.79788456080286535587989211986876


def round_f16(x):
    """x as float16 holds it. ggml rounds float32 values, so go through
    float32 first: float64 -> float16 directly could round a tie differently."""
    return x.astype(np.float32).astype(np.float16).astype(x.dtype)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * x * (1 + GELU_COEF_A * x * x)))


def gelu_f16_table(x):
    """ggml's CPU GELU: outside (-10, 10) it is 0 or x, inside it looks the
    float16 of x up in a table of float16(gelu(x))."""
    inner = round_f16(gelu_tanh(round_f16(x)))
    return np.where(x <= -10, 0.0, np.where(x >= 10, x, inner)).astype(x.dtype)


# ----------------------------------------------------------------------------
# The gated delta rule (Qwen3.5's linear-attention layers)

def gated_delta_rule_recurrent(q, k, v, g, beta, S):
    """The gated delta rule one position at a time, as its definition reads.

    q, k: (n, H, dk) (q already scaled by 1/sqrt(dk)); v: (n, H, dv);
    g (log decay, <= 0) and beta: (n, H); S: (H, dk, dv), the state before
    the first position. Per head and position t:
        S   <- exp(g_t) S
        u_t  = beta_t (v_t - S^T k_t)          (the "new value")
        S   <- S + k_t u_t^T
        o_t  = S^T q_t
    Returns O (n, H, dv) and the state after the last position."""
    S = S.copy()
    O = np.empty(v.shape, np.result_type(q, v, S))
    for t in range(q.shape[0]):
        S *= np.exp(g[t])[:, None, None]
        u = beta[t][:, None] * (v[t] - np.einsum('hk,hkv->hv', k[t], S))
        S += k[t][:, :, None] * u[:, None, :]
        O[t] = np.einsum('hk,hkv->hv', q[t], S)
    return O, S


def gated_delta_rule_chunked(q, k, v, g, beta, S, chunk):
    """The same gated delta rule in chunked form (what a batched prefill
    computes); equal to gated_delta_rule_recurrent in exact arithmetic.

    Arguments as gated_delta_rule_recurrent, plus chunk = C, the number of
    positions per chunk (the last chunk may be shorter; no padding needed).
    For each head, and each chunk of positions t = 0..C-1 (indices within
    the chunk), with S0 (dk x dv) the state before the chunk, K, Q (C x dk)
    and V (C x dv) the chunk's rows:

      1. cumulative decay   G_t = g_0 + g_1 + ... + g_t   (so G_t <= 0)
      2. decay mask         D_ts = exp(G_t - G_s) for s <= t, else 0
                            (<= 1: every exponent is <= 0, no overflow)
      3. A (C x C, strictly lower triangular):
                            A_ts = -beta_t (k_t . k_s) exp(G_t - G_s) for s < t,
                            A_ts = 0 for s >= t
      4. T = (I - A)^-1, unit lower triangular, by forward substitution:
                            row t of T = e_t + sum_{s<t} A_ts (row s of T)
      5. W = T diag(beta exp(G)) K    (C x dk)
         U0 = T diag(beta) V          (C x dv)
      6. U = U0 - W S0                (C x dv): row t is the new value u_t
                                       of the recurrence
      7. output O = diag(exp(G)) Q S0 + (D o (Q K^T)) U
                    (o = elementwise; D keeps the diagonal: position t sees
                    its own u_t, weighted by (q_t . k_t))
      8. state  S_next = exp(G_last) S0 + (diag(exp(G_last - G)) K)^T U
                    G_last = G of the chunk's last position

    Why: unrolling the recurrence inside the chunk,
        S_t = exp(G_t) S0 + sum_{s<=t} exp(G_t - G_s) k_s u_s^T,
    so o_t = S_t^T q_t gives 7 and S_{C-1} gives 8; and
        u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t)
            = beta_t (v_t - exp(G_t) S0^T k_t) + sum_{s<t} A_ts u_s,
    i.e. (I - A) U = diag(beta) (V - diag(exp(G)) K S0), which is 4-6.
    (llama.cpp's chunked graph is this with C = 64; its triangular solve
    forms T the same way.)"""
    n, H = q.shape[:2]
    S = S.copy()
    O = np.empty(v.shape, np.result_type(q, v, S))
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        C = c1 - c0
        lower = np.tril(np.ones((C, C), bool), -1)        # s < t
        causal = np.tril(np.ones((C, C), bool))            # s <= t
        for h in range(H):
            Q, K, V = q[c0:c1, h], k[c0:c1, h], v[c0:c1, h]
            b = beta[c0:c1, h]
            G = np.cumsum(g[c0:c1, h])                                  # 1
            Gdiff = G[:, None] - G[None, :]
            D = np.where(causal, np.exp(np.where(causal, Gdiff, 0)), 0)  # 2
            A = np.where(lower, -b[:, None] * (K @ K.T) * D, 0)          # 3
            T = np.eye(C, dtype=A.dtype)                                 # 4
            for t in range(1, C):
                T[t] += A[t, :t] @ T[:t]
            W = T @ ((b * np.exp(G))[:, None] * K)                       # 5
            U0 = T @ (b[:, None] * V)
            U = U0 - W @ S[h]                                            # 6
            O[c0:c1, h] = np.exp(G)[:, None] * (Q @ S[h]) + (D * (Q @ K.T)) @ U   # 7
            S[h] = np.exp(G[-1]) * S[h] + (np.exp(G[-1] - G)[:, None] * K).T @ U  # 8
    return O, S


def self_test_deltanet(max_len=40, chunk=8, tol=1e-9, seed=1):
    """The chunked form against the recurrence in float64, every prompt length
    1..max_len, from a zero and from a random initial state. Returns 0 when
    they agree to tol (relative to the output's scale), 1 otherwise."""
    rng = np.random.default_rng(seed)
    H, dk, dv = 3, 16, 12
    worst = 0.0
    for n in range(1, max_len + 1):
        q = rng.normal(size=(n, H, dk))
        k = rng.normal(size=(n, H, dk))
        k /= np.linalg.norm(k, axis=-1, keepdims=True)   # as the model's L2-normed keys
        q /= np.linalg.norm(q, axis=-1, keepdims=True) * math.sqrt(dk)
        v = rng.normal(size=(n, H, dv))
        g = -np.logaddexp(0, rng.normal(size=(n, H))) * rng.uniform(0.1, 2, size=H)
        beta = 1 / (1 + np.exp(-rng.normal(size=(n, H))))
        for S0 in (np.zeros((H, dk, dv)), rng.normal(size=(H, dk, dv))):
            o1, s1 = gated_delta_rule_recurrent(q, k, v, g, beta, S0)
            o2, s2 = gated_delta_rule_chunked(q, k, v, g, beta, S0, chunk)
            err = max(np.abs(o1 - o2).max() / np.abs(o1).max(),
                      np.abs(s1 - s2).max() / np.abs(s1).max())
            worst = max(worst, err)
            if not err <= tol:
                print(f"FAIL: chunked gated delta rule (chunk {chunk}) differs from the "
                      f"recurrence at length {n}: relative error {err:.3g} > {tol:g}")
                return 1
    print(f"PASS: chunked gated delta rule (chunk {chunk}) equals the recurrence for "
          f"lengths 1..{max_len}, zero and random initial state: worst relative "
          f"error {worst:.3g} (tol {tol:g})")
    return 0


class Model:
    def __init__(self, gguf, dtype=np.float64, q8_activations=False, n_ctx=None,
                 like_llama_cpp=False):
        md = gguf.metadata
        arch = md.get('general.architecture')
        if arch not in FAMILIES:
            raise GGUFError(f"general.architecture is {arch!r}; supported: "
                            f"{', '.join(FAMILIES)}")
        self.arch = arch
        fam = FAMILIES[arch]

        def hp(key, default=None, kind=int):
            v = md.get(f'{arch}.{key}', default)
            if v is None:
                raise GGUFError(f"missing metadata {arch}.{key}")
            if isinstance(v, (str, list, np.ndarray)):
                raise GGUFError(f"metadata {arch}.{key} is {v!r:.40}, expected a number")
            return kind(v)

        self.dim = hp('embedding_length')
        self.n_layers = hp('block_count')
        self.hidden = hp('feed_forward_length')
        self.n_head = hp('attention.head_count')
        self.n_kv = hp('attention.head_count_kv', self.n_head)
        self.eps = hp('attention.layer_norm_rms_epsilon', kind=float)
        self.n_ctx_train = hp('context_length')
        # llama.cpp runs at the context length it is given; some choices
        # (LongRoPE's factors) depend on it. Default: the model's own.
        self.n_ctx = n_ctx if n_ctx is not None else self.n_ctx_train
        self.head_dim = hp('attention.key_length', self.dim // self.n_head)
        self.n_rot = hp('rope.dimension_count', self.head_dim)
        # Features that would change the maths: refuse rather than be silently wrong.
        if hp('attention.value_length', self.head_dim) != self.head_dim:
            raise GGUFError(f"{arch}.attention.value_length != key_length is not supported")
        if hp('expert_count', 0):
            raise GGUFError(f"mixture-of-experts {arch} ({arch}.expert_count > 0) is not supported")
        if self.n_head % self.n_kv or self.n_rot % 2 or self.n_rot > self.head_dim:
            raise GGUFError(f"inconsistent heads: head_count={self.n_head} head_count_kv="
                            f"{self.n_kv} head_dim={self.head_dim} rope dims={self.n_rot}")
        if arch == 'llama' and self.n_rot != self.head_dim:
            raise GGUFError("llama.rope.dimension_count must equal the head size "
                            "(llama.cpp refuses the file otherwise)")

        # RoPE. llama.cpp reads a missing scaling type as "linear"; the factor
        # (if any) divides every frequency, except with type "none". YaRN and
        # the other types change the rotation itself: refused.
        self.rope_mode = fam['rope']
        self.freq_base = hp('rope.freq_base', 10000.0, float)
        scaling = md.get(f'{arch}.rope.scaling.type', 'linear')
        factor = hp('rope.scaling.factor', 0.0, float)
        if not factor:
            factor = hp('rope.scale_linear', 0.0, float)  # the older key
        if scaling == 'none':
            self.freq_scale = 1.0
        elif scaling in ('linear', 'longrope'):
            self.freq_scale = 1.0 / factor if factor else 1.0
        else:
            raise GGUFError(f"{arch}.rope.scaling.type={scaling!r} is not supported "
                            "(only none, linear and longrope)")
        # rope.scaling.attn_factor multiplies cos and sin (so Q and K) everywhere
        self.rope_mscale = hp('rope.scaling.attn_factor', 1.0, float)
        self.n_ctx_orig = hp('rope.scaling.original_context_length', self.n_ctx_train)
        self.nope_step = fam.get('nope_step')

        # Sliding-window attention: window n_swa on the layers of the pattern
        # where il % pattern < pattern - 1 (llama.cpp's set_swa_pattern).
        # phi3 files may carry a window, but llama.cpp ignores it for phi3.
        self.n_swa, self.swa_layers = 0, set()
        pattern = fam.get('swa_pattern')
        if pattern:
            if f'{arch}.attention.sliding_window_pattern' in md:
                raise GGUFError(f"{arch}.attention.sliding_window_pattern is not supported")
            # gemma2 always slides (window 4096 unless the file says); gemma3
            # slides only if the file gives a window
            self.n_swa = hp('attention.sliding_window', 4096 if arch == 'gemma2' else 0)
            if self.n_swa < 0 or (arch == 'gemma2' and self.n_swa == 0):
                raise GGUFError(f"{arch}.attention.sliding_window={self.n_swa} is not supported")
            if self.n_swa:
                self.swa_layers = {il for il in range(self.n_layers)
                                   if il % pattern < pattern - 1}
        # rope on the sliding layers: gemma3 uses its local base (default
        # 10000) and no scaling; gemma2 the global settings unless given a base
        if arch == 'gemma3':
            self.swa_freq_base = hp('rope.freq_base_swa', 10000.0, float)
            self.swa_freq_scale = 1.0
        else:
            self.swa_freq_base = hp('rope.freq_base_swa', self.freq_base, float)
            self.swa_freq_scale = self.freq_scale

        # Attention scale and soft-capping. Gemma and phi3 scale Q itself (and
        # the product by 1); the others scale Q.K by 1/sqrt(head_dim). The
        # same in exact arithmetic, not once Q is rounded to float16.
        self.gemma = fam.get('gemma', False)
        if self.gemma:
            size = (self.dim // self.n_head if self.n_layers == GEMMA_27B_LAYERS[arch]
                    else self.head_dim)
            self.q_scale, self.kq_scale = 1.0 / math.sqrt(size), 1.0
        elif arch == 'phi3':
            self.q_scale, self.kq_scale = 1.0 / math.sqrt(self.head_dim), 1.0
        else:
            self.q_scale, self.kq_scale = 1.0, 1.0 / math.sqrt(self.head_dim)
        self.attn_softcap = self.final_softcap = 0.0
        if arch == 'gemma2':  # llama.cpp's defaults are Gemma 2's: 50 and 30
            self.attn_softcap = hp('attn_logit_softcapping', 50.0, float)
            self.final_softcap = hp('final_logit_softcapping', 30.0, float)
        elif arch == 'gemma3' and not self.swa_layers:
            # llama.cpp's sliding-window gemma3 graph has no final soft-cap at
            # all; the other one applies the file's, if it gives one
            self.final_softcap = hp('final_logit_softcapping', 0.0, float)

        emb = gguf.tensors.get('token_embd.weight')
        if emb is None or len(emb.dims) != 2:
            raise GGUFError("missing or non-2D tensor token_embd.weight")
        self.n_vocab = emb.dims[1]

        used = set()
        W, optional = self._tensor_readers(gguf, dtype, q8_activations or like_llama_cpp, used)

        d, hd, V = self.dim, self.head_dim, self.n_vocab
        nq, nkv = self.n_head * hd, self.n_kv * hd
        self.tok_embd = W('token_embd.weight', d, V)
        self.layers = []
        for i in range(self.n_layers):
            p = f'blk.{i}.'
            L = dict(attn_norm=W(p + 'attn_norm.weight', d),
                     wo=W(p + 'attn_output.weight', nq, d),
                     ffn_norm=W(p + 'ffn_norm.weight', d),
                     w_down=W(p + 'ffn_down.weight', self.hidden, d))
            # phi3 may fuse Q, K and V into one matrix (rows: Q, then K, then V)
            if fam.get('fused') and p + 'attn_qkv.weight' in gguf.tensors:
                L['wqkv'] = W(p + 'attn_qkv.weight', d, nq + 2 * nkv)
            else:
                L.update(wq=W(p + 'attn_q.weight', d, nq), wk=W(p + 'attn_k.weight', d, nkv),
                         wv=W(p + 'attn_v.weight', d, nkv))
            if fam.get('qkv_bias'):
                L.update(bq=W(p + 'attn_q.bias', nq), bk=W(p + 'attn_k.bias', nkv),
                         bv=W(p + 'attn_v.bias', nkv))
            elif arch in ('llama', 'smollm3'):  # llama.cpp adds them when present
                L.update(bq=optional(p + 'attn_q.bias', nq), bk=optional(p + 'attn_k.bias', nkv),
                         bv=optional(p + 'attn_v.bias', nkv))
            if fam.get('qk_norm'):
                L.update(q_norm=W(p + 'attn_q_norm.weight', hd), k_norm=W(p + 'attn_k_norm.weight', hd))
            if self.gemma:
                L.update(post_attn_norm=W(p + 'post_attention_norm.weight', d),
                         post_ffn_norm=W(p + 'post_ffw_norm.weight', d))
            # phi3 keeps gate and up in one matrix: the gate's rows first
            if fam.get('fused'):
                L['w_gate_up'] = W(p + 'ffn_up.weight', d, 2 * self.hidden)
            else:
                L.update(w_gate=W(p + 'ffn_gate.weight', d, self.hidden),
                         w_up=W(p + 'ffn_up.weight', d, self.hidden))
            self.layers.append(L)
        self.output_norm = W('output_norm.weight', d)
        # no output.weight means the output head is tied to the embeddings
        # (gemma2 always ties it: llama.cpp does not even look for output.weight)
        self.output = (W('output.weight', d, V) if 'output.weight' in gguf.tensors and arch != 'gemma2'
                       else self.tok_embd)

        # Per-dimension frequency factors: each rotary pair's frequency is
        # divided by its factor. Llama 3 files have one set (rope_freqs);
        # LongRoPE files (phi3, or llama with scaling type longrope) a short and
        # a long set, the long one used when the context exceeds the original.
        self.rope_factors, self.rope_factors_name = None, None
        half = self.n_rot // 2
        if arch == 'phi3' or (arch == 'llama' and scaling == 'longrope'):
            which = 'long' if self.n_ctx > self.n_ctx_orig else 'short'
            for w in ('long', 'short'):
                f = optional(f'rope_factors_{w}.weight', half)
                if w == which and f is not None:
                    self.rope_factors, self.rope_factors_name = f, f'rope_factors_{w}'
        elif arch == 'llama':
            self.rope_factors = optional('rope_freqs.weight', half)
            self.rope_factors_name = 'rope_freqs' if self.rope_factors is not None else None
        extra = sorted(set(gguf.tensors) - used)
        if extra:  # e.g. biases this family does not have: unsupported, so refuse
            raise GGUFError(f"unsupported extra tensors: {', '.join(extra[:5])}")

        self.dtype = dtype
        # like_llama_cpp: round where llama.cpp's CPU code rounds (see
        # --like-llama-cpp); each of these is one of its roundings
        self.ggml_q8 = self.f16_kv = self.f16_gelu = self.ggml_rope = like_llama_cpp
        # 8-bit activations are ggml's q8_0/q8_K blocks, in every engine that uses them
        self.ggml_q8 = self.ggml_q8 or q8_activations
        self.ff = None if self.rope_factors is None else self.rope_factors.astype(np.float64)

    def _tensor_readers(self, gguf, dtype, rounds_activations, used):
        """W(name, *dims) reads a tensor of exactly those dims (ggml order: ne0,
        the row length, first) as dtype, noting in self.act_block the block of
        the 8-bit activations a product with it takes (None when activations
        are not rounded); optional(name, *dims) the same, or None when absent.
        Both add the name to `used`."""
        self.act_block = {}  # id(matrix) -> block of the 8-bit activations it takes, or None

        def W(name, *dims):
            if name not in gguf.tensors:
                raise GGUFError(f"missing tensor {name}")
            if gguf.tensors[name].dims != list(dims):
                raise GGUFError(f"tensor {name} has dims {gguf.tensors[name].dims}, "
                                f"expected {list(dims)}")
            used.add(name)
            m = gguf.tensor(name).astype(dtype)
            self.act_block[id(m)] = ACTIVATION_BLOCK.get(gguf.tensors[name].ttype) if rounds_activations else None
            return m

        def optional(name, *dims):
            return W(name, *dims) if name in gguf.tensors else None

        return W, optional

    def describe(self):
        """One line of what this file makes the reference compute."""
        parts = [f"{self.arch}: {self.n_layers} layers", f"{self.rope_mode} rope base {self.freq_base:g}"]
        if self.freq_scale != 1:
            parts.append(f"freq scale {self.freq_scale:g}")
        if self.rope_factors is not None:
            parts.append(f"frequencies divided by {self.rope_factors_name} (context {self.n_ctx})")
        if self.rope_mscale != 1:
            parts.append(f"cos/sin x {self.rope_mscale:g}")
        if self.nope_step:
            parts.append(f"no rope where (il+1) % {self.nope_step} == 0")
        if self.swa_layers:
            parts.append(f"window {self.n_swa} on layers {sorted(self.swa_layers)} "
                         f"(rope base {self.swa_freq_base:g} there)")
        if self.attn_softcap:
            parts.append(f"attention soft-cap {self.attn_softcap:g}")
        if self.final_softcap:
            parts.append(f"final soft-cap {self.final_softcap:g}")
        return ', '.join(parts)

    def reset(self, n_pos):
        # sized for this run, not for context_length, which can be huge
        shape = (self.n_layers, n_pos, self.n_kv, self.head_dim)
        self.k_cache = np.zeros(shape, self.dtype)
        self.v_cache = np.zeros(shape, self.dtype)

    def mul(self, w, x):
        """w @ x, with x first rounded to 8 bits per block when w is quantized
        and the run asks for it (--q8-activations): per block of 32 (or 256
        for the K-quants), d = max|x| / 127 in float32 and x becomes
        round_half_even(x / d) * d, as ggml-style integer dot products see it.
        With ggml_q8, exactly as ggml's quantize_row_q8_0 / q8_K do it: the
        32-block scale is stored as float16 (so the products use that), and
        the 256-block one is 1 / (-127 / m), m the block's value of largest
        magnitude, with levels capped at 127.
        x may also be a matrix of rows (one per position): each row is
        rounded and multiplied the same way."""
        block = self.act_block.get(id(w))
        if block is None:
            return w @ x if x.ndim == 1 else x @ w.T
        f32 = np.float32
        xf = x.astype(f32).reshape(-1, block)
        amax = np.abs(xf).max(axis=1)
        nz = amax != 0
        if not self.ggml_q8:
            d = (amax / f32(127)).astype(f32)
            inv = np.divide(f32(1), d, out=np.zeros_like(d), where=nz)
            q = np.rint(xf * inv[:, None])  # numpy rounds halves to even
        elif block == 32:
            d = (amax / f32(127)).astype(f32)
            inv = np.divide(f32(127), amax, out=np.zeros_like(amax), where=nz)
            q = np.rint(xf * inv[:, None])
            d = d.astype(np.float16).astype(f32)
        else:
            m = xf[np.arange(len(xf)), np.abs(xf).argmax(axis=1)]
            iscale = np.divide(f32(-127), m, out=np.zeros_like(m), where=nz)
            q = np.minimum(127, np.rint(iscale[:, None] * xf))
            d = np.divide(f32(1), iscale, out=np.zeros_like(iscale), where=nz)
        x = (q * d[:, None].astype(np.float64)).reshape(x.shape).astype(self.dtype)
        return w @ x if x.ndim == 1 else x @ w.T

    def rmsnorm(self, x, w):
        """RMSNorm over the last axis (a whole vector, or each head's row)."""
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope_angles(self, pos, base, scale, n_rot=None, ff=None):
        """cos and sin of rotary pair i's angle pos * base^(-2i/n_rot) * scale
        / factor_i, times rope.scaling.attn_factor. With ggml_rope, computed
        the way ggml's CPU RoPE does it, in float32: the angle of pair i + 1
        is the float32 product of pair i's by float32(base^(-2/n_rot)).
        n_rot and the factors ff default to the model's (one set for all
        layers); the families with per-layer rotary settings pass their own."""
        n_rot = self.n_rot if n_rot is None else n_rot
        ff = self.ff if ff is None else ff
        half = n_rot // 2
        if not self.ggml_rope:
            ang = pos * base ** (-np.arange(half) * 2.0 / n_rot) * scale
            if ff is not None:
                ang = ang / ff
            return np.cos(ang) * self.rope_mscale, np.sin(ang) * self.rope_mscale
        f32 = np.float32
        step = f32(base ** (-2.0 / n_rot))
        theta = np.empty(half, f32)
        theta[0] = f32(pos)
        for i in range(1, half):
            theta[i] = theta[i - 1] * step
        if ff is not None:
            theta = theta / ff.astype(f32)
        theta = f32(scale) * theta
        mscale = f32(self.rope_mscale)
        return (np.cos(theta.astype(np.float64)).astype(f32) * mscale,
                np.sin(theta.astype(np.float64)).astype(f32) * mscale)

    def rope(self, x, pos, base, scale, n_rot=None, mode=None, ff=None):
        """Rotate the first n_rot dimensions of each head; the rest stay."""
        n_rot = self.n_rot if n_rot is None else n_rot
        mode = self.rope_mode if mode is None else mode
        c, s = self.rope_angles(pos, base, scale, n_rot, ff)
        c, s = c.astype(self.dtype), s.astype(self.dtype)
        if mode == 'norm':
            i0, i1 = slice(0, n_rot, 2), slice(1, n_rot, 2)
        else:
            i0, i1 = slice(0, n_rot // 2), slice(n_rot // 2, n_rot)
        x0, x1 = x[:, i0], x[:, i1]
        out = x.copy()
        out[:, i0] = x0 * c - x1 * s
        out[:, i1] = x0 * s + x1 * c
        return out

    def attend_f16(self, scores, Vc, kq_scale=None, softcap=None):
        """Softmax and the weighted sum of V as ggml's CPU flash attention forms
        them with an F16 cache: scores scaled (and soft-capped) in float32, the
        keys taken in order with a running maximum M and sum S in float32, and
        the weighted sum of V held in float16, rounded after every rescale and
        every added row. scores: unscaled q.k, (n_head, T); Vc: (T, n_kv, hd).
        kq_scale and softcap default to the model's."""
        f32 = np.float32
        n_head, n_kv, hd = scores.shape[0], Vc.shape[1], Vc.shape[2]
        group = n_head // n_kv
        kq_scale = self.kq_scale if kq_scale is None else kq_scale
        softcap = self.attn_softcap if softcap is None else softcap
        # the scale, with a soft-cap folded in: s = cap * tanh(q.k * scale / cap)
        cap = f32(softcap)
        scale = f32(kq_scale) / cap if cap else f32(kq_scale)
        scores = scores.astype(f32) * scale
        if cap:
            scores = cap * np.tanh(scores.astype(np.float64)).astype(f32)
        out = np.zeros((n_head, hd), self.dtype)
        for h in range(n_head):
            M, S = f32(-np.inf), f32(0)
            acc = np.zeros(hd, np.float32)
            for t, s in enumerate(scores[h]):
                v = Vc[t, h // group].astype(np.float32)
                if s > M:
                    ms = f32(np.exp(np.float64(M) - s)) if M > -np.inf else f32(0)
                    M, vs = s, f32(1)
                    acc = (acc * ms).astype(np.float16).astype(np.float32)
                else:
                    ms, vs = f32(1), f32(np.exp(np.float64(s) - M))
                acc = (acc + v * vs).astype(np.float16).astype(np.float32)
                S = f32(S * ms + vs)
            out[h] = acc * (f32(1) / S)
        return out.reshape(-1)

    def forward(self, token, pos):
        """Logits for `token` at position `pos`; positions 0..pos-1 must be in the cache."""
        hd, group = self.head_dim, self.n_head // self.n_kv
        nq, nkv = self.n_head * hd, self.n_kv * hd
        x = self.tok_embd[token].copy()
        if self.gemma:  # ggml scales by sqrtf(n_embd), a float32
            x *= float(np.float32(math.sqrt(self.dim))) if self.ggml_rope else math.sqrt(self.dim)
        for l, L in enumerate(self.layers):
            # attention
            h = self.rmsnorm(x, L['attn_norm'])
            if 'wqkv' in L:
                qkv = self.mul(L['wqkv'], h)
                q, k, v = qkv[:nq], qkv[nq:nq + nkv], qkv[nq + nkv:]
            else:
                q, k, v = self.mul(L['wq'], h), self.mul(L['wk'], h), self.mul(L['wv'], h)
            if L.get('bq') is not None:
                q = q + L['bq']
            if L.get('bk') is not None:
                k = k + L['bk']
            if L.get('bv') is not None:
                v = v + L['bv']
            q, k, v = q.reshape(self.n_head, hd), k.reshape(self.n_kv, hd), v.reshape(self.n_kv, hd)
            if 'q_norm' in L:  # per-head RMSNorm, before RoPE
                q, k = self.rmsnorm(q, L['q_norm']), self.rmsnorm(k, L['k_norm'])
            sliding = l in self.swa_layers
            if not (self.nope_step and (l + 1) % self.nope_step == 0):
                base, scale = ((self.swa_freq_base, self.swa_freq_scale) if sliding
                               else (self.freq_base, self.freq_scale))
                q, k = self.rope(q, pos, base, scale), self.rope(k, pos, base, scale)
            q = q * self.q_scale
            if self.f16_kv:
                # llama.cpp's cache holds K and V as float16, and ggml turns Q
                # into float16 too for its products with an F16 K
                q, k, v = round_f16(q), round_f16(k), round_f16(v)
            self.k_cache[l, pos], self.v_cache[l, pos] = k, v
            # a query at p sees keys p - n_swa + 1 .. p on a sliding layer
            first = max(0, pos - self.n_swa + 1) if sliding else 0
            K, Vc = self.k_cache[l, first:pos + 1], self.v_cache[l, first:pos + 1]  # (T, n_kv, hd)
            # query head h = kv*group + g uses kv head h // group
            qg = q.reshape(self.n_kv, group, hd)
            scores = np.einsum('kgd,tkd->kgt', qg, K)
            if self.f16_kv:
                att = self.attend_f16(scores.reshape(self.n_head, -1), Vc)
            else:
                scores = scores * self.kq_scale
                if self.attn_softcap:
                    scores = self.attn_softcap * np.tanh(scores / self.attn_softcap)
                # the cache holds only positions <= pos, so this softmax is already causal
                scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
                scores /= scores.sum(axis=-1, keepdims=True)
                att = np.einsum('kgt,tkd->kgd', scores, Vc).reshape(-1)
            o = self.mul(L['wo'], att)
            if self.gemma:
                o = self.rmsnorm(o, L['post_attn_norm'])
            x = x + o
            # gated feed-forward: SiLU (SwiGLU) or, for Gemma, tanh-GELU
            h = self.rmsnorm(x, L['ffn_norm'])
            if 'w_gate_up' in L:
                gu = self.mul(L['w_gate_up'], h)
                g, u = gu[:self.hidden], gu[self.hidden:]
            else:
                g, u = self.mul(L['w_gate'], h), self.mul(L['w_up'], h)
            if self.gemma:
                a = gelu_f16_table(g) if self.f16_gelu else gelu_tanh(g)
            else:
                a = g / (1 + np.exp(-g))
            f = self.mul(L['w_down'], a * u)
            if self.gemma:
                f = self.rmsnorm(f, L['post_ffn_norm'])
            x = x + f
        self.final_hidden = self.rmsnorm(x, self.output_norm)  # what embeddings pool
        logits = self.mul(self.output, self.final_hidden)
        if self.final_softcap:
            logits = self.final_softcap * np.tanh(logits / self.final_softcap)
        return logits

    def check_tokens(self, tokens, n_more=0):
        bad = [t for t in tokens if not 0 <= t < self.n_vocab]
        if bad:
            raise GGUFError(f"token id {bad[0]} out of range (n_vocab={self.n_vocab})")
        if len(tokens) + n_more > self.n_ctx:
            raise GGUFError(f"{len(tokens) + n_more} positions exceed the context "
                            f"length {self.n_ctx}")

    def logits(self, tokens):
        self.check_tokens(tokens)
        self.reset(len(tokens))
        return np.stack([self.forward(t, pos) for pos, t in enumerate(tokens)])

    def embedding(self, tokens, pooling, normalize=True):
        """The final norm's output pooled over the positions, as llama.cpp's
        llama_pooling_type: mean, cls (the first position) or last; then
        scaled to unit length (its embedding tool's default)."""
        self.check_tokens(tokens)
        self.reset(len(tokens))
        hidden = []
        for pos, t in enumerate(tokens):
            self.forward(t, pos)
            hidden.append(np.array(self.final_hidden, dtype=np.float64))
        hidden = np.stack(hidden)
        e = {'mean': hidden.mean(axis=0), 'cls': hidden[0], 'last': hidden[-1]}[pooling]
        return e / np.linalg.norm(e) if normalize else e

    def greedy(self, tokens, n):
        self.check_tokens(tokens, n)
        self.reset(len(tokens) + n)
        tokens = list(tokens)
        for pos in range(len(tokens) + n - 1):
            logits = self.forward(tokens[pos], pos)
            if pos >= len(tokens) - 1:  # past the prompt: take the argmax (first on ties)
                tokens.append(int(np.argmax(logits)))
        return tokens[len(tokens) - n:] if n else []


# ----------------------------------------------------------------------------
# The families whose layers differ from one another: qwen35 (gated DeltaNet
# and gated full attention), gemma4 (per-layer head sizes, rotary settings,
# feed-forward widths, shared K/V, per-layer embeddings) and lfm2 (short
# convolutions and attention). They run a block of positions layer by layer,
# as llama.cpp runs a prompt in one batch: the recurrent layers carry their
# state (convolution window, DeltaNet state) from one block to the next.

HYBRID_FAMILIES = ('qwen35', 'gemma4', 'lfm2', 'qwen3moe', 'qwen35moe', 'lfm2moe')


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def silu(x):
    return x / (1 + np.exp(-x))


def softplus(x):
    """ggml's: x itself above 20, else log(1 + e^x)."""
    return np.where(x > 20, x, np.logaddexp(0, np.minimum(x, 20)))


class HybridModel(Model):
    def __init__(self, gguf, dtype=np.float64, q8_activations=False, n_ctx=None,
                 like_llama_cpp=False, chunked_deltanet=0):
        md = gguf.metadata
        arch = md.get('general.architecture')
        if arch not in HYBRID_FAMILIES:
            raise GGUFError(f"general.architecture is {arch!r}; supported: "
                            f"{', '.join(list(FAMILIES) + list(HYBRID_FAMILIES))}")
        self.arch, self.metadata = arch, md
        self.dtype = dtype
        self.chunked_deltanet = chunked_deltanet

        def key(name, default=None, kind=int):
            """A scalar hyperparameter."""
            v = md.get(f'{arch}.{name}', default)
            if v is None:
                raise GGUFError(f"missing metadata {arch}.{name}")
            if isinstance(v, (str, list, np.ndarray)):
                raise GGUFError(f"metadata {arch}.{name} is {v!r:.40}, expected a number")
            return kind(v)

        self.n_layers = key('block_count')

        def per_layer(name, default=None, kind=int):
            """A hyperparameter that may be one number or one per layer (llama.cpp's
            get_key_or_arr): a list of n_layers values."""
            v = md.get(f'{arch}.{name}', default)
            if v is None:
                raise GGUFError(f"missing metadata {arch}.{name}")
            if isinstance(v, np.ndarray):
                if len(v) != self.n_layers:
                    raise GGUFError(f"metadata {arch}.{name} has {len(v)} values for "
                                    f"{self.n_layers} layers")
                return [kind(x) for x in v]
            if isinstance(v, (str, list)):
                raise GGUFError(f"metadata {arch}.{name} is {v!r:.40}, expected numbers")
            return [kind(v)] * self.n_layers

        self.dim = key('embedding_length')
        self.eps = key('attention.layer_norm_rms_epsilon', kind=float)
        self.n_ctx_train = key('context_length')
        self.n_ctx = n_ctx if n_ctx is not None else self.n_ctx_train
        # Mixture of experts: expert_used_count of expert_count experts per token.
        self.n_expert = key('expert_count', 0)
        self.n_expert_used = key('expert_used_count', 0) if self.n_expert else 0
        if self.n_expert and not 0 < self.n_expert_used <= self.n_expert:
            raise GGUFError(f"{arch}.expert_used_count {self.n_expert_used} is not from 1 to "
                            f"{arch}.expert_count {self.n_expert}")
        for k in ('rope.scaling.type', 'rope.scaling.factor', 'rope.scaling.attn_factor',
                  'rope.scale_linear', 'attention.logit_softcapping'):
            if f'{arch}.{k}' in md:
                raise GGUFError(f"{arch}.{k} is not supported for {arch}")
        self.freq_base = key('rope.freq_base', 10000.0, float)
        # the rotary helpers of Model: no model-wide factors, no cos/sin scale
        self.rope_mode, self.rope_mscale, self.ff, self.n_rot = 'neox', 1.0, None, None
        self.attn_softcap, self.final_softcap, self.n_swa = 0.0, 0.0, 0

        emb = gguf.tensors.get('token_embd.weight')
        if emb is None or len(emb.dims) != 2:
            raise GGUFError("missing or non-2D tensor token_embd.weight")
        self.n_vocab = emb.dims[1]

        used = set()
        W, optional = self._tensor_readers(gguf, dtype, q8_activations or like_llama_cpp, used)

        d, V = self.dim, self.n_vocab
        self.tok_embd = W('token_embd.weight', d, V)
        # qwen35moe has no dense feed-forward, and no width for one
        n_ff = per_layer('feed_forward_length', 0 if self.n_expert else None)
        self.layers = []
        getattr(self, f'_load_{arch.removesuffix("moe")}')(key, per_layer, W, optional, n_ff)
        # lfm2moe's first leading_dense_block_count layers are dense
        dense = key('leading_dense_block_count', 0) if arch == 'lfm2moe' else 0
        for i, L in enumerate(self.layers):
            p = f'blk.{i}.'
            L.update(attn_norm=W(p + 'attn_norm.weight', d))
            if self.n_expert and i >= dense:
                L['moe'] = self._moe_ffn(key, W, i)
            else:
                L.update(w_gate=W(p + 'ffn_gate.weight', d, n_ff[i]),
                         w_up=W(p + 'ffn_up.weight', d, n_ff[i]),
                         w_down=W(p + 'ffn_down.weight', n_ff[i], d))
        # lfm2's last norm has llama.cpp's name token_embd_norm
        self.output_norm = W('token_embd_norm.weight' if arch.startswith('lfm2') else 'output_norm.weight', d)
        self.output = W('output.weight', d, V) if 'output.weight' in gguf.tensors else self.tok_embd
        extra = sorted(set(gguf.tensors) - used)
        if extra:
            raise GGUFError(f"unsupported extra tensors: {', '.join(extra[:5])}")

        self.ggml_q8 = self.f16_kv = self.f16_gelu = self.ggml_rope = like_llama_cpp
        self.ggml_q8 = self.ggml_q8 or q8_activations

    # -- loading, per family ---------------------------------------------------

    def _attn_layer(self, W, optional, i, n_head, n_kv, hd, n_rot, base, q_rows=None,
                    kv=True, v_optional=False):
        """Tensors and settings of a (grouped-query) attention layer."""
        p, d = f'blk.{i}.', self.dim
        if n_kv <= 0 or n_head % n_kv or n_rot % 2 or n_rot > hd:
            raise GGUFError(f"layer {i}: inconsistent heads: head_count={n_head} "
                            f"head_count_kv={n_kv} head_dim={hd} rope dims={n_rot}")
        L = dict(kind='attn', n_head=n_head, n_kv=n_kv, hd=hd, n_rot=n_rot, base=base,
                 wq=W(p + 'attn_q.weight', d, q_rows or n_head * hd),
                 q_norm=W(p + 'attn_q_norm.weight', hd),
                 wo=W(p + 'attn_output.weight', n_head * hd, d),
                 kv_src=i, sliding=False, ff=None, v_norm=False, gated=False)
        if kv:
            L.update(wk=W(p + 'attn_k.weight', d, n_kv * hd),
                     wv=(optional if v_optional else W)(p + 'attn_v.weight', d, n_kv * hd),
                     k_norm=W(p + 'attn_k_norm.weight', hd))
        return L

    def _load_qwen3(self, key, per_layer, W, optional, n_ff):
        # qwen3moe: Qwen3's attention (q/k norms, NEOX) on every layer
        n_head, n_kv = key('attention.head_count'), key('attention.head_count_kv')
        hd = key('attention.key_length', self.dim // n_head)
        n_rot = key('rope.dimension_count', hd)
        self.kq_scale = 1.0 / math.sqrt(hd)
        for i in range(self.n_layers):
            L = self._attn_layer(W, optional, i, n_head, n_kv, hd, n_rot, self.freq_base)
            L['ffn_norm'] = W(f'blk.{i}.ffn_norm.weight', self.dim)
            self.layers.append(L)
        self.layout = "attention on every layer"

    def _moe_ffn(self, key, W, i):
        """A mixture-of-experts feed-forward (llama.cpp's build_moe_ffn): its
        router, one matrix per expert from each 3-D tensor (experts on the last
        axis), lfm2moe's selection bias, qwen35moe's shared expert."""
        p, d, E = f'blk.{i}.', self.dim, self.n_expert
        ff = key('expert_feed_forward_length')

        def experts(name, cols, rows):
            m = W(p + name, cols, rows, E)   # shape (E, rows, cols)
            each = [m[e] for e in range(E)]
            for e in each:                   # each takes the 8-bit activations the tensor does
                self.act_block[id(e)] = self.act_block[id(m)]
            return each
        moe = dict(router=W(p + 'ffn_gate_inp.weight', d, E),
                   gate=experts('ffn_gate_exps.weight', d, ff),
                   up=experts('ffn_up_exps.weight', d, ff),
                   down=experts('ffn_down_exps.weight', ff, d),
                   # llama.cpp: softmax for qwen3moe and qwen35moe; lfm2moe
                   # names its gating function (2: sigmoid), and biases the choice
                   sigmoid=self.arch == 'lfm2moe' and key('expert_gating_func') == 2,
                   bias=W(p + 'exp_probs_b.bias', E) if self.arch == 'lfm2moe' else None,
                   shared=None)
        if self.arch == 'lfm2moe' and key('expert_gating_func') not in (1, 2):
            raise GGUFError(f"lfm2moe.expert_gating_func {key('expert_gating_func')} is not 1 (softmax) or 2 (sigmoid)")
        if self.arch == 'qwen35moe':
            sff = key('expert_shared_feed_forward_length')
            moe['shared'] = dict(gate_inp=W(p + 'ffn_gate_inp_shexp.weight', d),
                                 gate=W(p + 'ffn_gate_shexp.weight', d, sff),
                                 up=W(p + 'ffn_up_shexp.weight', d, sff),
                                 down=W(p + 'ffn_down_shexp.weight', sff, d))
        return moe

    def moe_ffn(self, M, H):
        """Each position's top expert_used_count experts by the router's
        probabilities (plus the selection bias), weighted by those
        probabilities renormalised (the sum clamped at F16's smallest normal,
        as llama.cpp), their outputs added in the order chosen."""
        logits = self.mul(M['router'], H)
        if M['sigmoid']:
            probs = sigmoid(logits)
        else:
            e = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probs = e / e.sum(axis=-1, keepdims=True)
        select = probs + M['bias'] if M['bias'] is not None else probs
        F = np.zeros_like(H)
        for i in range(H.shape[0]):
            chosen = sorted(range(self.n_expert), key=lambda x: (-select[i, x], x))[:self.n_expert_used]
            w = probs[i, chosen]
            w = w / max(w.sum(), 6.103515625e-5)
            for k, ex in enumerate(chosen):
                act = silu(self.mul(M['gate'][ex], H[i])) * self.mul(M['up'][ex], H[i])
                F[i] += w[k] * self.mul(M['down'][ex], act)
        S = M['shared']
        if S is not None:
            act = silu(self.mul(S['gate'], H)) * self.mul(S['up'], H)
            F = F + self.mul(S['down'], act) * sigmoid(H @ S['gate_inp'])[:, None]
        return F

    def _load_qwen35(self, key, per_layer, W, optional, n_ff):
        d = self.dim
        n_head, n_kv = key('attention.head_count'), key('attention.head_count_kv')
        hd = key('attention.key_length')
        if key('attention.value_length', hd) != hd:
            raise GGUFError("qwen35.attention.value_length != key_length is not supported")
        n_rot = key('rope.dimension_count', hd)
        self.kq_scale = key('attention.scale', 0.0, float) or 1.0 / math.sqrt(hd)
        self.d_conv = key('ssm.conv_kernel')
        self.dk = key('ssm.state_size')           # key (and value) head size
        self.nk = key('ssm.group_count')          # key heads
        self.nv = key('ssm.time_step_rank')       # value heads
        d_inner = key('ssm.inner_size')
        if d_inner != self.nv * self.dk or self.nv % self.nk:
            raise GGUFError(f"qwen35: ssm.inner_size {d_inner} != time_step_rank {self.nv} x "
                            f"state_size {self.dk}, or value heads not a multiple of key heads")
        if 'qwen35.attention.recurrent_layers' in self.metadata:
            raise GGUFError("qwen35.attention.recurrent_layers is not supported "
                            "(the layers follow full_attention_interval)")
        interval = key('full_attention_interval', 4)
        recurrent = [(il + 1) % interval != 0 for il in range(self.n_layers)]
        self.layout = f"full attention where (il+1) % {interval} == 0"
        conv_dim = 2 * self.nk * self.dk + d_inner
        for i in range(self.n_layers):
            p = f'blk.{i}.'
            if recurrent[i]:
                L = dict(kind='deltanet',
                         wqkv=W(p + 'attn_qkv.weight', d, conv_dim),
                         wz=W(p + 'attn_gate.weight', d, d_inner),
                         conv=W(p + 'ssm_conv1d.weight', self.d_conv, conv_dim),
                         dt_bias=W(p + 'ssm_dt.bias', self.nv),
                         ssm_a=W(p + 'ssm_a', self.nv),
                         wbeta=W(p + 'ssm_beta.weight', d, self.nv),
                         walpha=W(p + 'ssm_alpha.weight', d, self.nv),
                         ssm_norm=W(p + 'ssm_norm.weight', self.dk),
                         wout=W(p + 'ssm_out.weight', d_inner, d))
            else:
                # attn_q rows per head: [q (hd); gate (hd)]
                L = self._attn_layer(W, optional, i, n_head, n_kv, hd, n_rot, self.freq_base,
                                     q_rows=2 * n_head * hd)
                L['gated'] = True
            L['ffn_norm'] = W(p + 'post_attention_norm.weight', d)   # the pre-FFN norm
            self.layers.append(L)

    def _load_gemma4(self, key, per_layer, W, optional, n_ff):
        d = self.dim
        n_head, n_kv = per_layer('attention.head_count'), per_layer('attention.head_count_kv')
        hd_full = key('attention.key_length')
        hd_swa = key('attention.key_length_swa')
        if (key('attention.value_length', hd_full) != hd_full
                or key('attention.value_length_swa', hd_swa) != hd_swa):
            raise GGUFError("gemma4: value_length != key_length is not supported")
        n_rot_full = key('rope.dimension_count', hd_full)
        n_rot_swa = key('rope.dimension_count_swa', hd_swa)
        base_swa = key('rope.freq_base_swa', self.freq_base, float)
        self.n_swa = key('attention.sliding_window')
        swa = [bool(x) for x in per_layer('attention.sliding_window_pattern', kind=int)]
        shared = key('attention.shared_kv_layers', 0)
        first_shared = self.n_layers - shared
        # llama.cpp's default (hparams) when the key is missing is 30
        self.final_softcap = key('final_logit_softcapping', 30.0, float)
        self.kq_scale = 1.0                      # Gemma 4: no Q or Q.K scaling
        self.n_pl = key('embedding_length_per_layer_input', 0)
        if self.n_swa <= 0:
            raise GGUFError(f"gemma4.attention.sliding_window={self.n_swa} is not supported")
        rope_freqs = None
        for i in range(self.n_layers):
            p = f'blk.{i}.'
            hd = hd_swa if swa[i] else hd_full
            has_kv = i < first_shared
            L = self._attn_layer(W, optional, i, n_head[i], n_kv[i], hd,
                                 n_rot_swa if swa[i] else n_rot_full,
                                 base_swa if swa[i] else self.freq_base,
                                 kv=has_kv, v_optional=True)
            L.update(sliding=swa[i], v_norm=True,
                     post_attn_norm=W(p + 'post_attention_norm.weight', d),
                     ffn_norm=W(p + 'ffn_norm.weight', d),
                     post_ffn_norm=W(p + 'post_ffw_norm.weight', d),
                     out_scale=optional(p + 'layer_output_scale.weight', 1))
            if not has_kv:
                # llama.cpp's reuse rule: the last sliding / full layer that has K/V
                src = first_shared - (2 if swa[i] else 1)
                if src < 0 or swa[src] != swa[i] or self.layers[src]['hd'] != hd:
                    raise GGUFError(f"gemma4: layer {i} would share the K/V of layer {src}, "
                                    "which is not of its kind")
                L['kv_src'] = src
            if not swa[i]:
                # proportional RoPE: frequency factors on the full-attention layers
                if rope_freqs is None:
                    rope_freqs = W('rope_freqs.weight', hd // 2).astype(np.float64)
                L['ff'] = rope_freqs
            if self.n_pl:
                L.update(pl_gate=W(p + 'inp_gate.weight', d, self.n_pl),
                         pl_proj=W(p + 'proj.weight', self.n_pl, d),
                         pl_post_norm=W(p + 'post_norm.weight', d))
            self.layers.append(L)
        self.layout = (f"window {self.n_swa} on layers {[i for i in range(self.n_layers) if swa[i]]}"
                       f" (head {hd_swa}, rope {n_rot_swa} dims base {base_swa:g}), full layers "
                       f"head {hd_full}, rope {n_rot_full} dims base {self.freq_base:g} / rope_freqs"
                       f"; layers {first_shared}.. reuse K/V")
        if self.n_pl:
            npl_all = self.n_pl * self.n_layers
            self.pl_tok_embd = W('per_layer_token_embd.weight', npl_all, self.n_vocab)
            self.pl_model_proj = W('per_layer_model_proj.weight', d, npl_all)
            self.pl_proj_norm = W('per_layer_proj_norm.weight', self.n_pl)

    def _load_lfm2(self, key, per_layer, W, optional, n_ff):
        d = self.dim
        n_head = key('attention.head_count')
        n_kv = per_layer('attention.head_count_kv')
        hd = key('attention.key_length', d // n_head)
        n_rot = key('rope.dimension_count', hd)
        self.kq_scale = 1.0 / math.sqrt(hd)
        self.d_conv = key('shortconv.l_cache')
        for i in range(self.n_layers):
            p = f'blk.{i}.'
            if n_kv[i] > 0:   # attention where head_count_kv[il] > 0
                L = self._attn_layer(W, optional, i, n_head, n_kv[i], hd, n_rot, self.freq_base)
            else:
                L = dict(kind='conv',
                         conv=W(p + 'shortconv.conv.weight', self.d_conv, d),
                         in_proj=W(p + 'shortconv.in_proj.weight', d, 3 * d),
                         out_proj=W(p + 'shortconv.out_proj.weight', d, d))
            L['ffn_norm'] = W(p + 'ffn_norm.weight', d)
            self.layers.append(L)
        self.layout = f"attention on layers {[i for i in range(self.n_layers) if n_kv[i] > 0]}"

    def describe(self):
        kinds = ''.join({'attn': 'A', 'deltanet': 'D', 'conv': 'C'}[L['kind']] for L in self.layers)
        parts = [f"{self.arch}: {self.n_layers} layers {kinds}", self.layout,
                 f"neox rope base {self.freq_base:g}"]
        if self.arch.startswith('qwen35'):
            parts.append(f"DeltaNet {self.nk} key / {self.nv} value heads of {self.dk}, "
                         f"conv {self.d_conv}" + (f", chunked prefill (chunks of "
                                                  f"{self.chunked_deltanet})"
                                                  if self.chunked_deltanet else ''))
        if self.arch.startswith('lfm2'):
            parts.append(f"short conv {self.d_conv}")
        if self.n_expert:
            parts.append(f"{self.n_expert_used} of {self.n_expert} experts")
        if self.arch == 'gemma4' and self.n_pl:
            parts.append(f"per-layer inputs of {self.n_pl}")
        if self.final_softcap:
            parts.append(f"final soft-cap {self.final_softcap:g}")
        return ', '.join(parts)

    # -- running ---------------------------------------------------------------

    def reset(self, n_pos):
        self.k_cache, self.v_cache = {}, {}
        self.conv_state, self.ssm_state = {}, {}
        for l, L in enumerate(self.layers):
            if L['kind'] == 'attn' and L['kv_src'] == l:
                shape = (n_pos, L['n_kv'], L['hd'])
                self.k_cache[l] = np.zeros(shape, self.dtype)
                self.v_cache[l] = np.zeros(shape, self.dtype)
            elif L['kind'] in ('deltanet', 'conv'):
                # zero initial state: the convolution's window before position 0
                self.conv_state[l] = np.zeros((self.d_conv - 1, L['conv'].shape[0]), self.dtype)
                if L['kind'] == 'deltanet':
                    self.ssm_state[l] = np.zeros((self.nv, self.dk, self.dk), self.dtype)

    def f32const(self, c):
        """A constant as llama.cpp's graph holds it: a float, when rounding like it."""
        return float(np.float32(c)) if self.ggml_rope else c

    def causal_conv(self, l, X, w):
        """Causal depthwise convolution (ggml_ssm_conv): y_t[c] = sum_j
        w[c, j] x_{t-K+1+j}[c], the last tap j = K-1 on the current position;
        the window before the block is the layer's carried state (zeros at
        the start). X: (n, channels); w: (channels, K)."""
        K, n = w.shape[1], X.shape[0]
        full = np.concatenate([self.conv_state[l], X])
        Y = sum(full[j:j + n] * w[:, j] for j in range(K))
        self.conv_state[l] = full[n:]
        return Y

    def deltanet(self, L, l, H):
        """Qwen3.5's gated DeltaNet layer on a block of positions H (n, dim)."""
        n, nk, nv, dk = H.shape[0], self.nk, self.nv, self.dk
        qkv = self.mul(L['wqkv'], H)                       # rows [q (nk x dk); k (nk x dk); v (nv x dk)]
        z = self.mul(L['wz'], H)
        beta = sigmoid(self.mul(L['wbeta'], H))            # (n, nv)
        g = L['ssm_a'] * softplus(self.mul(L['walpha'], H) + L['dt_bias'])   # log decay, (n, nv)
        c = silu(self.causal_conv(l, qkv, L['conv']))
        q = c[:, :nk * dk].reshape(n, nk, dk)
        k = c[:, nk * dk:2 * nk * dk].reshape(n, nk, dk)
        v = c[:, 2 * nk * dk:].reshape(n, nv, dk)
        # L2 norm per head: x / max(|x|, eps)
        q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), self.eps)
        k = k / np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), self.eps)
        q = q * self.f32const(1.0 / math.sqrt(dk))
        # value head j reads key head j % nk (the heads tiled, not grouped)
        heads = np.arange(nv) % nk
        q, k = q[:, heads], k[:, heads]
        if self.chunked_deltanet:
            o, self.ssm_state[l] = gated_delta_rule_chunked(q, k, v, g, beta, self.ssm_state[l],
                                                            self.chunked_deltanet)
        else:
            o, self.ssm_state[l] = gated_delta_rule_recurrent(q, k, v, g, beta, self.ssm_state[l])
        # per value head: RMSNorm(o) * ssm_norm * silu(z)
        o = self.rmsnorm(o, L['ssm_norm']) * silu(z.reshape(n, nv, dk))
        return self.mul(L['wout'], o.reshape(n, nv * dk))

    def shortconv(self, L, l, H):
        """LFM2's short convolution block: in_proj rows [B; C; x],
        y = out_proj(C * conv(B * x))."""
        d = self.dim
        bcx = self.mul(L['in_proj'], H)
        b, c, x = bcx[:, :d], bcx[:, d:2 * d], bcx[:, 2 * d:]
        return self.mul(L['out_proj'], c * self.causal_conv(l, b * x, L['conv']))

    def attention(self, L, l, h, pos):
        """One position of an attention layer. h: the normed input (dim,)."""
        nh, nkv, hd = L['n_head'], L['n_kv'], L['hd']
        q = self.mul(L['wq'], h)
        gate = None
        if L['gated']:    # qwen35: per head [q; gate]
            qg = q.reshape(nh, 2, hd)
            q, gate = qg[:, 0], qg[:, 1].reshape(-1)
        q = self.rmsnorm(q.reshape(nh, hd), L['q_norm'])
        q = self.rope(q, pos, L['base'], 1.0, L['n_rot'], 'neox', L['ff'])
        if L['kv_src'] == l:
            k = self.mul(L['wk'], h)
            # gemma4 without attn_v uses K's projection as V
            v = self.mul(L['wv'], h) if L['wv'] is not None else k.copy()
            k = self.rmsnorm(k.reshape(nkv, hd), L['k_norm'])
            v = v.reshape(nkv, hd)
            if L['v_norm']:   # RMSNorm without a weight
                v = v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + self.eps)
            k = self.rope(k, pos, L['base'], 1.0, L['n_rot'], 'neox', L['ff'])
            if self.f16_kv:
                k, v = round_f16(k), round_f16(v)
            self.k_cache[l][pos], self.v_cache[l][pos] = k, v
        if self.f16_kv:
            q = round_f16(q)
        src = L['kv_src']
        first = max(0, pos - self.n_swa + 1) if L['sliding'] else 0
        K, Vc = self.k_cache[src][first:pos + 1], self.v_cache[src][first:pos + 1]
        group = nh // nkv
        scores = np.einsum('kgd,tkd->kgt', q.reshape(nkv, group, hd), K)
        if self.f16_kv:
            att = self.attend_f16(scores.reshape(nh, -1), Vc, self.kq_scale, 0.0)
        else:
            scores = scores * self.kq_scale
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            att = np.einsum('kgt,tkd->kgd', scores, Vc).reshape(-1)
        if gate is not None:
            att = att * sigmoid(gate)
        return self.mul(L['wo'], att)

    def per_layer_inputs(self, tokens, X):
        """Gemma 4's per-layer inputs, (n, n_layers, n_pl): (RMSNorm(
        per_layer_model_proj(x) / sqrt(dim)) + per_layer_token_embd[tok] *
        sqrt(n_pl)) / sqrt(2), x the scaled embedding, the norm per layer's
        slice of n_pl."""
        n, nl, npl = X.shape[0], self.n_layers, self.n_pl
        proj = self.mul(self.pl_model_proj, X) * self.f32const(1.0 / math.sqrt(self.dim))
        proj = self.rmsnorm(proj.reshape(n, nl, npl), self.pl_proj_norm)
        tok = self.pl_tok_embd[tokens].reshape(n, nl, npl) * self.f32const(math.sqrt(npl))
        return (proj + tok) * self.f32const(1.0 / math.sqrt(2.0))

    def forward_block(self, tokens, pos0):
        """Logits of positions pos0 .. pos0 + len(tokens) - 1, layer by layer
        over the whole block; the earlier positions must be in the caches."""
        n = len(tokens)
        gemma4 = self.arch == 'gemma4'
        X = self.tok_embd[tokens].astype(self.dtype)
        if gemma4:
            X = X * self.f32const(math.sqrt(self.dim))
            PL = self.per_layer_inputs(tokens, X) if self.n_pl else None
        for l, L in enumerate(self.layers):
            H = self.rmsnorm(X, L['attn_norm'])
            if L['kind'] == 'deltanet':
                A = self.deltanet(L, l, H)
            elif L['kind'] == 'conv':
                A = self.shortconv(L, l, H)
            else:
                A = np.stack([self.attention(L, l, H[i], pos0 + i) for i in range(n)])
            if gemma4:
                A = self.rmsnorm(A, L['post_attn_norm'])
            X = X + A
            H = self.rmsnorm(X, L['ffn_norm'])
            if 'moe' in L:
                X = X + self.moe_ffn(L['moe'], H)
                continue
            gt, up = self.mul(L['w_gate'], H), self.mul(L['w_up'], H)
            if gemma4:
                act = gelu_f16_table(gt) if self.f16_gelu else gelu_tanh(gt)
            else:
                act = silu(gt)
            F = self.mul(L['w_down'], act * up)
            if gemma4:
                F = self.rmsnorm(F, L['post_ffn_norm'])
            X = X + F
            if gemma4 and self.n_pl:
                gt = self.mul(L['pl_gate'], X)
                gt = gelu_f16_table(gt) if self.f16_gelu else gelu_tanh(gt)
                X = X + self.rmsnorm(self.mul(L['pl_proj'], gt * PL[:, l]), L['pl_post_norm'])
            if gemma4 and L['out_scale'] is not None:
                X = X * L['out_scale'][0]
        self.final_hidden_block = self.rmsnorm(X, self.output_norm)
        self.final_hidden = self.final_hidden_block[-1]
        logits = self.mul(self.output, self.final_hidden_block)
        if self.final_softcap:
            logits = self.final_softcap * np.tanh(logits / self.final_softcap)
        return logits

    def forward(self, token, pos):
        return self.forward_block([token], pos)[0]

    def logits(self, tokens):
        """The whole prompt as one block, as llama.cpp decodes it in one batch."""
        self.check_tokens(tokens)
        self.reset(len(tokens))
        return self.forward_block(list(tokens), 0)


# ----------------------------------------------------------------------------
# SentencePiece-style detokenisation (for eyeballing greedy output only)

def decode(gguf, prev, ids):
    """Bytes of `ids` as llama2.c prints them: '▁' is a space, <0xXX> is a raw
    byte, control tokens print nothing, and a leading space right after BOS is
    dropped."""
    md = gguf.metadata
    if md.get('tokenizer.ggml.model') != 'llama':
        raise GGUFError(f"--decode supports only tokenizer.ggml.model 'llama', "
                        f"not {md.get('tokenizer.ggml.model')!r}")
    pieces = md['tokenizer.ggml.tokens']
    types = md.get('tokenizer.ggml.token_type')
    bos = int(md.get('tokenizer.ggml.bos_token_id', 1))
    out = bytearray()
    for t in ids:
        piece = pieces[t]
        if types is not None and types[t] == 3:      # control token
            b = b''
        elif re.fullmatch(r'<0x[0-9A-Fa-f]{2}>', piece):
            b = bytes([int(piece[3:5], 16)])
        else:
            b = piece.replace('\u2581', ' ').encode('utf-8', errors='surrogateescape')
        if prev == bos and b.startswith(b' '):
            b = b[1:]
        out += b
        prev = t
    return bytes(out)


# ----------------------------------------------------------------------------
# logits files and CLI

def write_logits(path, logits):
    with open(path, 'wb') as f:
        f.write(struct.pack('<ii', *logits.shape))
        f.write(logits.astype('<f4').tobytes())


def read_logits(path):
    try:
        with open(path, 'rb') as f:
            buf = f.read()
    except OSError as e:
        raise GGUFError(f"cannot read {path}: {e.strerror}")
    if len(buf) < 8:
        raise GGUFError(f"{path}: truncated logits file ({len(buf)} bytes, no header)")
    n_pos, n_vocab = struct.unpack('<ii', buf[:8])
    if n_pos < 0 or n_vocab < 0 or len(buf) != 8 + 4 * n_pos * n_vocab:
        raise GGUFError(f"{path}: header says {n_pos}x{n_vocab} float32 but the file "
                        f"has {len(buf) - 8} data bytes")
    return np.frombuffer(buf, '<f4', offset=8).reshape(n_pos, n_vocab)


def compare(ref, other, tol):
    if ref.shape != other.shape:
        print(f"FAIL: shape differs: reference {ref.shape[0]}x{ref.shape[1]}, "
              f"other {other.shape[0]}x{other.shape[1]}")
        return 1
    diff = np.abs(ref - other.astype(np.float64))
    if not np.all(np.isfinite(other)):
        p, i = np.argwhere(~np.isfinite(other))[0]
        print(f"FAIL: non-finite value {other[p, i]} at position {p}, index {i}")
        return 1
    p, i = np.unravel_index(np.argmax(diff), diff.shape)
    argmax_ok = int(np.sum(ref.argmax(axis=1) == other.argmax(axis=1)))
    ok = diff[p, i] <= tol
    print(f"{'PASS' if ok else 'FAIL'}: max abs diff {diff[p, i]:.6g} at position {p}, "
          f"index {i} (reference {ref[p, i]:.6g}, other {other[p, i]:.6g}); "
          f"tol {tol:g}; argmax agrees at {argmax_ok}/{ref.shape[0]} positions")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('model', nargs='?', help='GGUF file (general.architecture: '
                    + ', '.join(list(FAMILIES) + list(HYBRID_FAMILIES)) + ')')
    ap.add_argument('--tokens', help='space-separated token ids, e.g. "1 2 3" (required '
                    'with a model)')
    ap.add_argument('--out', help='write the logits of every position to this file')
    ap.add_argument('--compare', metavar='OTHER', help='compare with this logits file')
    ap.add_argument('--tol', type=float, default=1e-3, help='max abs diff for --compare')
    ap.add_argument('--greedy', type=int, metavar='N',
                    help='generate N tokens greedily and print their ids')
    ap.add_argument('--decode', action='store_true',
                    help='with --greedy: print the generated text (raw bytes, no newline '
                         'added) instead of the ids')
    ap.add_argument('--float32', action='store_true', help='compute in float32, not float64')
    ap.add_argument('--q8-activations', action='store_true',
                    help='round the input of each quantized-weight product to 8 bits per block, '
                         'as engines with integer dot products do')
    ap.add_argument('--like-llama-cpp', action='store_true',
                    help="round where llama.cpp's CPU code rounds: activations to 8 bits as ggml's "
                         "q8_0/q8_K (float16 q8_0 scale), K, V and Q to float16 with the flash-"
                         "attention sum of V kept in float16, GELU through float16, RoPE angles "
                         "in float32")
    ap.add_argument('--embedding', choices=['mean', 'cls', 'last'],
                    help='print the tokens\' embedding, pooled so and L2-normalized, as one line of floats')
    ap.add_argument('--ctx', type=int, metavar='N',
                    help='context length the model runs at (default: its context_length); '
                         'LongRoPE picks its factors by it')
    ap.add_argument('--describe', action='store_true',
                    help='print to stderr what the file makes the reference compute')
    ap.add_argument('--chunked-deltanet', type=int, metavar='N', default=0,
                    help="qwen35: compute the DeltaNet layers' prefill in the chunked form of "
                         "the gated delta rule, chunks of N positions (default: one position "
                         "at a time)")
    ap.add_argument('--self-test-deltanet', action='store_true',
                    help='check in float64 that the chunked gated delta rule (chunks of 8) '
                         'equals the recurrence for lengths 1..40, and exit (0 equal, 1 not)')
    args = ap.parse_args(argv)
    if args.self_test_deltanet:
        return self_test_deltanet()
    if args.model is None or args.tokens is None:
        ap.error('give a model and --tokens (or --self-test-deltanet)')
    if args.chunked_deltanet < 0:
        ap.error('--chunked-deltanet N needs N > 0')
    if args.ctx is not None and args.ctx <= 0:
        ap.error('--ctx N needs N > 0')
    if not (args.out or args.compare or args.greedy is not None or args.embedding):
        ap.error('nothing to do: give --out, --compare, --greedy and/or --embedding')
    if args.greedy is not None and args.greedy < 0:
        ap.error('--greedy N needs N >= 0')
    try:
        tokens = [int(t) for t in args.tokens.split()]
    except ValueError:
        ap.error(f'--tokens must be integers, got {args.tokens!r}')
    if not tokens:
        ap.error('--tokens is empty')

    try:
        gguf = GGUF(args.model)
        dtype = np.float32 if args.float32 else np.float64
        arch = gguf.metadata.get('general.architecture')
        if args.chunked_deltanet and arch != 'qwen35':
            raise GGUFError(f"--chunked-deltanet is for qwen35 (DeltaNet) files, not {arch!r}")
        if arch in HYBRID_FAMILIES:
            model = HybridModel(gguf, dtype, args.q8_activations, n_ctx=args.ctx,
                                like_llama_cpp=args.like_llama_cpp,
                                chunked_deltanet=args.chunked_deltanet)
        else:
            model = Model(gguf, dtype, args.q8_activations, n_ctx=args.ctx,
                          like_llama_cpp=args.like_llama_cpp)
        if args.describe:
            print(model.describe(), file=sys.stderr)
        status = 0
        if args.embedding:
            print(' '.join(f'{v:.9g}' for v in model.embedding(tokens, args.embedding)))
        if args.out or args.compare:
            logits = model.logits(tokens)
            if args.out:
                write_logits(args.out, logits)
            if args.compare:
                status = compare(logits, read_logits(args.compare), args.tol)
        if args.greedy is not None:
            ids = model.greedy(tokens, args.greedy)
            if args.decode:
                sys.stdout.flush()
                sys.stdout.buffer.write(decode(gguf, tokens[-1], ids))
                sys.stdout.buffer.flush()
            else:
                print(' '.join(map(str, ids)))
        return status
    except GGUFError as e:
        print(f"gguf_reference.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
