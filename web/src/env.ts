// Where the package runs, and Node's modules without naming them statically
// (so that bundlers for the browser leave them alone).

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
