#!/usr/bin/python3
"""Independent numpy reference for Llama-architecture GGUF models.

Reads the GGUF file itself, dequantises the weights and runs a plain
token-at-a-time Llama forward pass in float64 (or float32 with --float32).
It shares no code with the engine, so the engine's logits can be checked
against it.  Needs only Python 3 and numpy.

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
# Llama model

class Llama:
    def __init__(self, gguf, dtype=np.float64, q8_activations=False):
        md = gguf.metadata
        arch = md.get('general.architecture')
        if arch != 'llama':
            raise GGUFError(f"general.architecture is {arch!r}, only 'llama' is supported")

        def hp(key, default=None, kind=int):
            v = md.get('llama.' + key, default)
            if v is None:
                raise GGUFError(f"missing metadata llama.{key}")
            if isinstance(v, (str, list, np.ndarray)):
                raise GGUFError(f"metadata llama.{key} is {v!r:.40}, expected a number")
            return kind(v)

        self.dim = hp('embedding_length')
        self.n_layers = hp('block_count')
        self.hidden = hp('feed_forward_length')
        self.n_head = hp('attention.head_count')
        self.n_kv = hp('attention.head_count_kv', self.n_head)
        self.eps = hp('attention.layer_norm_rms_epsilon', kind=float)
        self.freq_base = hp('rope.freq_base', 10000.0, float)
        self.n_ctx = hp('context_length')
        self.head_dim = hp('attention.key_length', self.dim // self.n_head)
        self.n_rot = hp('rope.dimension_count', self.head_dim)
        # Features that would change the maths: refuse rather than be silently wrong.
        if hp('attention.value_length', self.head_dim) != self.head_dim:
            raise GGUFError("llama.attention.value_length != key_length is not supported")
        if hp('expert_count', 0):
            raise GGUFError("mixture-of-experts llama (llama.expert_count > 0) is not supported")
        if md.get('llama.rope.scaling.type', 'none') != 'none':
            raise GGUFError(f"llama.rope.scaling.type={md['llama.rope.scaling.type']!r} "
                            "is not supported")
        if self.n_head % self.n_kv or self.n_rot % 2 or self.n_rot > self.head_dim:
            raise GGUFError(f"inconsistent heads: head_count={self.n_head} head_count_kv="
                            f"{self.n_kv} head_dim={self.head_dim} rope dims={self.n_rot}")

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
            self.act_block[id(m)] = ACTIVATION_BLOCK.get(gguf.tensors[name].ttype) if q8_activations else None
            return m

        d, hd, V = self.dim, self.head_dim, self.n_vocab
        self.tok_embd = W('token_embd.weight', d, V)
        self.layers = []
        for i in range(self.n_layers):
            p = f'blk.{i}.'
            self.layers.append(dict(
                attn_norm=W(p + 'attn_norm.weight', d),
                wq=W(p + 'attn_q.weight', d, self.n_head * hd),
                wk=W(p + 'attn_k.weight', d, self.n_kv * hd),
                wv=W(p + 'attn_v.weight', d, self.n_kv * hd),
                wo=W(p + 'attn_output.weight', self.n_head * hd, d),
                ffn_norm=W(p + 'ffn_norm.weight', d),
                w_gate=W(p + 'ffn_gate.weight', d, self.hidden),
                w_up=W(p + 'ffn_up.weight', d, self.hidden),
                w_down=W(p + 'ffn_down.weight', self.hidden, d)))
        self.output_norm = W('output_norm.weight', d)
        # no output.weight means the output head is tied to the embeddings
        self.output = (W('output.weight', d, V) if 'output.weight' in gguf.tensors
                       else self.tok_embd)
        extra = sorted(set(gguf.tensors) - used)
        if extra:  # e.g. rope_freqs.weight or biases: unsupported, so refuse
            raise GGUFError(f"unsupported extra tensors: {', '.join(extra[:5])}")

        self.dtype = dtype
        # rotation frequency of pair i: freq_base^(-2i/n_rot)
        self.inv_freq = self.freq_base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64)
                                           / self.n_rot)

    def reset(self, n_pos):
        # sized for this run, not for context_length, which can be huge
        shape = (self.n_layers, n_pos, self.n_kv, self.head_dim)
        self.k_cache = np.zeros(shape, self.dtype)
        self.v_cache = np.zeros(shape, self.dtype)

    def mul(self, w, x):
        """w @ x, with x first rounded to 8 bits per block when w is quantized
        and the run asks for it (--q8-activations): per block of 32 (or 256
        for the K-quants), d = max|x| / 127 in float32 and x becomes
        round_half_even(x / d) * d, as ggml-style integer dot products see it."""
        block = self.act_block.get(id(w))
        if block is not None:
            xf = x.astype(np.float32).reshape(-1, block)
            d = (np.abs(xf).max(axis=1) / np.float32(127)).astype(np.float32)
            inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
            q = np.rint(xf * inv[:, None])  # numpy rounds halves to even
            x = (q * d[:, None].astype(np.float64)).reshape(-1).astype(self.dtype)
        return w @ x

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x) + self.eps) * w

    def rope(self, x, pos):
        # ggml "normal" mode: adjacent pairs (2i, 2i+1) of each head; dims >= n_rot stay
        ang = pos * self.inv_freq
        c, s = np.cos(ang).astype(self.dtype), np.sin(ang).astype(self.dtype)
        x0, x1 = x[:, 0:self.n_rot:2], x[:, 1:self.n_rot:2]
        out = x.copy()
        out[:, 0:self.n_rot:2] = x0 * c - x1 * s
        out[:, 1:self.n_rot:2] = x0 * s + x1 * c
        return out

    def forward(self, token, pos):
        """Logits for `token` at position `pos`; positions 0..pos-1 must be in the cache."""
        hd, group = self.head_dim, self.n_head // self.n_kv
        x = self.tok_embd[token].copy()
        for l, L in enumerate(self.layers):
            # attention
            h = self.rmsnorm(x, L['attn_norm'])
            q = self.rope(self.mul(L['wq'], h).reshape(self.n_head, hd), pos)
            self.k_cache[l, pos] = self.rope(self.mul(L['wk'], h).reshape(self.n_kv, hd), pos)
            self.v_cache[l, pos] = self.mul(L['wv'], h).reshape(self.n_kv, hd)
            K, Vc = self.k_cache[l, :pos + 1], self.v_cache[l, :pos + 1]  # (T, n_kv, hd)
            # query head h = kv*group + g uses kv head h // group
            qg = q.reshape(self.n_kv, group, hd)
            scores = np.einsum('kgd,tkd->kgt', qg, K) / np.sqrt(hd)
            # the cache holds only positions <= pos, so this softmax is already causal
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            att = np.einsum('kgt,tkd->kgd', scores, Vc).reshape(-1)
            x = x + self.mul(L['wo'], att)
            # SwiGLU feed-forward
            h = self.rmsnorm(x, L['ffn_norm'])
            g = self.mul(L['w_gate'], h)
            x = x + self.mul(L['w_down'], g / (1 + np.exp(-g)) * self.mul(L['w_up'], h))
        return self.mul(self.output, self.rmsnorm(x, self.output_norm))

    def check_tokens(self, tokens, n_more=0):
        bad = [t for t in tokens if not 0 <= t < self.n_vocab]
        if bad:
            raise GGUFError(f"token id {bad[0]} out of range (n_vocab={self.n_vocab})")
        if len(tokens) + n_more > self.n_ctx:
            raise GGUFError(f"{len(tokens) + n_more} positions exceed "
                            f"llama.context_length={self.n_ctx}")

    def logits(self, tokens):
        self.check_tokens(tokens)
        self.reset(len(tokens))
        return np.stack([self.forward(t, pos) for pos, t in enumerate(tokens)])

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
    ap.add_argument('model', help='GGUF file (general.architecture = llama)')
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
    args = ap.parse_args(argv)
    if not (args.out or args.compare or args.greedy is not None):
        ap.error('nothing to do: give --out, --compare and/or --greedy')
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
        model = Llama(gguf, np.float32 if args.float32 else np.float64, args.q8_activations)
        status = 0
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
