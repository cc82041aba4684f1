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

/** Canonical text gathered before it is hashed or counted: one call per piece would cost more. */
const CHUNK_CHARS = 64 * 1024;

/**
 * Characters of a long string written as one piece, a step after each: a string of 15 MiB,
 * escaped, hashed or counted at once, held the event loop for 60-100 ms.
 */
export const STRING_PIECE_CHARS = 256 * 1024;

/**
 * SHA-256 (hex) of `canonicalJson(value)` for a JSON value as parsed, computed a piece at a
 * time (canonicalTextSteps), so `runInSlices` can give the event loop turns on a large value,
 * and the value's whole text is never held at once.
 */
export function* canonicalDigestSteps(value: unknown): Generator<void, string> {
  const hash = createHash('sha256');
  yield* canonicalTextSteps(value, (text) => hash.update(text));
  return hash.digest('hex');
}

/** `canonicalByteLength(value)`, computed a piece at a time like `canonicalDigestSteps`. */
export function* canonicalByteLengthSteps(value: unknown): Generator<void, number> {
  let bytes = 0;
  yield* canonicalTextSteps(value, (text) => {
    bytes += Buffer.byteLength(text, 'utf8');
  });
  return bytes;
}

/**
 * Hands `canonicalJson(value)` to `take` in chunks of about CHUNK_CHARS, with a step per
 * array item, object member and STRING_PIECE_CHARS of a long string. A string is cut only
 * where no surrogate pair is split, so each piece is escaped as the whole would be, and each
 * chunk is whole UTF-8.
 */
function* canonicalTextSteps(value: unknown, take: (text: string) => void): Generator<void, void> {
  let pending = '';
  const write = (text: string) => {
    pending += text;
    if (pending.length >= CHUNK_CHARS) {
      take(pending);
      pending = '';
    }
  };
  function* walk(item: unknown): Generator<void, void> {
    if (typeof item === 'string' && item.length > STRING_PIECE_CHARS) {
      write('"');
      for (let at = 0; at < item.length;) {
        const piece = cutChars(item.slice(at), STRING_PIECE_CHARS);
        write(JSON.stringify(piece).slice(1, -1));
        at += piece.length;
        yield;
      }
      write('"');
      return;
    }
    if (item === null || typeof item !== 'object') {
      if (typeof item === 'number' && !Number.isFinite(item)) {
        throw new TypeError(`${item} has no canonical JSON`);
      }
      // Where JSON writes nothing (undefined), an array writes null; objects leave it out.
      write(JSON.stringify(item) ?? 'null');
      return;
    }
    const array = Array.isArray(item);
    const entries: [string, unknown][] = array
      ? item.map((element, index) => [String(index), element])
      : Object.keys(item)
          .sort()
          .flatMap((key) => {
            const member = (item as Record<string, unknown>)[key];
            return member === undefined ? [] : [[key, member]];
          });
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
  take(pending);
}

export function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** The first `n` UTF-16 code units, one less when the cut would split a surrogate pair. */
export function cutChars(text: string, n: number): string {
  if (text.length <= n) return text;
  return text.slice(0, isHighSurrogate(text.charCodeAt(n - 1)) ? n - 1 : n);
}
