import canonicalize from 'canonicalize';
import { createHash, hash } from 'node:crypto';

/**
 * Canonical JSON (RFC 8785 / JCS: sorted keys, no whitespace). Every size measurement and
 * every hash uses this one form so that the same event always has the same bytes.
 */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError('value has no JSON representation');
  return text;
}

/**
 * SHA-256 (hex) of `text` in UTF-8, in one call: the hash chain takes one per event recorded
 * and auth one per request, and a Hash object built, fed and finished per call costs about
 * 1.7× as much for a kilobyte.
 */
export function sha256Hex(text: string): string {
  return hash('sha256', text, 'hex');
}

export function canonicalByteLength(value: unknown): number {
  return Buffer.byteLength(canonicalJson(value), 'utf8');
}

/** Canonical text gathered before it is hashed: one update per piece would cost more. */
const DIGEST_CHUNK_CHARS = 64 * 1024;

/**
 * SHA-256 (hex) of `canonicalJson(value)` for a JSON value as parsed, computed a piece at a
 * time: a step per array item and object member, so `runInSlices` can give the event loop
 * turns on a large value, and the value's whole text is never held at once.
 */
export function* canonicalDigestSteps(value: unknown): Generator<void, string> {
  const hash = createHash('sha256');
  let pending = '';
  const write = (text: string) => {
    pending += text;
    if (pending.length >= DIGEST_CHUNK_CHARS) {
      hash.update(pending);
      pending = '';
    }
  };
  function* walk(item: unknown): Generator<void, void> {
    if (item === null || typeof item !== 'object') {
      if (typeof item === 'number' && !Number.isFinite(item)) {
        throw new TypeError(`${item} has no canonical JSON`);
      }
      write(JSON.stringify(item));
      return;
    }
    const array = Array.isArray(item);
    const entries: [string, unknown][] = array
      ? item.map((element, index) => [String(index), element])
      : Object.keys(item)
          .sort()
          .map((key) => [key, (item as Record<string, unknown>)[key]]);
    write(array ? '[' : '{');
    for (const [index, [key, member]] of entries.entries()) {
      if (index > 0) write(',');
      if (!array) write(`${JSON.stringify(key)}:`);
      yield* walk(member);
      yield;
    }
    write(array ? ']' : '}');
  }
  yield* walk(value);
  hash.update(pending);
  return hash.digest('hex');
}
