/**
 * Measures the shape of a JSON text as its bytes arrive, before any of it is parsed: how
 * deep it nests, how many object members it holds (in all and in one object) and how many
 * values (array elements and object members). JSON.parse of a body with a million distinct
 * keys blocks the event loop for seconds and its validation errors fill hundreds of MiB;
 * refusing it here costs one pass over bytes that are read anyway.
 *
 * It does not check syntax: JSON.parse does that afterwards. On malformed input the counts
 * are still bounded by the bytes, which is all the limits need.
 */

export interface JsonShapeLimits {
  /** Containers open at once, the outermost counted as 1. */
  maxDepth: number;
  /** Object members in the whole text. */
  maxKeys: number;
  /** Members of any one object. */
  maxObjectKeys: number;
  /** Array elements plus object members in the whole text. */
  maxItems: number;
}

export interface JsonShapeProblem {
  rule: 'maxDepth' | 'maxKeys' | 'maxObjectKeys' | 'maxItems';
  limit: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COLON = 0x3a;
const COMMA = 0x2c;

function isWhitespace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

export class JsonShapeScanner {
  private depth = 0;
  private inString = false;
  private escaped = false;
  /** The last byte opened a container: the next significant byte may start its first item. */
  private openedContainer = false;
  private keys = 0;
  private items = 0;
  /** Members counted so far in the object open at each depth (arrays count none). */
  private readonly objectKeys: Uint32Array;
  private problem: JsonShapeProblem | null = null;

  constructor(private readonly limits: JsonShapeLimits) {
    this.objectKeys = new Uint32Array(limits.maxDepth + 2);
  }

  /** Scans the next bytes; the first limit passed is returned, now and on every later call. */
  feed(bytes: Uint8Array): JsonShapeProblem | null {
    if (this.problem) return this.problem;
    const { maxDepth, maxKeys, maxObjectKeys, maxItems } = this.limits;
    for (let i = 0; i < bytes.length; i += 1) {
      const byte = bytes[i];
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (byte === BACKSLASH) this.escaped = true;
        else if (byte === QUOTE) this.inString = false;
        continue;
      }
      if (isWhitespace(byte)) continue;
      if (this.openedContainer) {
        this.openedContainer = false;
        if (byte !== CLOSE_ARRAY && byte !== CLOSE_OBJECT && ++this.items > maxItems) {
          return this.fail('maxItems', maxItems);
        }
      }
      switch (byte) {
        case QUOTE:
          this.inString = true;
          break;
        case OPEN_OBJECT:
        case OPEN_ARRAY:
          this.depth += 1;
          if (this.depth > maxDepth) return this.fail('maxDepth', maxDepth);
          this.objectKeys[this.depth] = 0;
          this.openedContainer = true;
          break;
        case CLOSE_OBJECT:
        case CLOSE_ARRAY:
          if (this.depth > 0) this.depth -= 1;
          break;
        case COLON:
          if (++this.keys > maxKeys) return this.fail('maxKeys', maxKeys);
          if (++this.objectKeys[this.depth] > maxObjectKeys) {
            return this.fail('maxObjectKeys', maxObjectKeys);
          }
          break;
        case COMMA:
          if (++this.items > maxItems) return this.fail('maxItems', maxItems);
          break;
        default:
          break;
      }
    }
    return null;
  }

  private fail(rule: JsonShapeProblem['rule'], limit: number): JsonShapeProblem {
    this.problem = { rule, limit };
    return this.problem;
  }
}
