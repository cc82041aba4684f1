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

/** Where `byte` next occurs from `from`, or the end of `bytes`. */
function indexOrEnd(bytes: Uint8Array, byte: number, from: number): number {
  const at = bytes.indexOf(byte, from);
  return at === -1 ? bytes.length : at;
}

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
    const { objectKeys } = this;
    // Locals in the loop, written back at the end: this runs once per byte of a body.
    let { depth, inString, escaped, openedContainer, keys, items } = this;
    // Inside a string (most of a large body) a run of plain characters is skipped with
    // indexOf to the next quote or backslash; both positions are remembered until passed,
    // so the whole scan stays linear however the escapes are spread.
    let nextQuote = -1;
    let nextBackslash = -1;
    let problem: JsonShapeProblem | null = null;
    for (let i = 0; i < bytes.length && problem === null; i += 1) {
      const byte = bytes[i];
      if (inString) {
        if (escaped) escaped = false;
        else if (byte === BACKSLASH) escaped = true;
        else if (byte === QUOTE) inString = false;
        else {
          if (nextQuote < i) nextQuote = indexOrEnd(bytes, QUOTE, i);
          if (nextBackslash < i) nextBackslash = indexOrEnd(bytes, BACKSLASH, i);
          i = Math.min(nextQuote, nextBackslash) - 1;
        }
        continue;
      }
      if (isWhitespace(byte)) continue;
      if (openedContainer) {
        openedContainer = false;
        if (byte !== CLOSE_ARRAY && byte !== CLOSE_OBJECT && ++items > maxItems) {
          problem = this.fail('maxItems', maxItems);
          break;
        }
      }
      switch (byte) {
        case QUOTE:
          inString = true;
          break;
        case OPEN_OBJECT:
        case OPEN_ARRAY:
          depth += 1;
          if (depth > maxDepth) problem = this.fail('maxDepth', maxDepth);
          else {
            objectKeys[depth] = 0;
            openedContainer = true;
          }
          break;
        case CLOSE_OBJECT:
        case CLOSE_ARRAY:
          if (depth > 0) depth -= 1;
          break;
        case COLON:
          if (++keys > maxKeys) problem = this.fail('maxKeys', maxKeys);
          else if (++objectKeys[depth] > maxObjectKeys) {
            problem = this.fail('maxObjectKeys', maxObjectKeys);
          }
          break;
        case COMMA:
          if (++items > maxItems) problem = this.fail('maxItems', maxItems);
          break;
        default:
          break;
      }
    }
    Object.assign(this, { depth, inString, escaped, openedContainer, keys, items });
    return problem;
  }

  private fail(rule: JsonShapeProblem['rule'], limit: number): JsonShapeProblem {
    this.problem = { rule, limit };
    return this.problem;
  }
}
