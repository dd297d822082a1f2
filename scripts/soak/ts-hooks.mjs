// Module hooks that let Node 20, which cannot strip types, import the web
// tests' TypeScript support (web/test/support.ts: the range server as a child
// process, the native CLI as the reference) instead of keeping a copy of it.
// Registered by run.mjs with module.register(); only `.ts` files are touched.
import { readFile } from 'node:fs/promises';

import ts from 'typescript';

export async function load(url, context, nextLoad) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return nextLoad(url, context);
  const source = await readFile(new URL(url), 'utf8');
  const { outputText } = ts.transpileModule(source, {
    fileName: url,
    compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true },
  });
  return { format: 'module', source: outputText, shortCircuit: true };
}
