import { defineConfig } from 'vite';

// Cross-origin isolation, so that the page may use the threaded build.
const crossOriginIsolation = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

export default defineConfig({
  server: { headers: crossOriginIsolation },
  preview: { headers: crossOriginIsolation },
  // Served as it is, so that its worker and WebAssembly files stay beside it.
  optimizeDeps: { exclude: ['sipllm'] },
});
