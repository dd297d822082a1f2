// Loads the model named in the page's query (?model=URL&prompt=TEXT&tokens=N),
// generates greedily and leaves the outcome in window.sipllmOutcome.
import { SipLLM } from 'sipllm';
import type { Stats } from 'sipllm';

interface Outcome {
  text?: string;
  stats?: Stats;
  error?: string;
}

declare global {
  interface Window {
    sipllmOutcome?: Outcome;
  }
}

async function run(): Promise<Outcome> {
  const query = new URLSearchParams(location.search);
  const llm = await SipLLM.load(query.get('model') ?? '');
  const output = document.querySelector('#output')!;
  let text = '';
  for await (const piece of llm.generate(query.get('prompt') ?? '', { maxTokens: Number(query.get('tokens')), temperature: 0 })) {
    text += piece;
    output.textContent = text;
  }
  const stats = llm.stats();
  await llm.unload();
  return { text, stats };
}

run().then(
  (outcome) => (window.sipllmOutcome = outcome),
  (error: unknown) => (window.sipllmOutcome = { error: String(error) }),
);
