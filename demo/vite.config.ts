// The demo's dev server and production build. Besides serving the page the
// dev server:
// - sends the cross-origin isolation headers (COOP same-origin, COEP
//   require-corp) so that the page may use SharedArrayBuffer and the threaded
//   engine; a page opened with ?isolate=0 is served without them, to show the
//   single-thread fallback;
// - serves the engine's WebAssembly builds (web/wasm) untouched at
//   /sipllm-wasm/: the engine worker evaluates them as classic scripts, so
//   they must not go through the module transform;
// - answers /__sipllm/probe?url=..., which asks a model's server, from here,
//   what a browser would be told (status, CORS and CORP headers, first bytes),
//   so that the page can say why a download was refused.
// Files in public/ (the bundled model) are served with Range support.
//
// `vite build` (npm run build --workspace demo) writes a static site to
// build/demo/: the page, the package's engine worker bundled with its
// imports, web/wasm copied to sipllm-wasm/, and public/. Any static server
// that sends the isolation headers and honours Range serves it, for example
// `node scripts/range-server.mjs --root build/demo --port 8080`. Without the
// dev server there is no probe: failures are explained from the browser's
// side only.

import { createReadStream, readFileSync, readdirSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';
import type { Connect, Plugin } from 'vite';

const demoDir = fileURLToPath(new URL('.', import.meta.url));
const wasmDir = resolve(demoDir, '../web/wasm');
const WASM_ROUTE = '/sipllm-wasm/';
const PROBE_ROUTE = '/__sipllm/probe';

const WASM_TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json',
};

function isolationHeaders(): Connect.NextHandleFunction {
  return (req, res, next) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.searchParams.get('isolate') !== '0') {
      res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
      res.setHeader('Cross-Origin-Embedder-Policy', 'require-corp');
    }
    next();
  };
}

function serveWasm(req: IncomingMessage, res: ServerResponse, next: Connect.NextFunction): void {
  const name = new URL(req.url ?? '/', 'http://localhost').pathname.replace(/^\/+/, '');
  const extension = name.slice(name.lastIndexOf('.'));
  if (!/^[\w.-]+$/.test(name) || WASM_TYPES[extension] === undefined) {
    next();
    return;
  }
  const file = resolve(wasmDir, name);
  let size: number;
  try {
    size = statSync(file).size;
  } catch {
    res.statusCode = 404;
    res.end(`${name} is missing from web/wasm: run scripts/build-wasm.sh\n`);
    return;
  }
  res.setHeader('Content-Type', WASM_TYPES[extension]);
  res.setHeader('Content-Length', String(size));
  res.setHeader('Cache-Control', 'no-cache');
  if (req.method === 'HEAD') {
    res.end();
    return;
  }
  createReadStream(file).pipe(res);
}

// What /__sipllm/probe answers (src/failure.ts reads it).
export interface ProbeReport {
  reachable: boolean;
  error?: string;
  status?: number;
  finalUrl?: string;
  allowOrigin?: string | null;
  exposeHeaders?: string | null;
  resourcePolicy?: string | null;
  contentRange?: string | null;
  firstBytes?: string;
}

// What the model's server answers a ranged cross-origin request from `origin`.
async function probe(target: string, origin: string): Promise<ProbeReport> {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return { reachable: false, error: 'not a URL' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { reachable: false, error: 'not http or https' };
  try {
    const response = await fetch(url, {
      headers: { Range: 'bytes=0-15', Origin: origin },
      redirect: 'follow',
      signal: AbortSignal.timeout(10_000),
    });
    const body = new Uint8Array(await response.arrayBuffer()).slice(0, 16);
    return {
      reachable: true,
      status: response.status,
      finalUrl: response.url,
      allowOrigin: response.headers.get('access-control-allow-origin'),
      exposeHeaders: response.headers.get('access-control-expose-headers'),
      resourcePolicy: response.headers.get('cross-origin-resource-policy'),
      contentRange: response.headers.get('content-range'),
      firstBytes: Array.from(body, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join(''),
    };
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    return { reachable: false, error: cause?.code ?? cause?.message ?? (error as Error).message };
  }
}

function serveProbe(req: IncomingMessage, res: ServerResponse): void {
  const query = new URL(req.url ?? '/', 'http://localhost').searchParams;
  const origin = query.get('origin') ?? `http://${req.headers.host ?? 'localhost'}`;
  void probe(query.get('url') ?? '', origin).then((report) => {
    res.setHeader('Content-Type', 'application/json');
    res.setHeader('Cache-Control', 'no-store');
    res.end(JSON.stringify(report));
  });
}

// The engine's builds, under the same path in the production build.
function sipllmWasmAssets(): Plugin {
  return {
    name: 'sipllm-wasm-assets',
    apply: 'build',
    generateBundle() {
      let names: string[];
      try {
        names = readdirSync(wasmDir).filter((name) => /^sipllm-[\w.-]+\.(js|wasm)$/.test(name));
      } catch {
        names = [];
      }
      if (!names.some((name) => name.endsWith('.wasm'))) {
        this.error(`web/wasm holds no engine build: run scripts/build-wasm.sh first`);
      }
      for (const name of names) {
        this.emitFile({ type: 'asset', fileName: `${WASM_ROUTE.slice(1)}${name}`, source: readFileSync(resolve(wasmDir, name)) });
      }
    },
  };
}

function sipllmDemoServer(): Plugin {
  return {
    name: 'sipllm-demo-server',
    configureServer(server) {
      // Before Vite's own handlers, so that every response carries them.
      server.middlewares.use(isolationHeaders());
      server.middlewares.use(WASM_ROUTE, serveWasm);
      server.middlewares.use(PROBE_ROUTE, serveProbe);
    },
  };
}

export default defineConfig({
  root: demoDir,
  plugins: [sipllmDemoServer(), sipllmWasmAssets()],
  build: {
    outDir: resolve(demoDir, '../build/demo'),
    emptyOutDir: true,
  },
  server: {
    port: 5173,
    fs: { allow: [resolve(demoDir, '..')] },
  },
  appType: 'mpa',
  // The engine worker is an ES module (top-level await, dynamic imports).
  worker: { format: 'es' },
  optimizeDeps: {
    // The package is served as it is (its worker and module URLs are relative
    // to its own files); its one dependency is bundled up front so that the
    // first visit does not trigger a reload.
    exclude: ['sipllm'],
    include: ['@huggingface/jinja'],
  },
});
