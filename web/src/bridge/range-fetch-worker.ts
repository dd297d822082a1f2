// A RangeFetcher's worker (range-fetcher.ts): runs the range requests it is
// sent, each body straight into the shared memory its target names.

import { fetchTo } from './range-fetch.js';
import type { RangeFetchReply, RangeFetchRequest } from './range-fetcher.js';

const post = (reply: RangeFetchReply) => (self as unknown as Worker).postMessage(reply);

self.onmessage = async (event: MessageEvent<RangeFetchRequest>) => {
  const { id, url, offset, length, timeoutMs, target } = event.data;
  post({ id, answer: await fetchTo(url, offset, length, timeoutMs, target, (head) => post({ id, head })) });
};
