// The cache tier's storage, as the engine's CacheStore sees it (see
// wasm-bindings/js_host.h): named files, read and written at offsets,
// synchronously, on the worker's main thread.
//
//   DirectoryStore  Node: one file per name in a directory.
//   OpfsStore       browser: the Origin Private File System through sync
//                   access handles. Opening a handle is asynchronous, so the
//                   store opens every file it will need beforehand: existing
//                   entries when it opens, and a few empty spare files for
//                   entries created later. A file's first HEADER_BYTES hold
//                   the name it stands for, so a spare becomes any entry with
//                   one synchronous write and no rename.

import { nodeImport } from '../env.js';

export interface SyncStore {
  read(name: string, offset: number, into: Uint8Array): boolean;  // false: absent or short
  write(name: string, offset: number, bytes: Uint8Array): void;  // throws why it could not
  list(): Array<[string, number]>;
  remove(name: string): void;
  // Between requests: background upkeep (spare files, flushing).
  maintain(): Promise<void>;
  // Before a load that may create `entries` cache entries (a model, or each
  // part of a split model): what they need is made ready.
  reserve(entries: number): Promise<void>;
  close(): void;
}

const NAME_PATTERN = /^[A-Za-z0-9._-]+$/;

function checkName(name: string): void {
  if (!NAME_PATTERN.test(name) || name === '.' || name === '..') {
    throw new Error(`invalid cache file name '${name}'`);
  }
}

// ---- Node ----------------------------------------------------------------------

type Fs = typeof import('node:fs');
type Path = typeof import('node:path');

export class DirectoryStore implements SyncStore {
  private constructor(private readonly fs: Fs, private readonly path: Path, readonly directory: string) {}

  static async open(directory: string): Promise<DirectoryStore> {
    const fs = await nodeImport<Fs>('node:fs');
    const path = await nodeImport<Path>('node:path');
    fs.mkdirSync(directory, { recursive: true });
    return new DirectoryStore(fs, path, directory);
  }

  private file(name: string): string {
    checkName(name);
    return this.path.join(this.directory, name);
  }

  read(name: string, offset: number, into: Uint8Array): boolean {
    let fd: number;
    try {
      fd = this.fs.openSync(this.file(name), 'r');
    } catch {
      return false;
    }
    try {
      if (offset + into.length > this.fs.fstatSync(fd).size) return false;
      for (let done = 0; done < into.length;) {
        const n = this.fs.readSync(fd, into, done, into.length - done, offset + done);
        if (n === 0) return false;
        done += n;
      }
      return true;
    } finally {
      this.fs.closeSync(fd);
    }
  }

  write(name: string, offset: number, bytes: Uint8Array): void {
    const { O_RDWR, O_CREAT } = this.fs.constants;
    const fd = this.fs.openSync(this.file(name), O_RDWR | O_CREAT);
    try {
      for (let done = 0; done < bytes.length;) {
        done += this.fs.writeSync(fd, bytes, done, bytes.length - done, offset + done);
      }
    } finally {
      this.fs.closeSync(fd);
    }
  }

  list(): Array<[string, number]> {
    const out: Array<[string, number]> = [];
    for (const entry of this.fs.readdirSync(this.directory, { withFileTypes: true })) {
      if (entry.isFile() && NAME_PATTERN.test(entry.name)) {
        out.push([entry.name, this.fs.statSync(this.path.join(this.directory, entry.name)).size]);
      }
    }
    return out;
  }

  remove(name: string): void {
    this.fs.rmSync(this.file(name), { force: true });
  }

  async maintain(): Promise<void> {}

  async reserve(): Promise<void> {}

  close(): void {}
}

// ---- Browser: OPFS -----------------------------------------------------------------

// The parts of the OPFS API used here (lib.dom lacks some of them).
interface SyncAccessHandle {
  read(buffer: ArrayBufferView, options?: { at: number }): number;
  write(buffer: ArrayBufferView, options?: { at: number }): number;
  truncate(size: number): void;
  getSize(): number;
  flush(): void;
  close(): void;
}
interface OpfsFileHandle {
  kind: 'file';
  name: string;
  createSyncAccessHandle(options?: { mode: string }): Promise<SyncAccessHandle>;
}
interface OpfsDirectoryHandle {
  kind: 'directory';
  getDirectoryHandle(name: string, options?: { create: boolean }): Promise<OpfsDirectoryHandle>;
  getFileHandle(name: string, options?: { create: boolean }): Promise<OpfsFileHandle>;
  removeEntry(name: string): Promise<void>;
  entries(): AsyncIterable<[string, OpfsFileHandle | OpfsDirectoryHandle]>;
}

const HEADER_BYTES = 4096;
const MAGIC = 'sipllm-cache-file 1\n';
const SPARE_FILES = 4;  // two entries' worth: an index and a pages file each

interface OpfsFile {
  fileName: string;  // the OPFS file
  access: SyncAccessHandle;
}

