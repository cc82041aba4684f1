/**
 * The size gate (docs/api.md, "Size gating"; docs/architecture.md):
 * measures an event and, when it would not fit the per-event limit, reduces it to an event
 * that does, still passes `validateEvent`, and says so in `data.truncation`, so a reduced
 * record can never be mistaken for a faithful one.
 *
 * The contract: an event fits when `measureEvent(event) ≤ limitBytes`, and is then recorded
 * byte-for-byte as it came. An event over the limit is reduced to `limitBytes -
 * STAMP_RESERVE_BYTES`, the reserve being room for the metadata the server seals in after the
 * gate (`sealBatch`); the truncation stamp is inside the measured event. So a reduced event
 * is recorded within limitBytes, and one that fit within limitBytes plus the server's stamps.
 *
 * Linear in the event's size: the event is measured once (by the caller, or here); a value
 * the passes may clamp is measured at most once, and only when a pass that could fit needs
 * it; a clamped value's size is computed from the clamped value alone. The event is never
 * serialised again during the passes; the result, at most limitBytes, is measured once at
 * the end to confirm. bench/size-gate.bench.ts holds it to 3× one JSON.stringify.
 */
import { canonicalByteLengthSteps, cutChars, isHighSurrogate } from './canonical-json';
import { isPlainObject } from './event-catalogue';
import type { EventType } from './event-types';

/**
 * Room for what the server adds to metadata after the gate, in canonical JSON. Tenant ids
 * (≤ 64), run ids and thread ids (≤ 128) are printable ASCII with nothing to escape, hashes
 * are 64 hex digits: `,"tenantId":"…"` 142 + `,"runId":"…"` 139 + `,"threadId":"…"` 142 +
 * `,"prevHash":"…"` 78 + `,"hash":"…"` 74 = 575 bytes with every id at 128 characters, and on
 * a reduced event the api's `,"originalSha256":"…"` 84 more: 659. The run's active turn
 * (`stampActiveTurns`) is a turn id the client chose: up to 256 characters, each escaped to as
 * many as 6 bytes (`\u0001`), so `,"activeTurnId":"…"` takes up to 1,554: 2,213. A client
 * value under the same key is overwritten, which adds less than the key would. 2,304 leaves a
 * margin; a server-added metadata field must fit in it.
 */
export const STAMP_RESERVE_BYTES = 2304;

/**
 * The smallest limit the gate accepts: the reserve and 1,280 bytes, the least in which the
 * fallback (envelope, stamp, identifiers clamped to a few characters, metadata within its
 * allowance) is guaranteed to fit.
 */
export const MIN_LIMIT_BYTES = STAMP_RESERVE_BYTES + 1280;

/** The last clamping pass cuts text to this many characters (UTF-16 code units). */
export const MIN_CLAMP_CHARS = 64;

/** Every clamped text and preview ends with this, followed by what was cut. */
export const TRUNCATION_MARKER = '…[truncated';

/** What the fallback leaves of an identifier or label that is still too long. */
const FALLBACK_CHARS = 16;

/** Longest part type quoted in the placeholder of an omitted part. */
const LABEL_CHARS = 32;

/**
 * Texts longer than this are measured in chunks of this many characters, keeping the bytes
 * before each chunk, so that a pass sizes a clamped prefix from one chunk, not from the start.
 */
const CHUNK_CHARS = 16384;

/** Metadata is annotation, not the record: on the reduction path it gets 1/8 of the budget. */
const METADATA_SHARE = 8;

/** Tool name stubs stay while within the pass's cap or 1/16 of the budget. */
const TOOL_STUBS_SHARE = 16;

/** `,"truncation":` and `,"tools":` in canonical JSON (data always has another key). */
const STAMP_KEY_BYTES = 14;
const TOOLS_KEY_BYTES = 9;

/** The least an omitted part's placeholder takes (no type, a two-digit size). */
const PLACEHOLDER_MIN_BYTES = jsonBytes({ text: '[omitted  part of 10 bytes]', type: 'text' });

export interface GateableEvent {
  id: string;
  type: string;
  data: unknown;
  metadata: Record<string, unknown>;
}

/** The shape of `data.truncation` (the `TruncationStamp` schema). */
export interface TruncationStampShape {
  /** Bytes of the event as received, measured like `measureEvent`. */
  originalByteLength: number;
  limitBytes: number;
  /** Oldest `model.call` messages left out; 0 for other types. */
  omittedMessageCount: number;
  /**
   * Values in the record that were shortened, replaced by a placeholder or a preview, or left
   * out (whole messages excepted: they are omittedMessageCount). Metadata replaced whole
   * counts once.
   */
  clampedParts: number;
}

export type GateResult<E extends GateableEvent> =
  | { event: E; truncated: false; byteLength: number }
  | {
      event: E;
      truncated: true;
      originalByteLength: number;
      /** `measureEvent` of the reduced event: ≤ limitBytes - STAMP_RESERVE_BYTES. */
      byteLength: number;
      stamp: TruncationStampShape;
    };

/**
 * UTF-8 bytes of the canonical JSON of the envelope (id, type, data, metadata). Computed with
 * JSON.stringify, which writes strings and numbers exactly as RFC 8785 does and differs only
 * in key order, so the length is the same for any JSON value (checked by a property test) —
 * several times faster than `canonicalByteLength` on a 10 MiB event.
 */
export function measureEvent(event: GateableEvent): number {
  const { id, type, data, metadata } = event;
  return jsonBytes({ id, type, data, metadata });
}

