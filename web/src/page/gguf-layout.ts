// Where a GGUF file's tensors lie, read from the first bytes of the file:
// what the worker needs to fetch the first blocks before the engine is ready
// (early-fetch.ts). Only the layout: metadata values are skipped, and the
// engine reads and checks the whole header itself.

// GGUF value types (gguf_metadata_value_type) of a fixed size, and their sizes.
const FIXED_SIZES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const U32 = 4;
const STRING = 8;
const ARRAY = 9;
const GGUF_MAGIC = 0x46554747;  // "GGUF", little-endian
const DEFAULT_ALIGNMENT = 32;
const UTF8 = new TextDecoder();

export interface TensorPlace {
  name: string;
  offset: number;  // in the file
}

export interface GgufLayout {
  dataStart: number;      // where the tensor data begins
  tensors: TensorPlace[];  // in file order
}

// The bytes end before the header does: read more and try again.
export class NeedMoreBytes extends Error {}

class Reader {
  private readonly view: DataView;
  at = 0;

  constructor(private readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  skip(n: number): void {
    if (this.at + n > this.bytes.length) throw new NeedMoreBytes();
    this.at += n;
  }

  u32(): number {
    this.skip(4);
    return this.view.getUint32(this.at - 4, true);
  }

  // Two 32-bit halves rather than a BigInt: a vocabulary's header holds
  // hundreds of thousands of string lengths, read while the module starts
  // and the cores are busy.
  u64(): number {
    this.skip(8);
    const low = this.view.getUint32(this.at - 8, true);
    const high = this.view.getUint32(this.at - 4, true);
    if (high >= 1 << 21) throw new Error(`a GGUF count or offset of ${BigInt(high) << 32n | BigInt(low)} is not plausible`);
    return high * 2 ** 32 + low;
  }

  string(): string {
    const n = this.u64();
    this.skip(n);
    return UTF8.decode(this.bytes.subarray(this.at - n, this.at));
  }

  // Skips a value; returns it when it is a u32 (general.alignment's type).
  value(type: number): number | undefined {
    if (type === STRING) {
      this.skip(this.u64());
      return undefined;
    }
    if (type === ARRAY) {
      const itemType = this.u32();
      const count = this.u64();
      if (itemType === STRING) {
        for (let i = 0; i < count; ++i) this.skip(this.u64());
      } else {
        const size = FIXED_SIZES[itemType];
        if (size === undefined) throw new Error(`unknown GGUF array item type ${itemType}`);
        this.skip(size * count);
      }
      return undefined;
    }
    const size = FIXED_SIZES[type];
    if (size === undefined) throw new Error(`unknown GGUF value type ${type}`);
    this.skip(size);
    return type === U32 ? this.view.getUint32(this.at - 4, true) : undefined;
  }
}

// Reads the layout from the first bytes of a GGUF file (version 2 or 3).
// Throws NeedMoreBytes when `head` ends inside the header, Error when it is
// not a GGUF header this reader knows.
export function readGgufLayout(head: Uint8Array): GgufLayout {
  const r = new Reader(head);
  if (r.u32() !== GGUF_MAGIC) throw new Error('not a GGUF file');
  const version = r.u32();
  if (version !== 2 && version !== 3) throw new Error(`GGUF version ${version}`);
  const tensorCount = r.u64();
  const kvCount = r.u64();
  let alignment = DEFAULT_ALIGNMENT;
  for (let i = 0; i < kvCount; ++i) {
    const key = r.string();
    const value = r.value(r.u32());
    if (key === 'general.alignment' && value !== undefined && value > 0) alignment = value;
  }
  const tensors: TensorPlace[] = [];
  for (let i = 0; i < tensorCount; ++i) {
    const name = r.string();
    r.skip(8 * r.u32());  // dimensions
    r.u32();              // type
    tensors.push({ name, offset: r.u64() });
  }
  const dataStart = Math.ceil(r.at / alignment) * alignment;
  tensors.sort((a, b) => a.offset - b.offset);
  for (const t of tensors) t.offset += dataStart;
  return { dataStart, tensors };
}

// The bytes of the transformer blocks (tensors named blk.N.*) that the
// engine streams in file order from the load on, as ranges in file order:
// each tensor from its offset to the next tensor's (or the end of the file).
// A mixture of experts' expert tensors (blk.N.ffn_*_exps.*) are left out:
// the engine reads only the experts its router chooses, once it has routed.
// Empty when the file has no block.
export function blockRanges(layout: GgufLayout, fileBytes: number): [number, number][] {
  const tensors = [...layout.tensors].sort((a, b) => a.offset - b.offset);
  const ranges: [number, number][] = [];
  tensors.forEach((t, i) => {
    if (!t.name.startsWith('blk.') || /_exps\./.test(t.name)) return;
    const end = i + 1 < tensors.length ? tensors[i + 1].offset : fileBytes;
    const last = ranges[ranges.length - 1];
    if (last !== undefined && last[1] === t.offset) last[1] = end;
    else ranges.push([t.offset, end]);
  });
  return ranges;
}