function encodeHeader(name: string): Uint8Array {
  const header = new Uint8Array(HEADER_BYTES);
  header.set(new TextEncoder().encode(`${MAGIC}${name}\n`));
  return header;
}

// The name a file stands for, or null for an empty or foreign file.
function decodeHeader(access: SyncAccessHandle): string | null {
  if (access.getSize() < HEADER_BYTES) return null;
  const header = new Uint8Array(HEADER_BYTES);
  if (access.read(header, { at: 0 }) !== HEADER_BYTES) return null;
  const text = new TextDecoder().decode(header.subarray(0, header.indexOf(0) >= 0 ? header.indexOf(0) : HEADER_BYTES));
  if (!text.startsWith(MAGIC)) return null;
  const name = text.slice(MAGIC.length).split('\n')[0];
  return NAME_PATTERN.test(name) ? name : null;
}

async function openAccess(file: OpfsFileHandle): Promise<SyncAccessHandle> {
  // Several workers (tabs) may cache at once: shared handles where the
  // browser has them, exclusive ones otherwise.
  try {
    return await file.createSyncAccessHandle({ mode: 'readwrite-unsafe' });
  } catch (error) {
    if ((error as Error).name === 'NoModificationAllowedError') throw error;
    return await file.createSyncAccessHandle();
  }
}

export class OpfsStore implements SyncStore {
  private readonly files = new Map<string, OpfsFile>();
  private readonly spares: OpfsFile[] = [];

  private constructor(private readonly directory: OpfsDirectoryHandle) {}

  static async open(directoryName: string): Promise<OpfsStore> {
    const storage = (globalThis as { navigator?: { storage?: { getDirectory?: () => Promise<unknown> } } })
      .navigator?.storage;
    if (storage?.getDirectory === undefined) throw new Error('this browser has no Origin Private File System');
    const root = (await storage.getDirectory()) as OpfsDirectoryHandle;
    const directory = await root.getDirectoryHandle(directoryName, { create: true });
    const store = new OpfsStore(directory);
    const empty: string[] = [];
    for await (const [fileName, handle] of directory.entries()) {
      if (handle.kind !== 'file' || !fileName.startsWith('f-')) continue;
      let access: SyncAccessHandle;
      try {
        access = await openAccess(handle);
      } catch {
        continue;  // held exclusively by another worker
      }
      const name = decodeHeader(access);
      if (name === null || store.files.has(name)) {
        // A spare nobody claimed (perhaps another live worker's: removing
        // it then fails, and it stays theirs), or a duplicate entry.
        access.close();
        if (name === null) empty.push(fileName);
        continue;
      }
      store.files.set(name, { fileName, access });
    }
    for (const fileName of empty) await directory.removeEntry(fileName).catch(() => {});
    await store.maintain();
    return store;
  }

  read(name: string, offset: number, into: Uint8Array): boolean {
    const file = this.files.get(name);
    if (file === undefined) return false;
    if (HEADER_BYTES + offset + into.length > file.access.getSize()) return false;
    return file.access.read(into, { at: HEADER_BYTES + offset }) === into.length;
  }

  write(name: string, offset: number, bytes: Uint8Array): void {
    checkName(name);
    let file = this.files.get(name);
    if (file === undefined) {
      const spare = this.spares.pop();
      if (spare === undefined) {
        throw new Error('no free cache file is open (they are replenished between requests)');
      }
      spare.access.write(encodeHeader(name), { at: 0 });
      this.files.set(name, spare);
      file = spare;
    }
    const written = file.access.write(bytes, { at: HEADER_BYTES + offset });
    if (written !== bytes.length) throw new Error(`wrote ${written} of ${bytes.length} bytes`);
  }

  list(): Array<[string, number]> {
    return [...this.files].map(([name, file]) => [name, Math.max(0, file.access.getSize() - HEADER_BYTES)]);
  }

  remove(name: string): void {
    const file = this.files.get(name);
    if (file === undefined) return;
    this.files.delete(name);
    file.access.truncate(0);
    this.spares.push(file);
  }

  async maintain(): Promise<void> {
    await this.openSpares(SPARE_FILES);
  }

  // A split model's parts are entries of their own: opened ahead, since a
  // write cannot wait for a file to open.
  async reserve(entries: number): Promise<void> {
    await this.openSpares(Math.max(SPARE_FILES, 2 * entries));
  }

  private async openSpares(count: number): Promise<void> {
    for (const file of this.files.values()) file.access.flush();
    while (this.spares.length < count) {
      const handle = await this.directory.getFileHandle(`f-${crypto.randomUUID()}`, { create: true });
      this.spares.push({ fileName: handle.name, access: await openAccess(handle) });
    }
  }

  close(): void {
    for (const file of [...this.files.values(), ...this.spares]) {
      try {
        file.access.flush();
        file.access.close();
      } catch {
        // closing what the browser already closed
      }
    }
    this.files.clear();
    this.spares.length = 0;
  }
}
