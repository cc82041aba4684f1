/**
 * The one byte form behind every size measurement and every hash (RFC 8785 / JCS).
 */
import fc from 'fast-check';
import { createHash } from 'node:crypto';
import {
  canonicalByteLength,
  canonicalByteLengthSteps,
  canonicalDigestSteps,
  canonicalJson,
  sha256Hex,
  STRING_PIECE_CHARS,
} from './canonical-json';
import { runToEnd } from './time-slices';

/** A deterministic generator of [0, 1) from a seed (mulberry32), to shuffle keys. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The same JSON value, every object rebuilt with its keys in a shuffled insertion order. */
function shuffleKeys(value: unknown, next: () => number): unknown {
  if (Array.isArray(value)) return value.map((item) => shuffleKeys(item, next));
  if (value === null || typeof value !== 'object') return value;
  const entries = Object.entries(value);
  for (let i = entries.length - 1; i > 0; i -= 1) {
    const j = Math.floor(next() * (i + 1));
    [entries[i], entries[j]] = [entries[j], entries[i]];
  }
  const copy: Record<string, unknown> = {};
  for (const [key, inner] of entries) {
    Object.defineProperty(copy, key, {
      value: shuffleKeys(inner, next),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return copy;
}

describe('canonicalJson', () => {
  it('sorts keys at every depth and writes no whitespace', () => {
    const value = { b: 1, a: [3, { d: true, c: null }], 'a b': 'x y' };

    expect(canonicalJson(value)).toBe('{"a":[3,{"c":null,"d":true}],"a b":"x y","b":1}');
  });

  it('keeps array order', () => {
    expect(canonicalJson([3, 1, 2])).toBe('[3,1,2]');
  });

  it('sorts keys by UTF-16 code units, as JCS requires', () => {
    // UTF-8 byte order would put "\uFFFD" (EF BF BD) before "😀" (F0 9F 98 80).
    const value = { '\uFFFD': 1, '😀': 2, é: 3, z: 4, Z: 5 };

    expect(canonicalJson(value)).toBe('{"Z":5,"z":4,"é":3,"😀":2,"\uFFFD":1}');
  });

  it('writes non-ASCII text as is, not as \\u escapes', () => {
    expect(canonicalJson({ text: 'héllo €😀' })).toBe('{"text":"héllo €😀"}');
  });

  it.each([
    [1e21, '1e+21'],
    [1.5, '1.5'],
    [-0, '0'],
    [100, '100'],
    [0.000001, '0.000001'],
    [1e-7, '1e-7'],
  ])('writes the number %p as %s', (value, text) => {
    expect(canonicalJson(value)).toBe(text);
  });

  it('leaves out keys whose value is undefined, like JSON', () => {
    expect(canonicalJson({ a: 1, b: undefined })).toBe(canonicalJson({ a: 1 }));
  });

  it('throws a TypeError for a value with no JSON form', () => {
    expect(() => canonicalJson(undefined)).toThrow(
      new TypeError('value has no JSON representation'),
    );
  });

  it('does not depend on key order (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (value, seed) => {
        const reordered = shuffleKeys(value, random(seed));

        expect(canonicalJson(reordered)).toBe(canonicalJson(value));
      }),
    );
  });

  it('is a fixed point: parsing and re-canonicalizing gives the same text (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = canonicalJson(value);

        expect(canonicalJson(JSON.parse(text))).toBe(text);
      }),
    );
  });
});

describe('canonicalByteLength', () => {
  it.each([
    ['ASCII', 'hello', 7],
    ['é (2 bytes in UTF-8)', 'é', 4],
    ['€ (3 bytes in UTF-8)', '€', 5],
    ['😀 (4 bytes, 2 UTF-16 units)', '😀', 6],
    ['mixed text', 'héllo €😀', 2 + 5 + 2 + 3 + 4],
  ])('counts UTF-8 bytes for %s', (_name, text, bytes) => {
    expect(canonicalByteLength(text)).toBe(bytes);
    if (!/^[\x20-\x7e]*$/.test(text)) expect(bytes).toBeGreaterThan(JSON.stringify(text).length);
  });

  it('counts the canonical form of an object, keys and punctuation included', () => {
    // {"a":"é","b":[1,2]} is 19 characters and 20 bytes.
    expect(canonicalByteLength({ b: [1, 2], a: 'é' })).toBe(20);
  });

  it('is the same for the same value in any key order (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (value, seed) => {
        expect(canonicalByteLength(shuffleKeys(value, random(seed)))).toBe(
          canonicalByteLength(value),
        );
      }),
    );
  });

  it('grows by the UTF-8 size of each character added to a string (property)', () => {
    const charBytes = (c: string) => {
      const code = c.codePointAt(0) as number;
      return code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
    };
    const wide = fc.constantFrom('é', 'ß', '€', '中', '😀', '𝄞');

    fc.assert(
      fc.property(fc.string(), wide, (prefix, char) => {
        expect(canonicalByteLength(prefix + char) - canonicalByteLength(prefix)).toBe(
          charBytes(char),
        );
      }),
    );
  });
});

