// @ts-check
// Loads the model named in the page's query (?model=URL&prompt=TEXT&tokens=N),
// generates greedily and leaves the outcome in window.sipllmOutcome.
import { SipLLM } from 'sipllm';

/** @typedef {{ text?: string, stats?: import('sipllm').Stats, error?: string }} Outcome */

/** @returns {Promise<Outcome>} */
async function run() {
  const query = new URLSearchParams(location.search);
  const llm = await SipLLM.load(query.get('model') ?? '');
  const output = /** @type {HTMLElement} */ (document.querySelector('#output'));
  let text = '';
  for await (const piece of llm.generate(query.get('prompt') ?? '', { maxTokens: Number(query.get('tokens')), temperature: 0 })) {
    text += piece;
    output.textContent = text;
  }
  const stats = llm.stats();
  await llm.unload();
  return { text, stats };
}

/** @param {Outcome} outcome */
function report(outcome) {
  /** @type {Window & { sipllmOutcome?: Outcome }} */ (window).sipllmOutcome = outcome;
}

run().then(report, (error) => report({ error: String(error) }));