/**
 * `measureEvent(event)` a step at a time (a step per member, and per 256 Ki characters of a
 * long string), for `runInSlices`: one JSON.stringify of an event holding a 15 MiB string
 * held the event loop for about 70 ms. The canonical form has the same length. An event of
 * at most ONE_GO_WEIGHT is measured in one go, a third of the cost of the steps.
 */
export function* measureEventSteps(event: GateableEvent): Generator<void, number> {
  const { id, type, data, metadata } = event;
  if (weightWithin([data, metadata], ONE_GO_WEIGHT) >= 0) return measureEvent(event);
  return yield* canonicalByteLengthSteps({ id, type, data, metadata });
}

/** Characters, counting each member as 8 more, that one JSON.stringify measures in ~1 ms. */
const ONE_GO_WEIGHT = 256 * 1024;

/** `budget` less the characters of `value`'s strings and keys and 8 per member; -1 past it. */
function weightWithin(value: unknown, budget: number): number {
  if (typeof value === 'string') return budget - value.length;
  if (value === null || typeof value !== 'object') return budget;
  let left = budget;
  if (Array.isArray(value)) {
    for (const item of value) {
      left = weightWithin(item, left - 8);
      if (left < 0) return -1;
    }
    return left;
  }
  for (const key of Object.keys(value)) {
    left = weightWithin((value as Record<string, unknown>)[key], left - key.length - 8);
    if (left < 0) return -1;
  }
  return left;
}

/**
 * Returns the event itself when it fits, otherwise a reduced copy that fits (the input is
 * never changed). `measuredBytes` must be `measureEvent(event)` when given; it is the size
 * the reduction starts from and the stamp's `originalByteLength`. The event is expected to
 * have passed `validateEvent` (a UUID id, a catalogue type); the result then passes it too.
 * Throws a RangeError for a limit under MIN_LIMIT_BYTES, and an Error when not even the
 * fallback fits, which only an id or type far longer than the catalogue allows can cause.
 */
export function gateEvent<E extends GateableEvent>(
  event: E,
  limitBytes: number,
  measuredBytes: number = measureEvent(event),
): GateResult<E> {
  if (!Number.isSafeInteger(limitBytes) || limitBytes < MIN_LIMIT_BYTES) {
    throw new RangeError(`limitBytes must be an integer ≥ ${MIN_LIMIT_BYTES}, got ${limitBytes}`);
  }
  if (measuredBytes <= limitBytes) return { event, truncated: false, byteLength: measuredBytes };
  const budget = limitBytes - STAMP_RESERVE_BYTES;

  const gate: Gate = {
    event,
    budget,
    limitBytes,
    originalByteLength: measuredBytes,
    metadata: reduceMetadata(event.metadata, Math.floor(budget / METADATA_SHARE)),
  };
  const data = event.data;
  let reduced =
    (event.type === 'model.call' && isPlainObject(data) && Array.isArray(data.messages)
      ? reduceModelCall(gate, data, data.messages)
      : reduceOther(gate)) ?? fallback(gate);
  let result = withReduction(event, reduced);
  let byteLength = measureEvent(result);
  if (byteLength > budget) {
    // A wrong measuredBytes (the model.call passes count from it), or a model call whose
    // envelope leaves no room for any message.
    reduced = fallback(gate);
    result = withReduction(event, reduced);
    byteLength = measureEvent(result);
  }
  return {
    event: result,
    truncated: true,
    originalByteLength: measuredBytes,
    byteLength,
    stamp: reduced.stamp,
  };
}

interface Gate {
  event: GateableEvent;
  /** limitBytes - STAMP_RESERVE_BYTES: what measureEvent of the result may reach. */
  budget: number;
  limitBytes: number;
  originalByteLength: number;
  metadata: ReducedMetadata;
}

interface Reduced {
  data: Record<string, unknown>;
  metadata: Record<string, unknown>;
  stamp: TruncationStampShape;
}

function withReduction<E extends GateableEvent>(event: E, reduced: Reduced): E {
  return { ...event, data: reduced.data, metadata: reduced.metadata };
}

function stampOf(gate: Gate, omittedMessageCount: number, clamped: number): TruncationStampShape {
  return {
    originalByteLength: gate.originalByteLength,
    limitBytes: gate.limitBytes,
    omittedMessageCount,
    clampedParts: clamped + gate.metadata.clamped,
  };
}

// ---------------------------------------------------------------------------------------------
// Sizes, clamping and copy-on-write

