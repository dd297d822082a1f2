#!/usr/bin/env node
// The fault matrix's Node client in a process of its own, so that the
// harness can kill it if it hangs: node node-client.mjs '{"url":...,"cache":DIR|false,"settings":{...}}'
// prints the outcome as one line of JSON (see lib.mjs, runPackage).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import { repoRoot, runPackage } from './lib.mjs';

const { url, cache, settings, build } = JSON.parse(process.argv[2]);
const { SipLLM } = await import(pathToFileURL(join(repoRoot, 'web/dist/index.js')).href);
const result = await runPackage(SipLLM, url, cache, settings, build);
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
