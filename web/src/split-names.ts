// Models split by llama.cpp's gguf-split are loaded by their first part's
// URL, NAME-00001-of-0000N.gguf; the engine derives the others' names by the
// same rule (llama.cpp's llama_split_path), keeping the URL's query. The
// package needs the rule too: to open cache files for every part before a
// load, and to delete every part's cache entry with the model's.

const FIRST_PART = /-00001-of-(\d{5})\.gguf$/;

// The URLs of all the parts when `url` names the first part of a split
// model; [url] otherwise.
export function splitPartUrls(url: string): string[] {
  const cut = url.search(/[?#]/);
  const path = cut < 0 ? url : url.slice(0, cut);
  const query = cut < 0 ? '' : url.slice(cut);
  const match = FIRST_PART.exec(path);
  if (match === null || Number(match[1]) < 2) return [url];
  const [suffix, count] = match;
  const prefix = path.slice(0, path.length - suffix.length);
  return Array.from({ length: Number(count) }, (_, i) =>
    `${prefix}-${String(i + 1).padStart(5, '0')}-of-${count}.gguf${query}`);
}
