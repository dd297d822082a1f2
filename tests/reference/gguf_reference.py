#!/usr/bin/python3
"""Independent numpy reference forward pass for GGUF models.

Reads the GGUF file itself, dequantises the weights and runs a plain
token-at-a-time forward pass in float64 (or float32 with --float32) for the
llama, smollm3, qwen2, qwen3, gemma2, gemma3 and phi3 families, each as
llama.cpp computes it.  It shares no code with the engine, so the engine's
logits can be checked against it.  Needs only Python 3 and numpy.

  gguf_reference.py MODEL.gguf --tokens "1 2 3" --out LOGITS.bin
  gguf_reference.py MODEL.gguf --tokens "1" --greedy 200 [--decode]
  gguf_reference.py MODEL.gguf --tokens "1 2 3" --compare OTHER.bin --tol 1e-3

Logits file: int32 n_positions, int32 n_vocab, then n_positions*n_vocab
float32, all little-endian, row-major (one row per position).
Exit codes: 0 ok, 1 --compare mismatch, 2 bad input.
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
        self.act_block = {}  # id(matrix) -> block of the 8-bit activations it takes, or None

        def W(name, *dims):  # dims in ggml order: ne0 (row length) first
            if name not in gguf.tensors:
                raise GGUFError(f"missing tensor {name}")
            if gguf.tensors[name].dims != list(dims):
                raise GGUFError(f"tensor {name} has dims {gguf.tensors[name].dims}, "
                                f"expected {list(dims)}")
            used.add(name)
            m = gguf.tensor(name).astype(dtype)
            self.act_block[id(m)] = (ACTIVATION_BLOCK.get(gguf.tensors[name].ttype)
                                     if q8_activations or like_llama_cpp else None)
            return m

        def optional(name, *dims):
            return W(name, *dims) if name in gguf.tensors else None

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
        magnitude, with levels capped at 127."""
        block = self.act_block.get(id(w))
        if block is None:
            return w @ x
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
        x = (q * d[:, None].astype(np.float64)).reshape(-1).astype(self.dtype)
        return w @ x

    def rmsnorm(self, x, w):
        """RMSNorm over the last axis (a whole vector, or each head's row)."""
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope_angles(self, pos, base, scale):
        """cos and sin of rotary pair i's angle pos * base^(-2i/n_rot) * scale
        / factor_i, times rope.scaling.attn_factor. With ggml_rope, computed
        the way ggml's CPU RoPE does it, in float32: the angle of pair i + 1
        is the float32 product of pair i's by float32(base^(-2/n_rot))."""
        half = self.n_rot // 2
        if not self.ggml_rope:
            ang = pos * base ** (-np.arange(half) * 2.0 / self.n_rot) * scale
            if self.ff is not None:
                ang = ang / self.ff
            return np.cos(ang) * self.rope_mscale, np.sin(ang) * self.rope_mscale
        f32 = np.float32
        step = f32(base ** (-2.0 / self.n_rot))
        theta = np.empty(half, f32)
        theta[0] = f32(pos)
        for i in range(1, half):
            theta[i] = theta[i - 1] * step
        if self.ff is not None:
            theta = theta / self.ff.astype(f32)
        theta = f32(scale) * theta
        mscale = f32(self.rope_mscale)
        return (np.cos(theta.astype(np.float64)).astype(f32) * mscale,
                np.sin(theta.astype(np.float64)).astype(f32) * mscale)

    def rope(self, x, pos, base, scale):
        """Rotate the first n_rot dimensions of each head; the rest stay."""
        c, s = self.rope_angles(pos, base, scale)
        c, s = c.astype(self.dtype), s.astype(self.dtype)
        if self.rope_mode == 'norm':
            i0, i1 = slice(0, self.n_rot, 2), slice(1, self.n_rot, 2)
        else:
            i0, i1 = slice(0, self.n_rot // 2), slice(self.n_rot // 2, self.n_rot)
        x0, x1 = x[:, i0], x[:, i1]
        out = x.copy()
        out[:, i0] = x0 * c - x1 * s
        out[:, i1] = x0 * s + x1 * c
        return out

    def attend_f16(self, scores, Vc):
        """Softmax and the weighted sum of V as ggml's CPU flash attention forms
        them with an F16 cache: scores scaled (and soft-capped) in float32, the
        keys taken in order with a running maximum M and sum S in float32, and
        the weighted sum of V held in float16, rounded after every rescale and
        every added row. scores: unscaled q.k, (n_head, T); Vc: (T, n_kv, hd)."""
        f32 = np.float32
        group = self.n_head // self.n_kv
        # the scale, with a soft-cap folded in: s = cap * tanh(q.k * scale / cap)
        cap = f32(self.attn_softcap)
        scale = f32(self.kq_scale) / cap if cap else f32(self.kq_scale)
        scores = scores.astype(f32) * scale
        if cap:
            scores = cap * np.tanh(scores.astype(np.float64)).astype(f32)
        out = np.zeros((self.n_head, self.head_dim), self.dtype)
        for h in range(self.n_head):
            M, S = f32(-np.inf), f32(0)
            acc = np.zeros(self.head_dim, np.float32)
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
    ap.add_argument('model', help='GGUF file (general.architecture: ' + ', '.join(FAMILIES) + ')')
    ap.add_argument('--tokens', required=True, help='space-separated token ids, e.g. "1 2 3"')
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
    args = ap.parse_args(argv)
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
        model = Model(gguf, np.float32 if args.float32 else np.float64, args.q8_activations,
                      n_ctx=args.ctx, like_llama_cpp=args.like_llama_cpp)
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
