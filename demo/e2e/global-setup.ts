// Starts the demo's dev server (the same vite.config.ts as scripts/demo.sh)
// on a free port for the whole run, and checks that what the tests need is
// there. The returned function stops it.

import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { createServer } from 'vite';

import { cliPath, demoDir, repoRoot } from './support.js';

export default async function globalSetup(): Promise<() => Promise<void>> {
  const missing = [
    [cliPath, 'the native CLI: scripts/build-native.sh'],
    [join(repoRoot, 'web/dist/index.js'), 'the web package: npm run build --workspace web'],
    [join(repoRoot, 'web/wasm/sipllm-single.wasm'), 'the WebAssembly builds: scripts/build-wasm.sh'],
  ].filter(([path]) => !existsSync(path));
  if (missing.length > 0) throw new Error(`missing ${missing.map(([, what]) => what).join('; ')}`);

  const server = await createServer({
    configFile: join(demoDir, 'vite.config.ts'),
    server: { host: '127.0.0.1', port: 0, strictPort: false },
    logLevel: 'warn',
    clearScreen: false,
  });
  await server.listen();
  const url = server.resolvedUrls?.local[0];
  if (url === undefined) throw new Error('the dev server did not say where it listens');
  process.env.SIPLLM_DEMO_URL = url;
  return async () => {
    await server.close();
  };
}
