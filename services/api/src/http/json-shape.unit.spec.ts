import fc from 'fast-check';
import { JsonShapeScanner, type JsonShapeLimits } from './json-shape';

/** The shape of a parsed value, measured the slow way. */
function shapeOf(value: unknown): Omit<JsonShapeLimits, 'maxDepth'> & { depth: number } {
  const shape = { depth: 0, maxKeys: 0, maxObjectKeys: 0, maxItems: 0 };
  const walk = (current: unknown, depth: number): void => {
    if (current === null || typeof current !== 'object') return;
    shape.depth = Math.max(shape.depth, depth + 1);
    const children = Array.isArray(current) ? current : Object.values(current);
    shape.maxItems += children.length;
    if (!Array.isArray(current)) {
      const members = Object.keys(current).length;
      shape.maxKeys += members;
      shape.maxObjectKeys = Math.max(shape.maxObjectKeys, members);
    }
    for (const child of children) walk(child, depth + 1);
  };
  walk(value, 0);
  return shape;
}

/** Feeds `text` in the given chunk sizes (cycled), as a socket would deliver it. */
function scan(text: string, limits: JsonShapeLimits, sizes: number[] = [65_536]) {
  const bytes = Buffer.from(text, 'utf8');
  const scanner = new JsonShapeScanner(limits);
  let problem = null;
  for (let at = 0, i = 0; at < bytes.length; i += 1) {
    const size = sizes[i % sizes.length];
    problem = scanner.feed(bytes.subarray(at, at + size));
    at += size;
  }
  return problem;
}

const UNLIMITED: JsonShapeLimits = {
  maxDepth: 1000,
  maxKeys: 1e9,
  maxObjectKeys: 1e9,
  maxItems: 1e9,
};

describe('JsonShapeScanner', () => {
  const texts = fc
    .tuple(fc.jsonValue({ maxDepth: 6 }), fc.boolean())
    .map(([value, pretty]) => ({ value, text: JSON.stringify(value, null, pretty ? 2 : 0) }));
  const chunking = fc.array(fc.integer({ min: 1, max: 17 }), { minLength: 1, maxLength: 5 });

  it('accepts any JSON text exactly at its own depth, key and item counts, however it is chunked', () => {
    fc.assert(
      fc.property(texts, chunking, ({ value, text }, sizes) => {
        const shape = shapeOf(value);
        const limits = {
          maxDepth: Math.max(shape.depth, 1),
          maxKeys: shape.maxKeys,
          maxObjectKeys: shape.maxObjectKeys,
          maxItems: shape.maxItems,
        };
        expect(scan(text, limits, sizes)).toBeNull();
      }),
    );
  });

  it('refuses any JSON text one below each of its counts, naming that limit', () => {
    fc.assert(
      fc.property(texts, chunking, ({ value, text }, sizes) => {
        const shape = shapeOf(value);
        const cases: [keyof JsonShapeLimits, number][] = [
          ['maxDepth', shape.depth],
          ['maxKeys', shape.maxKeys],
          ['maxObjectKeys', shape.maxObjectKeys],
          ['maxItems', shape.maxItems],
        ];
        for (const [rule, count] of cases) {
          if (count === 0) continue;
          const limits = { ...UNLIMITED, [rule]: count - 1 };
          expect(scan(text, limits, sizes)).toEqual({ rule, limit: count - 1 });
        }
      }),
    );
  });

  it('is not fooled by brackets, colons, commas, quotes and backslashes inside strings', () => {
    const text = JSON.stringify({ a: '{[:,]}\\"{{{', b: ['\\', '"', '\\\\"['] });
    expect(scan(text, { maxDepth: 2, maxKeys: 2, maxObjectKeys: 2, maxItems: 5 }, [1])).toBeNull();
  });

  it('refuses a million keys after the first bytes past the limit, without reading the rest', () => {
    const scanner = new JsonShapeScanner({ ...UNLIMITED, maxObjectKeys: 10 });
    const head = Buffer.from(`{${Array.from({ length: 11 }, (_, i) => `"k${i}":1`).join(',')}`);
    expect(scanner.feed(head)).toEqual({ rule: 'maxObjectKeys', limit: 10 });
    // Sticky: whatever comes next, the answer stays.
    expect(scanner.feed(Buffer.from('}'))).toEqual({ rule: 'maxObjectKeys', limit: 10 });
  });

  it('refuses deep nesting as soon as it opens one level too many', () => {
    const scanner = new JsonShapeScanner({ ...UNLIMITED, maxDepth: 64 });
    expect(scanner.feed(Buffer.from('['.repeat(64)))).toBeNull();
    expect(scanner.feed(Buffer.from('['))).toEqual({ rule: 'maxDepth', limit: 64 });
  });
});
