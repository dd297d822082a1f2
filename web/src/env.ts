// Where the package runs, and Node's modules without naming them statically
// (so that bundlers for the browser leave them alone).

import type { Build } from './types.js';

export const isNode: boolean =
  typeof process === 'object' && process !== null && typeof process.versions === 'object' &&
  typeof process.versions.node === 'string' && typeof (globalThis as { window?: unknown }).window === 'undefined';

export function nodeImport<T>(name: string): Promise<T> {
  return import(/* @vite-ignore */ /* webpackIgnore: true */ name) as Promise<T>;
}

// SharedArrayBuffer is usable: a cross-origin isolated page (or its workers), or Node.
export function canShareMemory(): boolean {
  if (typeof SharedArrayBuffer === 'undefined') return false;
  if (isNode) return true;
  return (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated === true;
}

// The runtime validates relaxed SIMD (Chromium-based browsers since 114):
// this module returns i32x4.relaxed_dot_i8x16_i7x16_add_s of three splats,
// the instruction the relaxed build is for.
const RELAXED_SIMD_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0,        // magic, version
  1, 5, 1, 96, 0, 1, 123,             // type: () -> v128
  3, 2, 1, 0,                         // one function of that type
  10, 19, 1, 17, 0,                   // its code, no locals:
  65, 1, 253, 15, 65, 2, 253, 15,     //   i8x16.splat(1), i8x16.splat(2),
  65, 3, 253, 17, 253, 147, 2, 11,    //   i32x4.splat(3), relaxed dot add, end
]);

export function hasRelaxedSimd(): boolean {
  try {
    return typeof WebAssembly === 'object' && WebAssembly.validate(RELAXED_SIMD_PROBE);
  } catch {
    return false;
  }
}

// The builds that run on pthreads.
export function isThreadedBuild(build: Build): boolean {
  return build !== 'single';
}
