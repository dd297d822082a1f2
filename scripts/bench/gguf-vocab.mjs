// Reads the tokenizer metadata of a GGUF file (no tensors) and lists the
// tokens that must not be sampled in the benchmark, so that both engines
// choose among the same tokens and every generated token is a whole UTF-8
// piece (wllama 3.x fails for good on a piece that is not valid UTF-8, which
// a random-weight model produces quickly).
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';

// GGUF value types (the GGUF spec's gguf_metadata_value_type).
const U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12;
const FIXED_SIZES = { [U8]: 1, [I8]: 1, [U16]: 2, [I16]: 2, [U32]: 4, [I32]: 4, [F32]: 4, [BOOL]: 1, [U64]: 8,
  [I64]: 8, [F64]: 8 };

// llama.cpp's token types (tokenizer.ggml.token_type).
export const TOKEN_TYPE = { normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 };

class OutOfBytes extends Error {}

class Reader {
  constructor(bytes) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.at = 0;
  }

  need(n) {
    if (this.at + n > this.bytes.length) throw new OutOfBytes();
  }

  u32() {
    this.need(4);
    const v = this.view.getUint32(this.at, true);
    this.at += 4;
    return v;
  }

  u64() {
    this.need(8);
    const v = this.view.getBigUint64(this.at, true);
    this.at += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`a count of ${v} is not plausible`);
    return Number(v);
  }

  string() {
    const n = this.u64();
    this.need(n);
    const s = Buffer.from(this.bytes.buffer, this.bytes.byteOffset + this.at, n).toString('utf8');
    this.at += n;
    return s;
  }

  scalar(type) {
    const size = FIXED_SIZES[type];
    if (size === undefined) throw new Error(`unknown GGUF value type ${type}`);
    this.need(size);
    const at = this.at;
    this.at += size;
    switch (type) {
      case U8: return this.view.getUint8(at);
      case I8: return this.view.getInt8(at);
      case U16: return this.view.getUint16(at, true);
      case I16: return this.view.getInt16(at, true);
      case U32: return this.view.getUint32(at, true);
      case I32: return this.view.getInt32(at, true);
      case F32: return this.view.getFloat32(at, true);
      case BOOL: return this.view.getUint8(at) !== 0;
      case U64: return Number(this.view.getBigUint64(at, true));
      case I64: return Number(this.view.getBigInt64(at, true));
      default: return this.view.getFloat64(at, true);
    }
  }

  value(type) {
    if (type === STRING) return this.string();
    if (type !== ARRAY) return this.scalar(type);
    const itemType = this.u32();
    const count = this.u64();
    const items = new Array(count);
    for (let i = 0; i < count; ++i) items[i] = this.value(itemType);
    return items;
  }
}

function parseMetadata(bytes, path) {
  const r = new Reader(bytes);
  r.need(4);
  if (Buffer.from(bytes.subarray(0, 4)).toString('latin1') !== 'GGUF') throw new Error(`${path} is not a GGUF file`);
  r.at = 4;
  const version = r.u32();
  if (version < 2) throw new Error(`${path}: GGUF version ${version} is not supported`);
  r.u64();  // tensor count
  const kvCount = r.u64();
  const kv = new Map();
  for (let i = 0; i < kvCount; ++i) {
    const key = r.string();
    kv.set(key, r.value(r.u32()));
  }
  return kv;
}

// The metadata key/values of a GGUF file, reading only as much as they take.
export async function readGgufMetadata(path) {
  const file = await open(path, 'r');
  try {
    const { size } = await file.stat();
    for (let length = Math.min(size, 4 << 20); ; length = Math.min(size, length * 2)) {
      const bytes = Buffer.alloc(length);
      await file.read(bytes, 0, length, 0);
      try {
        return parseMetadata(bytes, path);
      } catch (error) {
        if (!(error instanceof OutOfBytes)) throw error;
        if (length === size) throw new Error(`${path}: the metadata runs past the end of the file`);
      }
    }
  } finally {
    await file.close();
  }
}

// GPT-2 byte-level BPE spells each byte as one printable character.
function gpt2ByteDecoder() {
  const printable = [];
  for (let b = 33; b <= 126; ++b) printable.push(b);
  for (let b = 161; b <= 172; ++b) printable.push(b);
  for (let b = 174; b <= 255; ++b) printable.push(b);
  const decoder = new Map(printable.map((b) => [String.fromCodePoint(b), b]));
  let extra = 0;
  for (let b = 0; b < 256; ++b) {
    if (!printable.includes(b)) decoder.set(String.fromCodePoint(256 + extra++), b);
  }
  return decoder;
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

function isWholeUtf8(bytes) {
  try {
    strictUtf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

// The tokens to ban: every token that is not a normal or user-defined one
// (bytes, control tokens such as BOS/EOS, unknown, unused), the EOS token
// whatever its type, and, in a byte-level BPE vocabulary, every token whose
// bytes are not whole UTF-8 on their own.
export async function readVocab(path) {
  const kv = await readGgufMetadata(path);
  const tokens = kv.get('tokenizer.ggml.tokens');
  if (!Array.isArray(tokens)) throw new Error(`${path} has no tokenizer.ggml.tokens`);
  const types = kv.get('tokenizer.ggml.token_type') ?? null;
  const model = kv.get('tokenizer.ggml.model') ?? '';
  const eos = kv.get('tokenizer.ggml.eos_token_id');
  const banned = new Set();
  if (types !== null) {
    types.forEach((type, id) => {
      if (type !== TOKEN_TYPE.normal && type !== TOKEN_TYPE.userDefined) banned.add(id);
    });
  }
  if (typeof eos === 'number') banned.add(eos);
  if (model === 'gpt2') {
    const decoder = gpt2ByteDecoder();
    tokens.forEach((text, id) => {
      if (banned.has(id)) return;
      const bytes = [];
      for (const ch of text) {
        const b = decoder.get(ch);
        if (b === undefined) return;  // not a byte-level spelling: leave it
        bytes.push(b);
      }
      if (!isWholeUtf8(Uint8Array.from(bytes))) banned.add(id);
    });
  }
  return {
    model,
    size: tokens.length,
    eos: typeof eos === 'number' ? eos : null,
    banned: [...banned].sort((a, b) => a - b),
    // Two files with the same fingerprint tokenize alike.
    fingerprint: createHash('sha256').update(model).update('\0').update(tokens.join('\0')).digest('hex').slice(0, 16),
  };
}