describe('sha256Hex', () => {
  it('is the SHA-256 of the UTF-8 text, lone surrogates encoded as a Hash object does (property)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (text) => {
        expect(sha256Hex(text)).toBe(createHash('sha256').update(text).digest('hex'));
      }),
    );
  });
});

describe('canonicalDigestSteps', () => {
  const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

  it('is the SHA-256 of the canonical JSON, whatever the key order (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (value, seed) => {
        const expected = sha256(canonicalJson(value));
        expect(runToEnd(canonicalDigestSteps(value))).toBe(expected);
        expect(runToEnd(canonicalDigestSteps(shuffleKeys(value, random(seed))))).toBe(expected);
      }),
    );
  });

  it('hashes a value longer than one chunk as its whole text', () => {
    const value = { texts: Array.from({ length: 40 }, (_, i) => `${i}:${'é'.repeat(5000)}`) };

    expect(runToEnd(canonicalDigestSteps(value))).toBe(sha256(canonicalJson(value)));
  });

  it('takes a step per array item and object member, so a caller can yield between them', () => {
    const steps = canonicalDigestSteps({ a: [1, 2, 3], b: 'x' });
    let count = 0;
    while (!steps.next().done) count += 1;

    expect(count).toBe(5);
  });

  it('leaves out undefined members and writes an undefined item null, as JSON does', () => {
    const value = { a: undefined, b: [undefined, 1] };

    expect(runToEnd(canonicalDigestSteps(value))).toBe(sha256(canonicalJson(value)));
  });

  it.each([Infinity, -Infinity, NaN])('refuses %p, which has no canonical JSON', (number) => {
    expect(() => runToEnd(canonicalDigestSteps({ a: [number] }))).toThrow(
      new TypeError(`${number} has no canonical JSON`),
    );
  });
});

describe('a string longer than one piece (STRING_PIECE_CHARS)', () => {
  const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
  const steps = (generator: Generator<void, unknown>) => {
    let count = 0;
    while (!generator.next().done) count += 1;
    return count;
  };

  /** A text of `pieces` pieces and a bit, with `at` placed to straddle every piece boundary. */
  const straddling = (pieces: number, at: string) =>
    Array.from({ length: pieces }, () => `${'a'.repeat(STRING_PIECE_CHARS - 1)}${at}`).join('') +
    'tail "quoted" \\ \n';

  it.each([
    ['a surrogate pair (emoji)', '😀'],
    ['a lone high surrogate', '\ud800'],
    ['a lone low surrogate', '\udc00x'],
    ['characters JSON escapes', '"\\\u0001'],
    ['two-byte characters', 'é€'],
  ])('is hashed and counted as its whole text with %s at every boundary', (_, at) => {
    const value = { output: straddling(3, at), n: 1 };

    expect(runToEnd(canonicalDigestSteps(value))).toBe(sha256(canonicalJson(value)));
    expect(runToEnd(canonicalByteLengthSteps(value))).toBe(canonicalByteLength(value));
  });

  it('takes a step per piece, so no step escapes, hashes or counts more than one piece', () => {
    const text = 'y'.repeat(15 * STRING_PIECE_CHARS + 1);

    expect(steps(canonicalDigestSteps(text))).toBe(16);
    expect(steps(canonicalByteLengthSteps({ output: text }))).toBe(17);
  });
});

describe('canonicalByteLengthSteps', () => {
  it('is canonicalByteLength, whatever the key order (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (value, seed) => {
        const expected = canonicalByteLength(value);
        expect(runToEnd(canonicalByteLengthSteps(value))).toBe(expected);
        expect(runToEnd(canonicalByteLengthSteps(shuffleKeys(value, random(seed))))).toBe(expected);
      }),
    );
  });
});