function utf8Bytes(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

/** Bytes of a value's JSON; `undefined` counts as the `null` an array would write. */
function jsonBytes(value: unknown): number {
  const text = JSON.stringify(value);
  return text === undefined ? 4 : utf8Bytes(text);
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

/** `text` cut to `cap` characters with a visible marker saying how many were cut. */
function clampText(text: string, cap: number): string {
  if (text.length <= cap) return text;
  const kept = cutChars(text, cap);
  return `${kept}${TRUNCATION_MARKER} ${text.length - kept.length} chars]`;
}

type PathKey = string | number;
type Container = Record<PathKey, unknown>;

/** Marks a key to delete rather than a value to write. */
const REMOVE = Symbol('remove');

/** Defines rather than assigns, so that a `__proto__` key from JSON stays an own property. */
function setOwn(node: Container, key: PathKey, value: unknown): void {
  Object.defineProperty(node, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * Writes `value` at `path` under `root` (a copy already ours), copying each container on the
 * way that is not yet in `owned` (ours to change), so that the input is never changed and
 * untouched branches are shared, not copied.
 */
function applyAt(root: Container, owned: Set<unknown>, path: readonly PathKey[], value: unknown) {
  let node = root;
  for (let depth = 0; depth < path.length - 1; depth += 1) {
    const child = node[path[depth]];
    if (owned.has(child)) {
      node = child as Container;
      continue;
    }
    const copy = Array.isArray(child) ? (child as unknown[]).slice() : { ...(child as Container) };
    owned.add(copy);
    setOwn(node, path[depth], copy);
    node = copy as Container;
  }
  const last = path[path.length - 1];
  if (value === REMOVE) delete node[last];
  else setOwn(node, last, value);
}

// ---------------------------------------------------------------------------------------------
// Clamping passes

interface Replacement {
  value: unknown;
  /** What the value contributes once replaced, in the same terms as Reducible.bytes. */
  bytes: number;
}

/** A value the passes may shorten or replace. */
interface Reducible {
  /** Compared with a pass's cap: characters for text, bytes for a value replaced whole. */
  readonly length: number;
  /** What the value contributes to the event now (measured on first use). */
  readonly bytes: number;
  /** At most `bytes`, known without measuring. */
  readonly leastBytes: number;
  /** The `model.call` message it belongs to, or -1. */
  readonly group: number;
  /** Where it is: under its message for a group, else under data (or metadata). */
  readonly path: readonly PathKey[];
  /** At least what it contributes after a pass at `cap` < length, known without measuring. */
  minBytes(cap: number): number;
  /** Its form under `cap`; the passes ask only when length > cap. */
  reduce(cap: number): Replacement;
}

interface Pick {
  item: Reducible;
  replacement: Replacement;
}

interface Pass {
  cap: number;
  saved: number;
  count: number;
  picks: Pick[];
}

const NO_PASS: Pass = { cap: Infinity, saved: 0, count: 0, picks: [] };

/**
 * A text the passes may clamp. Measured on first use only, so that a text in a pass that
 * cannot fit, or in a message that is dropped, costs nothing but its discovery. A clamped
 * text's size is its prefix's plus its marker's (which needs no escaping), computed from the
 * prefix only — for a long text from the bytes before the prefix's last chunk plus that
 * chunk's part. JSON escapes each character on its own except a surrogate pair, so chunks
 * never split one.
 */
class TextItem implements Reducible {
  readonly length: number;
  private size = -1;
  /** For a text over CHUNK_CHARS: where each chunk starts, and the escaped bytes before it. */
  private chunks: { starts: number[]; before: number[] } | undefined;

  /** At `key` under `parent`: the parent's path is shared by its values, not copied. */
  constructor(
    private readonly text: string,
    private readonly parent: readonly PathKey[],
    private readonly key: PathKey,
    readonly group: number,
  ) {
    this.length = text.length;
  }

  get path(): readonly PathKey[] {
    return [...this.parent, this.key];
  }

  get bytes(): number {
    if (this.size < 0) this.size = this.measure();
    return this.size;
  }

  /** Every UTF-16 code unit takes at least a byte, and there are the quotes. */
  get leastBytes(): number {
    return this.length + 2;
  }

  /** Kept whole (more than cap characters, quoted) or cut to cap - 1 and a marker. */
  minBytes(cap: number): number {
    return cap + 3;
  }

  reduce(cap: number): Replacement {
    const text = this.text;
    const end = cutChars(text, cap).length;
    const marker = `${TRUNCATION_MARKER} ${text.length - end} chars]`;
    const value = text.slice(0, end) + marker;
    // A short prefix is measured as is; a long one from the chunk table (measuring the text).
    if (end > CHUNK_CHARS && this.size < 0) this.size = this.measure();
    if (this.chunks === undefined) {
      return { value, bytes: jsonBytes(text.slice(0, end)) + utf8Bytes(marker) };
    }
    const { starts, before } = this.chunks;
    let low = 0;
    let high = starts.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >> 1;
      if (starts[mid] <= end) low = mid;
      else high = mid - 1;
    }
    const tail = jsonBytes(text.slice(starts[low], end));
    return { value, bytes: before[low] + tail + utf8Bytes(marker) };
  }

  private measure(): number {
    const text = this.text;
    if (text.length <= CHUNK_CHARS) return jsonBytes(text);
    const chunks = { starts: [] as number[], before: [] as number[] };
    let inner = 0;
    for (let start = 0; start < text.length;) {
      let end = Math.min(text.length, start + CHUNK_CHARS);
      // A pair that straddles the cut stays whole; a lone high surrogate before it does not
      // pull the next character (perhaps the first half of a pair) into this chunk.
      if (
        end < text.length &&
        isHighSurrogate(text.charCodeAt(end - 1)) &&
        isLowSurrogate(text.charCodeAt(end))
      ) {
        end += 1;
      }
      chunks.starts.push(start);
      chunks.before.push(inner);
      inner += jsonBytes(text.slice(start, end)) - 2;
      start = end;
    }
    this.chunks = chunks;
    return inner + 2;
  }
}

/**
 * Whether a replacement is smaller: a clamp that would not save bytes (the marker is longer
 * than what it cuts) is not made. Measures the value only when its least size cannot tell.
 */
function saves(item: Reducible, replacement: Replacement): boolean {
  return replacement.bytes < item.leastBytes || replacement.bytes < item.bytes;
}

function evaluate(items: readonly Reducible[], cap: number, from = 0, to = items.length): Pass {
  const picks: Pick[] = [];
  let saved = 0;
  for (let i = from; i < to; i += 1) {
    const item = items[i];
    if (item.length <= cap) continue;
    const replacement = item.reduce(cap);
    if (!saves(item, replacement)) continue;
    picks.push({ item, replacement });
    saved += item.bytes - replacement.bytes;
  }
  return { cap, saved, count: picks.length, picks };
}

/**
 * Clamps in decreasing passes: the cap starts at half the longest value and halves down to
 * MIN_CLAMP_CHARS; the first pass whose result fits wins (`slack` ≥ 0: bytes to spare, given
 * the bytes saved and the values changed). Returns undefined when even the floor pass does
 * not fit — or, `withFloor` false, when no pass above the floor does.
 *
 * Linear: each pass touches only the values longer than its cap, and a value's clamped size
 * is computed from the clamped value, so a value of length L costs O(L) over all passes. A
 * pass whose values alone, clamped as far as they can be, exceed `ceiling` cannot fit and is
 * not evaluated: 100,000 short texts cost their discovery, not 100,000 measurements.
 */
function runPasses(
  items: readonly Reducible[],
  slack: (saved: number, count: number) => number,
  ceiling: number,
  withFloor = true,
): Pass | undefined {
  let maxLength = 0;
  for (const item of items) maxLength = Math.max(maxLength, item.length);
  const caps = [Math.max(MIN_CLAMP_CHARS, Math.floor(maxLength / 2))];
  while (caps[caps.length - 1] > MIN_CLAMP_CHARS) {
    caps.push(Math.max(MIN_CLAMP_CHARS, Math.floor(caps[caps.length - 1] / 2)));
  }
  // Bucket each value by the first pass that reaches it (every value is longer than the
  // floor, the last cap, so the search ends there), so that a pass walks only the values it
  // clamps, never the whole list.
  const buckets: Reducible[][] = caps.map(() => []);
  for (const item of items) {
    let k = 0;
    while (caps[k] >= item.length) k += 1;
    buckets[k].push(item);
  }
  const affected: Reducible[] = [];
  for (let k = 0; k < caps.length - (withFloor ? 0 : 1); k += 1) {
    for (const item of buckets[k]) affected.push(item);
    let least = 0;
    for (const item of affected) least += item.minBytes(caps[k]);
    if (least > ceiling) continue;
    const pass = evaluate(affected, caps[k]);
    if (slack(pass.saved, pass.count) >= 0) {
      return refine(affected, pass, k === 0 ? maxLength : caps[k - 1], slack);
    }
  }
  return undefined;
}

/**
 * Halving may overshoot by up to half: spend the bytes to spare on a larger cap, estimated
 * from the clamped values' bytes per character and then checked exactly. Two tries at most,
 * each costing about the size of the result.
 */
function refine(
  affected: readonly Reducible[],
  found: Pass,
  upper: number,
  slack: (saved: number, count: number) => number,
): Pass {
  let best = found;
  for (let attempt = 0; attempt < 2; attempt += 1) {
    const spare = slack(best.saved, best.count);
    if (spare <= 0 || best.picks.length === 0) break;
    let bytes = 0;
    let length = 0;
    for (const { item } of best.picks) {
      bytes += item.bytes;
      length += item.length;
    }
    const perChar = Math.max(1, bytes / length) * 1.1;
    const cap = Math.min(upper - 1, best.cap + Math.floor(spare / (best.picks.length * perChar)));
    if (cap <= best.cap) break;
    const candidate = evaluate(affected, cap);
    if (slack(candidate.saved, candidate.count) < 0) break;
    best = candidate;
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Metadata

interface ReducedMetadata {
  value: Record<string, unknown>;
  bytes: number;
  originalBytes: number;
  clamped: number;
}

/**
 * Client metadata is annotation, not the record: reduced first, to 1/8 of the budget, so a
 * huge metadata never costs the messages. Long strings are clamped in passes; metadata still
 * over its allowance is replaced by `{}` (counted once).
 */
function reduceMetadata(metadata: Record<string, unknown>, allowance: number): ReducedMetadata {
  const originalBytes = jsonBytes(metadata);
  if (originalBytes <= allowance) {
    return { value: metadata, bytes: originalBytes, originalBytes, clamped: 0 };
  }
  const items: Reducible[] = [];
  collectStrings(metadata, [], items);
  const pass = runPasses(items, (saved) => allowance - (originalBytes - saved), allowance);
  if (pass === undefined || !isPlainObject(metadata)) {
    return { value: {}, bytes: 2, originalBytes, clamped: 1 };
  }
  const value: Container = { ...metadata };
  const owned = new Set<unknown>();
  for (const { item, replacement } of pass.picks) {
    applyAt(value, owned, item.path, replacement.value);
  }
  return { value, bytes: originalBytes - pass.saved, originalBytes, clamped: pass.count };
}

/**
 * Every string longer than the floor under `value`, which is at `path`; an array's values are
 * under their indices as strings (`'0'`), which address them as numbers do. A container's path
 * is built once and shared by its values.
 */
function collectStrings(value: object, path: readonly PathKey[], items: Reducible[]): void {
  // A value with its own JSON form (a Date) is serialised by its rules: never clamped inside.
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return;
  for (const key of Object.keys(value)) collectAt((value as Container)[key], path, key, items);
}

function collectAt(value: unknown, parent: readonly PathKey[], key: PathKey, items: Reducible[]) {
  if (typeof value === 'string') {
    if (value.length > MIN_CLAMP_CHARS) items.push(new TextItem(value, parent, key, -1));
  } else if (value !== null && typeof value === 'object') {
    collectStrings(value, [...parent, key], items);
  }
}

// ---------------------------------------------------------------------------------------------
// model.call: clamp text, then drop the oldest messages, then keep only the envelope

/**
 * Reduces a model call, keeping the newest messages: (a) clamps text — string contents and
 * the `text` of any part that has one — in decreasing passes, replacing a non-text part over
 * the cap by a text part naming what was omitted and its size, and `tools` over the cap by
 * `[{ name }]` stubs (the tools are the least of a context); (b) if the floor pass is not
 * enough, drops the oldest messages until it fits. Returns undefined when even no messages
 * do not fit; the fallback then keeps only the envelope.
 *
 * Sizes: the messages array's size is derived from measuredBytes minus the rest of the event
 * (small), so the messages are not serialised to be measured. The passes above the floor
 * measure the values they clamp; the floor pass and step (b) are one walk from the newest
 * message that measures each kept message in its clamped form, and stops at the budget.
 */
function reduceModelCall(
  gate: Gate,
  data: Record<string, unknown>,
  messages: readonly unknown[],
): Reduced | undefined {
  const { event, budget, metadata } = gate;
  const tools = data.tools;
  const toolsBytes = tools === undefined ? 0 : jsonBytes(tools);
  const toolsField = tools === undefined ? 0 : TOOLS_KEY_BYTES + toolsBytes;
  // A stamp the client sent is replaced by this one.
  const oldStampField =
    data.truncation === undefined ? 0 : STAMP_KEY_BYTES + jsonBytes(data.truncation);
  const shell = { ...data, messages: [], tools: undefined, truncation: undefined };
  const coreBytes = measureEvent({ ...event, data: shell, metadata: metadata.value });
  const originalCore = coreBytes - metadata.bytes + metadata.originalBytes;
  const messagesBytes = gate.originalByteLength - originalCore - toolsField - oldStampField + 2;
  // Everything but the stamp: the core with its `[]` replaced by the messages, and the tools.
  const base = coreBytes - 2 + messagesBytes + toolsField;
  const stampField = (omitted: number, count: number) =>
    STAMP_KEY_BYTES + jsonBytes(stampOf(gate, omitted, count));

  // Message i's values are items[firstItem[i]] to items[firstItem[i + 1]]; the tools last.
  const items: Reducible[] = [];
  const firstItem = new Uint32Array(messages.length + 1);
  for (let i = 0; i < messages.length; i += 1) {
    firstItem[i] = items.length;
    collectMessageItems(messages[i], i, items);
  }
  firstItem[messages.length] = items.length;
  const toolsReducible =
    tools !== undefined && toolsBytes > MIN_CLAMP_CHARS
      ? toolsItem(tools, toolsBytes, Math.floor(budget / TOOL_STUBS_SHARE))
      : undefined;
  if (toolsReducible) items.push(toolsReducible);
  const pass = runPasses(
    items,
    (saved, count) => budget - (base - saved + stampField(0, count)),
    budget,
    false,
  );
  if (pass) return buildModelCall(gate, data, messages, pass.picks);

  // The floor pass, then (b): keep the longest suffix of messages that fits, each clamped to
  // the floor. Every message kept is the floor pass; stopping early is dropping the oldest.
  // Adding messages newest first measures only what is kept; each step checks the exact
  // result (its stamp's digits included), so the first that does not fit ends the suffix.
  const toolsPass = toolsReducible ? evaluate([toolsReducible], MIN_CLAMP_CHARS) : NO_PASS;
  const outsideMessages = base - messagesBytes - toolsPass.saved;
  const keptNewestFirst: unknown[] = [];
  let arrayBytes = 2;
  let clamped = toolsPass.count;
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    // The message as it will be recorded, measured as such: a kept message costs the size
    // of its clamped form, not of its original.
    const own = floorPicks(items, firstItem[i], firstItem[i + 1]);
    const message = own.length === 0 ? messages[i] : withPicks(messages[i], own);
    const nextArray = arrayBytes + jsonBytes(message) + (keptNewestFirst.length > 0 ? 1 : 0);
    if (outsideMessages + nextArray + stampField(i, clamped + own.length) > budget) break;
    arrayBytes = nextArray;
    clamped += own.length;
    keptNewestFirst.push(message);
  }
  // When no message fits beside the envelope, the result does not fit either: gateEvent's
  // confirming measure then takes the guaranteed fit.
  const omitted = messages.length - keptNewestFirst.length;
  const stamp = stampOf(gate, omitted, clamped);
  const out: Container = { ...data, messages: keptNewestFirst.reverse(), truncation: stamp };
  for (const { item, replacement } of toolsPass.picks) {
    applyAt(out, new Set(), item.path, replacement.value);
  }
  return { data: out, metadata: gate.metadata.value, stamp };
}

/** The floor pass's picks among items[from] to items[to - 1], measuring only what it must. */
function floorPicks(items: readonly Reducible[], from: number, to: number): Pick[] {
  const picks: Pick[] = [];
  for (let i = from; i < to; i += 1) {
    const item = items[i];
    const replacement = item.reduce(MIN_CLAMP_CHARS);
    if (saves(item, replacement)) picks.push({ item, replacement });
  }
  return picks;
}

/** A copy of `value` with the picks (paths relative to it) applied, copied on write. */
function withPicks(value: unknown, picks: readonly Pick[]): Container {
  const out: Container = { ...(value as Container) };
  const owned = new Set<unknown>();
  for (const { item, replacement } of picks) applyAt(out, owned, item.path, replacement.value);
  return out;
}

function collectMessageItems(message: unknown, index: number, items: Reducible[]): void {
  if (!isPlainObject(message)) return;
  const content = message.content;
  if (typeof content === 'string') {
    if (content.length > MIN_CLAMP_CHARS) items.push(new TextItem(content, [], 'content', index));
    return;
  }
  if (!Array.isArray(content)) return;
  for (let j = 0; j < content.length; j += 1) {
    const part: unknown = content[j];
    if (!isPlainObject(part)) continue;
    // Any part with a string `text` (text, input_text, output_text…) keeps its type and has
    // its text clamped; other parts (images, files, tool use) can only be replaced whole.
    if (typeof part.text === 'string') {
      if (part.text.length > MIN_CLAMP_CHARS) {
        items.push(new TextItem(part.text, ['content', j], 'text', index));
      }
      continue;
    }
    const bytes = jsonBytes(part);
    if (bytes > MIN_CLAMP_CHARS) items.push(partItem(part, bytes, ['content', j], index));
  }
}

/**
 * A non-text part over the cap becomes a text part saying what was omitted: the schema
 * requires text parts to carry text, and a reader (or a replay to a model) sees a gap, not
 * a broken image.
 */
function partItem(
  part: Record<string, unknown>,
  bytes: number,
  path: readonly PathKey[],
  group: number,
): Reducible {
  return {
    length: bytes,
    bytes,
    leastBytes: bytes,
    group,
    path,
    // {"text":"[omitted  part of NN bytes]","type":"text"}, with no type and two digits.
    minBytes: () => Math.min(bytes, PLACEHOLDER_MIN_BYTES),
    reduce() {
      // The schema requires every part to name its type.
      const label = cutChars(String(part.type), LABEL_CHARS);
      const value = { type: 'text', text: `[omitted ${label} part of ${bytes} bytes]` };
      return { value, bytes: jsonBytes(value) };
    },
  };
}

/**
 * `tools` over the cap become `[{ name }]` stubs (the name from `name` or `function.name`,
 * `{}` when there is none): which tools were offered stays on the record, their schemas do
 * not. Stubs larger than both the cap and `stubsAllowance` are dropped with the key.
 */
function toolsItem(tools: unknown, toolsBytes: number, stubsAllowance: number): Reducible {
  const stubs = Array.isArray(tools) ? tools.map(toolStub) : undefined;
  const stubsBytes = stubs === undefined ? Infinity : jsonBytes(stubs);
  return {
    length: toolsBytes,
    bytes: TOOLS_KEY_BYTES + toolsBytes,
    leastBytes: TOOLS_KEY_BYTES + toolsBytes,
    group: -1,
    path: ['tools'],
    minBytes: () => 0,
    reduce(cap) {
      return stubsBytes <= Math.max(cap, stubsAllowance)
        ? { value: stubs, bytes: TOOLS_KEY_BYTES + stubsBytes }
        : { value: REMOVE, bytes: 0 };
    },
  };
}

function toolStub(tool: unknown): Record<string, unknown> {
  if (!isPlainObject(tool)) return {};
  const fn = isPlainObject(tool.function) ? tool.function : {};
  const name = typeof tool.name === 'string' ? tool.name : fn.name;
  return typeof name === 'string' ? { name: clampText(name, MIN_CLAMP_CHARS) } : {};
}

/** The reduced data of a pass above the floor: every message, the picks applied (copied on write). */
function buildModelCall(
  gate: Gate,
  data: Record<string, unknown>,
  messages: readonly unknown[],
  picks: readonly Pick[],
): Reduced {
  const stamp = stampOf(gate, 0, picks.length);
  const kept = messages.slice();
  const out: Container = { ...data, messages: kept, truncation: stamp };
  const owned = new Set<unknown>([kept]);
  for (const { item, replacement } of picks) {
    const path = item.group < 0 ? item.path : ['messages', item.group, ...item.path];
    applyAt(out, owned, path, replacement.value);
  }
  return { data: out, metadata: gate.metadata.value, stamp };
}

// ---------------------------------------------------------------------------------------------
// Other types: clamp long strings, then preview the bulkiest free-form field, then fall back

/**
 * Kept as they are, even by the fallback: pattern-bound ids longer than FALLBACK_CHARS, which a
 * cut would make invalid. Enums need no entry (every member is shorter than FALLBACK_CHARS, so
 * nothing cuts one), nor do booleans and numbers (only strings are cut).
 */
const VERBATIM: ReadonlySet<string> = new Set(['threadId']);

interface TypeRules {
  /** Identifiers and schema-bounded labels: clamped by the fallback only, never before. */
  readonly fixed: readonly string[];
  /**
   * Free-form fields replaced whole when clamping strings is not enough, by the shape their
   * schema needs: 'object' as `{ raw: preview }` (like a non-object tool input), 'value' as
   * a preview string, 'drop' left out (optional).
   */
  readonly bulky: Readonly<Record<string, 'object' | 'value' | 'drop'>>;
  /** What the fallback keeps, when present; everything else is left out. */
  readonly required: readonly string[];
}

/** One entry per catalogue type, so that a new type cannot be gated by guesswork. */
const RULES: { readonly [K in EventType]: TypeRules } = {
  'run.started': {
    fixed: ['agent', 'title'],
    bulky: {},
    required: ['threadId', 'agent', 'source'],
  },
  'run.finished': { fixed: [], bulky: {}, required: ['status'] },
  'turn.started': {
    fixed: ['turnId'],
    bulky: {},
    required: ['turnId', 'source'],
  },
  'turn.finished': {
    fixed: ['turnId'],
    bulky: {},
    required: ['turnId', 'status'],
  },
  'turn.steered': {
    fixed: ['turnId'],
    bulky: {},
    required: ['turnId', 'instruction'],
  },
  'message.added': {
    fixed: ['messageId'],
    bulky: {},
    required: ['messageId', 'role', 'text'],
  },
  'transcript.added': {
    fixed: ['utteranceId'],
    bulky: {},
    required: ['utteranceId', 'role', 'text'],
  },
  // Only reached with messages that are not an array; the fallback writes `messages: []`.
  'model.call': {
    fixed: ['callId', 'model'],
    bulky: { tools: 'drop' },
    required: ['callId', 'model', 'messages'],
  },
  'tool.started': {
    fixed: ['toolCallId', 'toolName'],
    bulky: { input: 'object' },
    required: ['toolCallId', 'toolName', 'input'],
  },
  'tool.finished': {
    fixed: ['toolCallId', 'toolName'],
    bulky: { output: 'value' },
    // errorText is required when failed; kept whenever present.
    required: ['toolCallId', 'failed', 'errorText'],
  },
  'approval.requested': {
    fixed: ['approvalId', 'toolCallId', 'toolName'],
    bulky: { input: 'object', options: 'drop' },
    required: ['approvalId', 'toolCallId', 'toolName', 'input'],
  },
  'approval.resolved': {
    fixed: ['approvalId'],
    bulky: {},
    required: ['approvalId', 'decision', 'receipt'],
  },
  'append.rejected': {
    fixed: [],
    bulky: {},
    required: ['reason', 'declaredBytes', 'limitBytes'],
  },
};

const NO_RULES: TypeRules = { fixed: [], bulky: {}, required: [] };

function rulesOf(type: string): TypeRules {
  return Object.prototype.hasOwnProperty.call(RULES, type) ? RULES[type as EventType] : NO_RULES;
}

/** Data without a client-sent stamp, which the reduced event's stamp replaces. */
function fieldsOf(data: unknown): Record<string, unknown> {
  if (!isPlainObject(data)) return {};
  const { truncation: _stamp, ...fields } = data;
  return fields;
}

interface Entry {
  /** `"key":value` in canonical JSON. */
  bytes: number;
  keyBytes: number;
  valueBytes: number;
  /** The field's JSON when it was serialised, kept for a preview so that it is not serialised twice. */
  json: string | undefined;
  items: Reducible[];
}

function bulkyKind(rules: TypeRules, key: string): TypeRules['bulky'][string] | undefined {
  return Object.prototype.hasOwnProperty.call(rules.bulky, key) ? rules.bulky[key] : undefined;
}

/**
 * Reduces an event of any other type: (a) clamps long strings anywhere in data, except
 * identifiers, enums and labels, in decreasing passes; (b) from the floor pass, replaces the
 * bulkiest free-form fields (a tool's input or output, approval options) by a preview of
 * their JSON, largest first, until it fits; returns undefined when that is not enough, for
 * the fallback.
 *
 * Sizes are exact: each field is serialised once; data's size is the sum of its entries. In
 * (b) each field's floor pass is evaluated once.
 */
function reduceOther(gate: Gate): Reduced | undefined {
  const { event, budget, metadata } = gate;
  const rules = rulesOf(event.type);
  const fields = fieldsOf(event.data);
  const coreBytes = measureEvent({ ...event, data: {}, metadata: metadata.value });
  const skip = new Set([...VERBATIM, ...rules.fixed]);
  const entries = new Map<string, Entry>();
  const items: Reducible[] = [];
  let entriesSum = 0;
  for (const key of Object.keys(fields)) {
    const value = fields[key];
    const own: Reducible[] = [];
    let valueBytes: number;
    let json: string | undefined;
    if (typeof value === 'string' && value.length > MIN_CLAMP_CHARS && !skip.has(key)) {
      // A long string field is measured once, as the item the passes clamp.
      const item = new TextItem(value, [], key, -1);
      own.push(item);
      valueBytes = item.bytes;
    } else {
      json = JSON.stringify(value);
      if (json === undefined) continue; // left out by JSON, like undefined
      valueBytes = utf8Bytes(json);
      if (!skip.has(key)) collectAt(value, [], key, own);
    }
    for (const item of own) items.push(item);
    const keyBytes = jsonBytes(key);
    const bytes = keyBytes + 1 + valueBytes;
    entries.set(key, { bytes, keyBytes, valueBytes, json, items: own });
    entriesSum += bytes;
  }
  // data = { entries…, "truncation": stamp }: 2 braces, the entries, one comma per entry.
  const total = (sum: number, count: number, entryCount: number) =>
    coreBytes + sum + entryCount + STAMP_KEY_BYTES - 1 + jsonBytes(stampOf(gate, 0, count));
  const pass = runPasses(
    items,
    (saved, count) => budget - total(entriesSum - saved, count, entries.size),
    budget,
  );
  if (pass) return buildOther(gate, fields, pass.picks, new Map(), pass.count);

  // (b) Replace bulky fields, largest first; the other fields stay as the floor pass leaves
  // them, evaluated only when their least size leaves room (each field's floor once).
  const floors = new Map<string, Pass>();
  const replaced = new Map<string, Replacement>();
  const configuration = () => {
    let sum = 0;
    let count = 0;
    let entryCount = 0;
    const picks: Pick[] = [];
    for (const [key, entry] of entries) {
      const replacement = replaced.get(key);
      if (replacement !== undefined) {
        count += 1;
        if (replacement.value === REMOVE) continue;
        sum += entry.keyBytes + 1 + replacement.bytes;
      } else {
        const floor = floors.get(key) ?? evaluate(entry.items, MIN_CLAMP_CHARS);
        floors.set(key, floor);
        sum += entry.bytes - floor.saved;
        count += floor.count;
        for (const pick of floor.picks) picks.push(pick);
      }
      entryCount += 1;
    }
    return { bytes: total(sum, count, entryCount), count, picks };
  };
  const order = [...entries.keys()]
    .filter((key) => bulkyKind(rules, key) !== undefined)
    .sort((a, b) => (entries.get(b) as Entry).valueBytes - (entries.get(a) as Entry).valueBytes);
  for (const key of order) {
    const entry = entries.get(key) as Entry;
    const kind = bulkyKind(rules, key);
    if (kind === 'drop') {
      replaced.set(key, { value: REMOVE, bytes: 0 });
    } else {
      // The room the other fields leave: measured with this one taking no bytes (none left
      // makes the preview the bare marker).
      replaced.set(key, { value: '', bytes: 0 });
      const room = budget - configuration().bytes;
      const json = entry.json ?? JSON.stringify(fields[key]);
      replaced.set(key, previewOf(json, entry.valueBytes, room, kind === 'object'));
    }
    const result = configuration();
    if (result.bytes <= budget) {
      return buildOther(gate, fields, result.picks, replaced, result.count);
    }
  }
  return undefined;
}

/**
 * A field's JSON cut to fit `room` bytes, with the marker giving the whole field's size;
 * wrapped as `{ raw }` where the schema needs an object. The cut is resized from the bytes
 * the last try took; when nothing fits, the marker alone.
 */
function previewOf(json: string, originalBytes: number, room: number, asObject: boolean) {
  const marker = `${TRUNCATION_MARKER}: ${originalBytes} bytes of JSON]`;
  const wrap = (text: string): unknown => (asObject ? { raw: text } : text);
  let chars = Math.max(0, Math.min(json.length, room));
  for (let attempt = 0; attempt < 8 && chars > 0; attempt += 1) {
    const candidate = wrap(cutChars(json, chars) + marker);
    const bytes = jsonBytes(candidate);
    if (bytes <= room) return { value: candidate, bytes };
    chars = Math.floor(((chars * room) / bytes) * 0.95);
  }
  const bare = wrap(marker);
  return { value: bare, bytes: jsonBytes(bare) };
}

function buildOther(
  gate: Gate,
  fields: Record<string, unknown>,
  picks: readonly Pick[],
  replaced: ReadonlyMap<string, Replacement>,
  clamped: number,
): Reduced {
  const stamp = stampOf(gate, 0, clamped);
  const out: Container = { ...fields };
  const owned = new Set<unknown>();
  for (const { item, replacement } of picks) applyAt(out, owned, item.path, replacement.value);
  for (const [key, { value }] of replaced) applyAt(out, owned, [key], value);
  setOwn(out, 'truncation', stamp);
  return { data: out, metadata: gate.metadata.value, stamp };
}

// ---------------------------------------------------------------------------------------------
// The guaranteed fit

/**
 * Keeps only what the schema requires: identifiers and enums, free-form strings clamped to
 * the floor, a tool input as `{ raw: '[omitted: N bytes of JSON]' }`, a model call's messages
 * as `[]`. If that is still too big, identifiers and labels are clamped to FALLBACK_CHARS
 * (callId and model included), then metadata is emptied. Each try is measured exactly; the
 * last one fits any event whose id and type are what validateEvent allows.
 */
function fallback(gate: Gate): Reduced {
  const { event, budget } = gate;
  const rules = rulesOf(event.type);
  const fields = fieldsOf(event.data);
  const messages = fields.messages;
  const omitted = event.type === 'model.call' && Array.isArray(messages) ? messages.length : 0;
  const inputBytes = fields.input === undefined ? 0 : jsonBytes(fields.input);
  for (const level of [1, 2, 3]) {
    const data: Container = {};
    let clamped = 0;
    for (const key of Object.keys(fields)) {
      const value = fields[key];
      if (value === undefined) continue;
      if (!rules.required.includes(key)) {
        clamped += 1;
        continue;
      }
      if (VERBATIM.has(key)) {
        setOwn(data, key, value);
      } else if (key === 'messages') {
        data.messages = [];
      } else if (key === 'input') {
        data.input = { raw: `[omitted: ${inputBytes} bytes of JSON]` };
        clamped += 1;
      } else if (typeof value === 'string') {
        const cap =
          level > 1 ? FALLBACK_CHARS : rules.fixed.includes(key) ? Infinity : MIN_CLAMP_CHARS;
        const text = clampText(value, cap);
        if (text !== value) clamped += 1;
        setOwn(data, key, text);
      } else {
        setOwn(data, key, value);
      }
    }
    // Emptying metadata that is already empty measures as the level before, which did not fit.
    const emptied = level === 3;
    const metadata = emptied ? {} : gate.metadata.value;
    const stamp = {
      ...stampOf(gate, omitted, clamped),
      ...(emptied ? { clampedParts: clamped + 1 } : {}),
    };
    data.truncation = stamp;
    if (measureEvent({ ...event, data, metadata }) <= budget) return { data, metadata, stamp };
  }
  throw new Error(
    `cannot reduce ${event.type} event ${event.id.slice(0, 64)} to ${gate.limitBytes} bytes: ` +
      'its envelope alone is too big',
  );
}
