/**
 * The size gate (docs/architecture.md, "Why it exists"): whatever it is given, the event it returns fits the limit
 * with the server's metadata, passes the real validator with its stamp, and keeps the newest
 * messages; an event that fits comes back as the same object.
 */
import fc from 'fast-check';
import { canonicalByteLength, canonicalJson } from './canonical-json';
import { validateEvent, type Problem } from './event-catalogue';
import { MODEL_MESSAGE_ROLES, NOT_BLANK_PATTERN, WELL_FORMED_PATTERN } from './event-data.dto';
import { EVENT_TYPES, type EventType } from './event-types';
import { runToEnd } from './time-slices';
import {
  gateEvent,
  measureEvent,
  measureEventSteps,
  MIN_CLAMP_CHARS,
  MIN_LIMIT_BYTES,
  STAMP_RESERVE_BYTES,
  TRUNCATION_MARKER,
  type GateableEvent,
  type GateResult,
  type TruncationStampShape,
} from './size-gate';
import { EVENT_DATA_EXAMPLES } from './testing/event-fixtures';
import { propertyRuns } from './testing/property-runs';

const UUID = '0b7c6c1e-3f0a-4d8e-9a51-2f4c9f0e7d21';
const MIB = 1_048_576;

type Data = Record<string, unknown>;
type Part = Record<string, unknown>;
interface Message {
  role: string;
  content: string | Part[];
  name?: string;
  toolCallId?: string;
}

function eventOf(type: string, data: Data, metadata: Data = {}): GateableEvent {
  return { id: UUID, type, data, metadata };
}

function dataOf(result: GateResult<GateableEvent>): Data {
  return result.event.data as Data;
}

function problemsOf(event: GateableEvent): Problem[] {
  const result = validateEvent(event);
  return result.ok ? [] : result.problems;
}

function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value), 'utf8');
}

/** The checks every reduced event must pass, whatever its type. */
function expectRecordable(result: GateResult<GateableEvent>, limit: number): void {
  expect(result.byteLength).toBe(measureEvent(result.event));
  // A reduced event leaves room for the server's stamps; one that fits is kept as it came.
  expect(result.byteLength + (result.truncated ? STAMP_RESERVE_BYTES : 0)).toBeLessThanOrEqual(
    limit,
  );
  expect(problemsOf(result.event)).toEqual([]);
  if (result.truncated) {
    expect(dataOf(result).truncation).toEqual(result.stamp);
    expect(result.stamp.limitBytes).toBe(limit);
  }
}

function stampOf(result: GateResult<GateableEvent>): TruncationStampShape {
  if (!result.truncated) throw new Error('expected the event to be reduced');
  return result.stamp;
}

/**
 * Whether `clamped` is `original` cut to a prefix plus the marker counting what was cut,
 * without splitting a surrogate pair. Returns the prefix's length, or -1.
 */
function clampedPrefix(original: string, clamped: string): number {
  const match = /…\[truncated (\d+) chars\]$/.exec(clamped);
  if (match === null) return -1;
  const prefix = clamped.slice(0, clamped.length - match[0].length);
  const cut = Number(match[1]);
  if (cut <= 0 || prefix.length + cut !== original.length) return -1;
  // A clamp that would not make the text smaller is not made.
  if (jsonBytes(clamped) >= jsonBytes(original)) return -1;
  if (!original.startsWith(prefix)) return -1;
  const last = prefix.charCodeAt(prefix.length - 1);
  const next = original.charCodeAt(prefix.length);
  const splitsPair = last >= 0xd800 && last <= 0xdbff && next >= 0xdc00 && next <= 0xdfff;
  return splitsPair ? -1 : prefix.length;
}

/**
 * Compares a kept message with its original: the same but for clamped texts and parts
 * replaced by a placeholder. Returns how many were changed, and the longest prefix kept of a
 * clamped text; throws when the kept message is not a reduction of the original.
 */
function compareMessage(original: Message, kept: Message): { changed: number; longest: number } {
  expect({ ...kept, content: null }).toEqual({ ...original, content: null });
  if (typeof original.content === 'string') {
    if (kept.content === original.content) return { changed: 0, longest: 0 };
    const prefix = clampedPrefix(original.content, kept.content as string);
    expect(prefix).toBeGreaterThanOrEqual(0);
    return { changed: 1, longest: prefix };
  }
  const parts = kept.content as Part[];
  expect(parts).toHaveLength(original.content.length);
  let changed = 0;
  let longest = 0;
  original.content.forEach((part, j) => {
    if (parts[j] === part) return;
    changed += 1;
    if (typeof part.text === 'string') {
      expect({ ...parts[j], text: null }).toEqual({ ...part, text: null });
      const prefix = clampedPrefix(part.text, parts[j].text as string);
      expect(prefix).toBeGreaterThanOrEqual(0);
      longest = Math.max(longest, prefix);
    } else {
      const text = `[omitted ${String(part.type)} part of ${jsonBytes(part)} bytes]`;
      expect(parts[j]).toEqual({ type: 'text', text });
    }
  });
  return { changed, longest };
}

/** A text as the floor pass leaves it: cut to MIN_CLAMP_CHARS when that saves bytes. */
function textAtFloor(text: string): string {
  if (text.length <= MIN_CLAMP_CHARS) return text;
  const last = text.charCodeAt(MIN_CLAMP_CHARS - 1);
  const keep = last >= 0xd800 && last <= 0xdbff ? MIN_CLAMP_CHARS - 1 : MIN_CLAMP_CHARS;
  const clamped = `${text.slice(0, keep)}…[truncated ${text.length - keep} chars]`;
  return jsonBytes(clamped) < jsonBytes(text) ? clamped : text;
}

/** A message as the floor pass leaves it: an independent statement of the rules, for sizes. */
function atFloor(message: Message): Message {
  if (typeof message.content === 'string') {
    return { ...message, content: textAtFloor(message.content) };
  }
  const content = message.content.map((part): Part => {
    if (typeof part.text === 'string') return { ...part, text: textAtFloor(part.text) };
    const bytes = jsonBytes(part);
    const placeholder = {
      type: 'text',
      text: `[omitted ${String(part.type)} part of ${bytes} bytes]`,
    };
    return bytes > MIN_CLAMP_CHARS && jsonBytes(placeholder) < bytes ? placeholder : part;
  });
  return { ...message, content };
}

// ---------------------------------------------------------------------------------------------
// Arbitraries: model calls of any size, with text that needs escaping and multi-byte encoding

/** Characters that JSON escapes, that UTF-8 encodes in 2–4 bytes, and lone surrogates. */
const char = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('a', 'b', ' ', 'z', '0', '.') },
  { weight: 1, arbitrary: fc.constantFrom('"', '\\', '\n', '\t', '\u0000', '\u001f', '\u2028') },
  { weight: 1, arbitrary: fc.constantFrom('é', '€', '中', '😀', '𝄞', '\ud83d', '\ude00') },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
);
const piece = fc.string({ unit: char, minLength: 1, maxLength: 12 });
/**
 * An id or name: the schema refuses one that is only whitespace or invisible format
 * characters (a binary unit may draw U+E0020, a tag space), by the schema's own rule.
 */
const notBlank = fc
  .string({ unit: char, minLength: 1, maxLength: 40 })
  .filter((text) => NOT_BLANK_PATTERN.test(text));
/** An id is a name with no lone surrogate either: a read model's text column could not keep one. */
const id = notBlank.filter((text) => WELL_FORMED_PATTERN.test(text));
/** Short to ~36,000 characters: a piece repeated, between two pieces. */
const text = fc
  .tuple(piece, fc.oneof(fc.nat({ max: 8 }), fc.nat({ max: 3000 })), piece)
  .map(([head, times, tail]) => head + tail.repeat(times) + head);

const textPart = fc.record({ type: fc.constant('text'), text });
const inputTextPart = fc.record({ type: fc.constant('input_text'), text });
const imagePart = fc.record({
  type: fc.constant('image'),
  data: fc.nat({ max: 20_000 }).map((n) => 'iVBORw0KGgo'.repeat(n)),
});
const imageUrlPart = fc.record({
  type: fc.constant('image_url'),
  image_url: fc.record({ url: fc.webUrl() }),
});
const part: fc.Arbitrary<Part> = fc.oneof(
  { weight: 4, arbitrary: textPart },
  { weight: 1, arbitrary: inputTextPart },
  { weight: 1, arbitrary: imagePart },
  { weight: 1, arbitrary: imageUrlPart },
);
const message: fc.Arbitrary<Message> = fc.record(
  {
    role: fc.constantFrom(...MODEL_MESSAGE_ROLES),
    content: fc.oneof(text, fc.array(part, { maxLength: 4 })),
    name: fc.string({ maxLength: 8 }),
    toolCallId: fc.string({ maxLength: 8 }),
  },
  { requiredKeys: ['role', 'content'] },
);
const tool = fc.record({
  type: fc.constant('function'),
  function: fc.record({
    name: fc.string({ minLength: 1, maxLength: 20 }),
    parameters: fc.record({ description: text }),
  }),
});
const modelCall = fc.record(
  {
    callId: id,
    model: notBlank,
    messages: fc.array(message, { maxLength: 40 }),
    tools: fc.array(tool, { maxLength: 4 }),
  },
  { requiredKeys: ['callId', 'model', 'messages'] },
);
/** Small enough never to exceed its allowance (1/8 of the budget). */
const metadata = fc.dictionary(fc.string({ maxLength: 6 }), fc.string({ maxLength: 20 }), {
  maxKeys: 3,
});
const limit = fc.oneof(
  fc.integer({ min: MIN_LIMIT_BYTES, max: 16 * 1024 }),
  fc.integer({ min: MIN_LIMIT_BYTES, max: 512 * 1024 }),
);

describe('gateEvent: a text longer than one measuring chunk (16,384 characters)', () => {
  // A pair measured as two lone halves cost 8 bytes more than it does: a pass that did not fit
  // looked as if it did, and the gate fell back to dropping every message.
  it.each([
    // The first chunk ends on a lone high surrogate, a whole pair right after it.
    ['on a lone high surrogate before a pair', '\ud83d\ud800\udc00'],
    // A pair straddles the cut, its low half at either end of the low range.
    ['inside U+10000, whose low half opens the low range', '\ud800\udc00'],
    ['inside U+10FFFF, whose low half closes the low range', '\udbff\udfff'],
  ])('keeps a message clamped, not dropped, when the cut falls %s', (_, atCut) => {
    // Given a text whose first chunk's cut falls there
    const text = `${'x'.repeat(16_383)}${atCut}a\ud83d`;
    const event = eventOf('model.call', {
      callId: 'c',
      model: 'm',
      messages: [{ role: 'system', content: [{ type: 'text', text }] }],
    });

    // When it is gated to the smallest limit
    const result = gateEvent(event, MIN_LIMIT_BYTES);

    // Then every pair was measured whole: the message is kept, its text clamped
    expectRecordable(result, MIN_LIMIT_BYTES);
    expect(stampOf(result)).toMatchObject({ omittedMessageCount: 0, clampedParts: 1 });
  });
});

describe('gateEvent: model.call (properties)', () => {
  it('always fits, passes validateEvent, keeps a suffix of the messages and says exactly what it did', () => {
    fc.assert(
      fc.property(modelCall, metadata, limit, fc.boolean(), (data, meta, limitBytes, given) => {
        // Given a model call of any size and a limit
        const event = eventOf('model.call', data, meta);
        const before = canonicalJson(event);
        const original = measureEvent(event);

        // When it is gated, with or without its measured size
        const result = given
          ? gateEvent(event, limitBytes, original)
          : gateEvent(event, limitBytes);

        // Then the input is untouched and the result is recordable
        expect(canonicalJson(event)).toBe(before);
        expectRecordable(result, limitBytes);
        if (original <= limitBytes) {
          expect(result.event).toBe(event);
          expect(result).toEqual({ event, truncated: false, byteLength: original });
          return;
        }
        // And a reduced event keeps the newest messages, in order, and counts exactly
        const stamp = stampOf(result);
        const reduced = dataOf(result);
        expect(stamp.originalByteLength).toBe(original);
        expect(stamp.originalByteLength).toBe(canonicalByteLength(event));
        const kept = reduced.messages as Message[];
        expect(kept).toHaveLength(data.messages.length - stamp.omittedMessageCount);
        let changed = 0;
        let longest = 0;
        kept.forEach((message, i) => {
          const compared = compareMessage(data.messages[stamp.omittedMessageCount + i], message);
          changed += compared.changed;
          longest = Math.max(longest, compared.longest);
        });
        if (stamp.omittedMessageCount > 0) {
          // Messages are dropped only once the floor pass has clamped every text,
          expect(longest).toBeLessThanOrEqual(MIN_CLAMP_CHARS);
          // and no more than needed: the next older one, clamped likewise, would not fit (with
          // a comma, and one more digit in the stamp at most).
          const next = atFloor(data.messages[stamp.omittedMessageCount - 1]);
          const budget = limitBytes - STAMP_RESERVE_BYTES;
          expect(result.byteLength + jsonBytes(next) + 2).toBeGreaterThan(budget);
        }
        if (data.tools !== undefined && reduced.tools !== data.tools) changed += 1;
        if (reduced.callId !== data.callId) changed += 1;
        if (reduced.model !== data.model) changed += 1;
        expect(stamp.clampedParts).toBe(changed);
      }),
      { numRuns: propertyRuns(300) },
    );
  });

  it('measures an event in steps to the same length as in one go (property)', () => {
    fc.assert(
      fc.property(
        fc.jsonValue(),
        fc.jsonValue(),
        fc.string({ unit: 'binary' }),
        fc.nat(3 * 256 * 1024),
        (data, meta, text, filler) => {
          // Some events under the weight measured in one go, some over it, with long texts.
          const event = {
            id: UUID,
            type: 'tool.finished',
            data: { data, output: `${text}${'x'.repeat(filler)}${text}` },
            metadata: { meta },
          };

          expect(runToEnd(measureEventSteps(event))).toBe(measureEvent(event));
        },
      ),
      { numRuns: propertyRuns(100) },
    );
  });

  it('measures a small event in one step and a 15 MiB text a piece at a time', () => {
    const count = (event: GateableEvent) => {
      const steps = measureEventSteps(event);
      let n = 0;
      while (!steps.next().done) n += 1;
      return n;
    };
    const event = (output: unknown) => ({
      id: UUID,
      type: 'tool.finished',
      data: { toolCallId: 'c1', output },
      metadata: {},
    });

    expect(count(event('y'.repeat(1000)))).toBe(0);
    expect(count(event(Array.from({ length: 1000 }, () => 'short')))).toBe(0);
    expect(count(event('y'.repeat(15 * 2 ** 20)))).toBeGreaterThanOrEqual(60);
    // Members weigh too: forty thousand zeros, in an array or under short keys.
    const zeros = Array.from({ length: 40_000 }, () => 0);
    expect(count(event(zeros))).toBeGreaterThan(1000);
    expect(count(event(Object.fromEntries(zeros.map((z, i) => [`k${i}`, z]))))).toBeGreaterThan(
      1000,
    );
  });

  it('measures the canonical JSON: the same length as canonicalByteLength (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.jsonValue(), fc.string(), (data, meta, type) => {
        const event = { id: UUID, type, data, metadata: { meta } };

        expect(measureEvent(event)).toBe(canonicalByteLength(event));
      }),
    );
  });
});

describe('gateEvent: model.call (examples)', () => {
  it('returns an event that fits as the same object, without copying it', () => {
    const event = eventOf('model.call', { ...EVENT_DATA_EXAMPLES['model.call'] });

    const result = gateEvent(event, MIB);

    expect(result).toEqual({ event, truncated: false, byteLength: measureEvent(event) });
    expect(result.event).toBe(event);
  });

  it('clamps the longest texts first and keeps every message when that is enough', () => {
    // Given a context with two huge texts among short messages
    const huge = 'The order shipped. '.repeat(10_000);
    const messages = [
      { role: 'system', content: 'You are a support agent.' },
      { role: 'user', content: huge },
      { role: 'assistant', content: [{ type: 'text', text: huge }] },
      { role: 'user', content: 'Thanks!' },
    ];
    const event = eventOf('model.call', { callId: 'call-1', model: 'gpt-4o-mini', messages });

    // When it is gated to 64 KiB
    const result = gateEvent(event, 64 * 1024);

    // Then both texts are clamped, the short messages are untouched, nothing is dropped
    expectRecordable(result, 64 * 1024);
    expect(stampOf(result)).toMatchObject({ omittedMessageCount: 0, clampedParts: 2 });
    const kept = dataOf(result).messages as Message[];
    expect(kept[0]).toBe(messages[0]);
    expect(kept[3]).toBe(messages[3]);
    expect(kept[1].content).toContain(TRUNCATION_MARKER);
    // And the cap was raised to use the room left, not halved past it
    expect(result.byteLength).toBeGreaterThan(0.9 * (64 * 1024 - STAMP_RESERVE_BYTES));
  });

  it('drops the oldest messages, keeping the newest in order, when clamping is not enough', () => {
    // Given 1,000 short messages (nothing to clamp), about 75 KiB
    const messages = Array.from({ length: 1000 }, (_, i) => ({
      role: 'user',
      content: `message ${i} `.padEnd(60, '.'),
    }));
    const event = eventOf('model.call', { callId: 'call-1', model: 'm', messages });

    // When it is gated to 16 KiB
    const result = gateEvent(event, 16 * 1024);

    // Then the newest messages are kept, as they were, and the rest counted as omitted
    expectRecordable(result, 16 * 1024);
    const stamp = stampOf(result);
    const kept = dataOf(result).messages as Message[];
    expect(kept).toEqual(messages.slice(stamp.omittedMessageCount));
    expect(kept[kept.length - 1]).toBe(messages[messages.length - 1]);
    expect(stamp.clampedParts).toBe(0);
    // And one more message would not have fitted
    expect(result.byteLength + jsonBytes(messages[0]) + 1).toBeGreaterThan(
      16 * 1024 - STAMP_RESERVE_BYTES,
    );
  });

  it('replaces an oversized image part by a text part saying what was omitted', () => {
    // Given a message with a 320 KiB image
    const image = { type: 'image', mediaType: 'image/png', data: 'iVBORw0KGgo'.repeat(30_000) };
    const see = { type: 'text', text: 'What is on this receipt?' };
    const messages = [{ role: 'user', content: [see, image] }];
    const event = eventOf('model.call', { callId: 'call-1', model: 'gpt-4o', messages });

    // When it is gated
    const result = gateEvent(event, 64 * 1024);

    // Then the image is a text part naming its type and size; the message is kept
    expectRecordable(result, 64 * 1024);
    expect(stampOf(result)).toMatchObject({ omittedMessageCount: 0, clampedParts: 1 });
    const [kept] = dataOf(result).messages as { content: Part[] }[];
    expect(kept.content[0]).toBe(see);
    expect(kept.content[1]).toEqual({
      type: 'text',
      text: `[omitted image part of ${jsonBytes(image)} bytes]`,
    });
  });

  it('reduces huge tool definitions to name stubs, or drops them when even those are too big', () => {
    // Given 200 tools with large JSON schemas
    const schema = { type: 'object', description: 'A parameter. '.repeat(100) };
    const tools = Array.from({ length: 200 }, (_, i) => ({
      type: 'function',
      function: { name: `tool_${i}`, parameters: schema },
    }));
    const messages = [{ role: 'user', content: 'Look up order 1042' }];
    const event = eventOf('model.call', { callId: 'call-1', model: 'm', messages, tools });

    // When it is gated to 64 KiB, the tools become stubs with their names
    const large = gateEvent(event, 64 * 1024);
    expectRecordable(large, 64 * 1024);
    expect(dataOf(large).tools).toEqual(tools.map((t) => ({ name: t.function.name })));
    expect(dataOf(large).messages).toEqual(messages);
    expect(stampOf(large).clampedParts).toBe(1);

    // And when it is gated to 2 KiB, the tools are dropped and the messages kept
    const small = gateEvent(event, MIN_LIMIT_BYTES);
    expectRecordable(small, MIN_LIMIT_BYTES);
    expect(dataOf(small)).not.toHaveProperty('tools');
    expect(dataOf(small).messages).toEqual(messages);
    expect(stampOf(small)).toMatchObject({ omittedMessageCount: 0, clampedParts: 1 });
  });

  it('falls back to the envelope, clamping callId and model, when even they do not fit', () => {
    // Given the longest callId and model the schema allows, in characters JSON escapes 6-fold
    const callId = '\u0000'.repeat(256);
    const model = '\u0001'.repeat(1024);
    const messages = [{ role: 'user', content: 'x'.repeat(100_000) }];
    const event = eventOf('model.call', { callId, model, messages, tools: [{ name: 'a' }] });

    // When it is gated to the smallest limit
    const result = gateEvent(event, MIN_LIMIT_BYTES);

    // Then only the envelope is kept, its identifiers clamped, everything counted
    expectRecordable(result, MIN_LIMIT_BYTES);
    const data = dataOf(result);
    expect(data.messages).toEqual([]);
    expect(data).not.toHaveProperty('tools');
    expect(clampedPrefix(callId, data.callId as string)).toBe(16);
    expect(clampedPrefix(model, data.model as string)).toBe(16);
    expect(stampOf(result)).toMatchObject({ omittedMessageCount: 1, clampedParts: 3 });
  });

  it('never splits a surrogate pair when it clamps', () => {
    const content = `a${'😀'.repeat(50_000)}`;
    const event = eventOf('model.call', {
      callId: 'c',
      model: 'm',
      messages: [{ role: 'user', content }],
    });

    const result = gateEvent(event, 16 * 1024);

    expectRecordable(result, 16 * 1024);
    const [kept] = dataOf(result).messages as Message[];
    expect(clampedPrefix(content, kept.content as string)).toBeGreaterThan(MIN_CLAMP_CHARS);
  });

  it('still fits when the measured size it is given is wrong, by confirming the result', () => {
    const messages = Array.from({ length: 200 }, () => ({ role: 'user', content: 'y'.repeat(50) }));
    const event = eventOf('model.call', { callId: 'c', model: 'm', messages });

    const result = gateEvent(event, 4096, 4097);

    expectRecordable(result, 4096);
  });

  it('keeps an event of exactly the limit byte-for-byte, and reduces one a byte over it', () => {
    const sized = (bytes: number) => {
      const event = eventOf('message.added', { messageId: 'm', role: 'user', text: '' });
      const text = 'x'.repeat(bytes - measureEvent(event));
      return eventOf('message.added', { messageId: 'm', role: 'user', text });
    };
    const atLimit = sized(4096);
    expect(measureEvent(atLimit)).toBe(4096);
    expect(gateEvent(atLimit, 4096)).toEqual({
      event: atLimit,
      truncated: false,
      byteLength: 4096,
    });
    const over = gateEvent(sized(4097), 4096);
    expect(over.truncated).toBe(true);
    expectRecordable(over, 4096);
  });
});

describe('gateEvent: other types', () => {
  it('clamps a huge string output of tool.finished, keeping its identifiers', () => {
    const output = 'line of log output\n'.repeat(20_000);
    const event = eventOf('tool.finished', {
      toolCallId: 'tc-1',
      toolName: 'grep',
      output,
      failed: false,
    });

    const result = gateEvent(event, 64 * 1024);

    expectRecordable(result, 64 * 1024);
    expect(dataOf(result)).toMatchObject({ toolCallId: 'tc-1', toolName: 'grep', failed: false });
    expect(clampedPrefix(output, dataOf(result).output as string)).toBeGreaterThan(50_000);
    expect(stampOf(result)).toMatchObject({ omittedMessageCount: 0, clampedParts: 1 });
  });

  it('replaces a huge array output by a preview of its JSON, with its size', () => {
    // Given an output of 100,000 numbers: no string to clamp
    const output = Array.from({ length: 100_000 }, (_, i) => i * 1.5);
    const event = eventOf('tool.finished', { toolCallId: 'tc-1', output, failed: false });

    // When it is gated
    const result = gateEvent(event, 256 * 1024);

    // Then the output is a string: the start of its JSON and the marker with the whole size
    expectRecordable(result, 256 * 1024);
    const preview = dataOf(result).output as string;
    expect(preview.startsWith('[0,1.5,3,4.5,')).toBe(true);
    expect(preview.endsWith(`${TRUNCATION_MARKER}: ${jsonBytes(output)} bytes of JSON]`)).toBe(
      true,
    );
    expect(result.byteLength).toBeGreaterThan(0.9 * (256 * 1024 - STAMP_RESERVE_BYTES));
    expect(stampOf(result).clampedParts).toBe(1);
  });

  it('keeps a clamped transcript non-blank', () => {
    const text = `${' '.repeat(2 * MIB)}end`;
    const event = eventOf('transcript.added', { utteranceId: 'utt-1', role: 'user', text });

    const result = gateEvent(event, MIN_LIMIT_BYTES);

    expectRecordable(result, MIN_LIMIT_BYTES);
    expect(dataOf(result).text).toMatch(/\S/);
  });

  it('clamps the strings inside a huge tool input and keeps it an object', () => {
    const input = { query: 'refund', document: 'é'.repeat(100_000), page: 3, next: null };
    const event = eventOf('tool.started', { toolCallId: 'tc-1', toolName: 'search', input });

    const result = gateEvent(event, 64 * 1024);

    expectRecordable(result, 64 * 1024);
    const reduced = dataOf(result).input as Data;
    expect({ ...reduced, document: null }).toEqual({ ...input, document: null });
    expect(clampedPrefix(input.document, reduced.document as string)).toBeGreaterThan(0);
  });

  it('replaces a tool input with no long string by { raw: preview }', () => {
    const input = { rows: Array.from({ length: 10_000 }, (_, i) => ({ id: i, ok: true })) };
    const event = eventOf('tool.started', { toolCallId: 'tc-1', toolName: 'load', input });

    const result = gateEvent(event, 64 * 1024);

    expectRecordable(result, 64 * 1024);
    const raw = (dataOf(result).input as { raw: string }).raw;
    expect(raw.startsWith('{"rows":[{"id":0,"ok":true},')).toBe(true);
    expect(raw).toContain(TRUNCATION_MARKER);
  });

  it('reduces the metadata to its share of the budget before the data', () => {
    const event = eventOf(
      'message.added',
      { messageId: 'msg-1', role: 'user', text: 'Where is my refund?' },
      { traceId: 't-1', notes: 'n'.repeat(100_000) },
    );

    const result = gateEvent(event, 64 * 1024);

    expectRecordable(result, 64 * 1024);
    expect(dataOf(result)).toMatchObject({ text: 'Where is my refund?' });
    expect(result.event.metadata.traceId).toBe('t-1');
    expect(result.event.metadata.notes).toContain(TRUNCATION_MARKER);
    expect(stampOf(result).clampedParts).toBe(1);
  });

  it('replaces a stamp the client sent with its own', () => {
    const forged = {
      originalByteLength: 1,
      limitBytes: 1,
      omittedMessageCount: 0,
      clampedParts: 0,
    };
    const event = eventOf('message.added', {
      messageId: 'msg-1',
      role: 'user',
      text: 't'.repeat(100_000),
      truncation: forged,
    });

    const result = gateEvent(event, 64 * 1024);

    expectRecordable(result, 64 * 1024);
    expect(stampOf(result).originalByteLength).toBe(measureEvent(event));
  });

  it('refuses a limit below MIN_LIMIT_BYTES', () => {
    const event = eventOf('message.added', { messageId: 'm', role: 'user', text: 'hi' });

    expect(() => gateEvent(event, MIN_LIMIT_BYTES - 1)).toThrow(RangeError);
  });
});

/**
 * The largest value of each field the schema allows: identifiers and labels at their maximum
 * length in characters JSON escapes 6-fold; free-form text and tool payloads over the limit
 * (by a fifth or more), so that every limit meets data it must reduce. Sized
 * to the limit rather than in megabytes for all: the small limits are as hard, and the unit
 * tier stays fast (every mutant of npm run mutate reruns these).
 */
function inflate(type: EventType, limitBytes: number): Data {
  const size = (atOneMib: number) => Math.ceil((atOneMib * limitBytes) / MIB);
  const data: Data = { ...EVENT_DATA_EXAMPLES[type] };
  // Fixed formats: an enum's members, a SHA-256 digest in hex.
  const enums = new Set([
    'role',
    'source',
    'status',
    'decision',
    'failed',
    'downgraded',
    'receiptDigest',
  ]);
  const ids = new Set(['turnId', 'messageId', 'utteranceId', 'callId', 'toolCallId', 'approvalId']);
  const labels = new Set(['agent', 'title', 'model', 'toolName']);
  for (const key of Object.keys(data)) {
    const value = data[key];
    if (enums.has(key) || typeof value === 'number') continue;
    if (key === 'threadId') data[key] = 'T'.repeat(128);
    else if (ids.has(key)) data[key] = '\u0000'.repeat(256);
    else if (labels.has(key)) data[key] = '\u0001'.repeat(1024);
    else if (key === 'options')
      data[key] = Array.from({ length: 64 }, () => 'o'.repeat(size(20_000)));
    else if (key === 'input')
      data[key] = { blob: Array.from({ length: size(200_000) }, (_, i) => i) };
    else if (key === 'output')
      data[key] = { rows: Array.from({ length: size(200_000) }, (_, i) => i) };
    else if (key === 'messages') {
      data[key] = Array.from({ length: 300 }, () => ({
        role: 'user',
        content: '"é'.repeat(size(1000)),
      }));
    } else if (key === 'tools') data[key] = [{ name: 'x'.repeat(size(MIB)) }];
    else data[key] = 'é"\n'.repeat(size(200_000));
  }
  if (type === 'tool.finished')
    Object.assign(data, { failed: true, errorText: 'e'.repeat(size(MIB / 2)) });
  return data;
}

/** The fields each type's schema requires (docs/events.md, the catalogue's bold fields). */
const REQUIRED: Record<EventType, string[]> = {
  'run.started': ['threadId', 'agent', 'source'],
  'run.finished': ['status'],
  'turn.started': ['turnId', 'source'],
  'turn.finished': ['turnId', 'status'],
  'turn.steered': ['turnId', 'instruction'],
  'message.added': ['messageId', 'role', 'text'],
  'transcript.added': ['utteranceId', 'role', 'text'],
  'model.call': ['callId', 'model', 'messages'],
  'tool.started': ['toolCallId', 'toolName', 'input'],
  'tool.finished': ['toolCallId', 'failed'],
  'approval.requested': ['approvalId', 'toolCallId', 'toolName', 'input'],
  'approval.resolved': ['approvalId', 'decision', 'receipt'],
  'append.rejected': ['reason', 'declaredBytes'],
};

const IDENTIFIERS_AND_LABELS = [
  'turnId',
  'messageId',
  'utteranceId',
  'callId',
  'toolCallId',
  'approvalId',
  'agent',
  'title',
  'model',
  'toolName',
];

describe('gateEvent: every catalogue type at its worst', () => {
  it.each(EVENT_TYPES.flatMap((type) => [MIN_LIMIT_BYTES, 64 * 1024, MIB].map((l) => [type, l])))(
    '%s fits %p bytes and passes validateEvent',
    (type, limitBytes) => {
      // Given the type's data at the sizes the schema allows, and metadata over its share of
      // the budget (so that at the smallest limit even a type whose data always fits is reduced)
      const event = eventOf(type as string, inflate(type as EventType, limitBytes as number), {
        traceId: 't-1',
        note: 'n'.repeat(Math.ceil(((limitBytes as number) * 300_000) / MIB)),
      });
      // The data differs between limits only in the length of free-form values, which no
      // schema bounds: valid at the smallest limit is valid at every limit.
      if (limitBytes === MIN_LIMIT_BYTES) expect(problemsOf(event)).toEqual([]);

      // When it is gated
      const result = gateEvent(event, limitBytes as number);

      // Then it fits and passes the real validator, stamp included
      expectRecordable(result, limitBytes as number);
      const over = measureEvent(event) > (limitBytes as number);
      expect(result.truncated).toBe(over);
      if (over) expect(stampOf(result).originalByteLength).toBe(measureEvent(event));
      // And it keeps what the schema requires, the thread id as it came, and each identifier
      // or label whole or, by the guaranteed fit alone, cut to 16 characters
      const original = event.data as Data;
      const reduced = dataOf(result);
      for (const key of REQUIRED[type as EventType]) expect(reduced).toHaveProperty(key);
      if (original.threadId !== undefined) expect(reduced.threadId).toBe(original.threadId);
      for (const key of IDENTIFIERS_AND_LABELS) {
        if (reduced[key] === undefined || reduced[key] === original[key]) continue;
        expect(clampedPrefix(original[key] as string, reduced[key] as string)).toBe(16);
      }
      // And gating it again changes nothing
      expect(gateEvent(result.event, limitBytes as number).event).toBe(result.event);
    },
  );
});

describe('gateEvent: limits and metadata', () => {
  it.each([MIN_LIMIT_BYTES - 1, 4096.5, Number.NaN, 2 ** 53])(
    'refuses the limit %p, naming the least it accepts',
    (limitBytes) => {
      const event = eventOf('message.added', { messageId: 'm', role: 'user', text: 'hi' });

      expect(() => gateEvent(event, limitBytes)).toThrow(
        `limitBytes must be an integer ≥ ${MIN_LIMIT_BYTES}, got ${limitBytes}`,
      );
    },
  );

  it('accepts MIN_LIMIT_BYTES itself', () => {
    const event = eventOf('message.added', {
      messageId: 'm',
      role: 'user',
      text: 'x'.repeat(5000),
    });

    expectRecordable(gateEvent(event, MIN_LIMIT_BYTES), MIN_LIMIT_BYTES);
  });

  it('clamps strings nested in the metadata, copying only what it changes', () => {
    // Given metadata whose long strings sit inside an object and an array
    const shared = { kept: true };
    const metadata = {
      traceId: 't-1',
      trace: { notes: ['n'.repeat(100_000), 'short'], shared, parent: null },
    };
    const event = eventOf(
      'message.added',
      { messageId: 'msg-1', role: 'user', text: 'Where is my refund?' },
      metadata,
    );
    const before = canonicalJson(event);

    // When it is gated
    const result = gateEvent(event, 16 * 1024);

    // Then the nested string is clamped where it was, the array still an array, the rest kept
    expectRecordable(result, 16 * 1024);
    expect(canonicalJson(event)).toBe(before);
    const reduced = result.event.metadata as typeof metadata;
    expect(reduced.traceId).toBe('t-1');
    expect(Array.isArray(reduced.trace.notes)).toBe(true);
    expect(reduced.trace.notes[1]).toBe('short');
    expect(clampedPrefix(metadata.trace.notes[0], reduced.trace.notes[0])).toBeGreaterThan(
      MIN_CLAMP_CHARS,
    );
    expect(reduced.trace.shared).toBe(shared);
    expect(reduced.trace.parent).toBeNull();
    expect(dataOf(result).text).toBe('Where is my refund?');
    expect(stampOf(result).clampedParts).toBe(1);
  });

  it('clamps metadata to the floor when only the floor fits its share, rather than emptying it', () => {
    // Given 70 notes of 200 characters: 14 KiB, over 1/8 of a 64 KiB budget even with each
    // note cut to 100 characters, within it with each cut to 64
    const metadata = Object.fromEntries(
      Array.from({ length: 70 }, (_, i) => [`n${i}`, `${i}`.padEnd(200, '.')]),
    );
    const event = eventOf(
      'message.added',
      { messageId: 'msg-1', role: 'user', text: 'x'.repeat(100_000) },
      metadata,
    );

    const result = gateEvent(event, 64 * 1024);

    expectRecordable(result, 64 * 1024);
    const reduced = result.event.metadata as Record<string, string>;
    expect(Object.keys(reduced)).toEqual(Object.keys(metadata));
    // (the floor pass fits; the spare bytes then buy a few more characters, never 100)
    for (const key of Object.keys(metadata)) {
      const kept = clampedPrefix(metadata[key], reduced[key]);
      expect(kept).toBeGreaterThanOrEqual(MIN_CLAMP_CHARS);
      expect(kept).toBeLessThan(100);
    }
  });

  it('empties metadata it cannot clamp into its share, counting it once', () => {
    // Given metadata of numbers only, far over 1/8 of the budget
    const metadata = { samples: Array.from({ length: 20_000 }, (_, i) => i) };
    const data = { messageId: 'msg-1', role: 'user', text: 'Where is my refund?' };
    const event = eventOf('message.added', data, metadata);

    // When it is gated
    const result = gateEvent(event, 16 * 1024);

    // Then the metadata is {} and the data as it was
    expectRecordable(result, 16 * 1024);
    expect(result.event.metadata).toEqual({});
    expect(dataOf(result)).toEqual({ ...data, truncation: stampOf(result) });
    expect(stampOf(result)).toEqual({
      originalByteLength: measureEvent(event),
      limitBytes: 16 * 1024,
      omittedMessageCount: 0,
      clampedParts: 1,
    });
  });

  it('keeps metadata within its share as the same object', () => {
    const metadata = { traceId: 't-1' };
    const event = eventOf(
      'message.added',
      { messageId: 'msg-1', role: 'user', text: 'x'.repeat(10_000) },
      metadata,
    );

    const result = gateEvent(event, 4096);

    expectRecordable(result, 4096);
    expect(result.event.metadata).toBe(metadata);
  });

  it('falls back to what the schema requires when the size it is given is far too small', () => {
    // Given a 100 KiB model call claimed to be one byte over the limit
    const messages = Array.from({ length: 20 }, (_, i) => ({
      role: 'user',
      content: `${i}`.padEnd(5000, '.'),
    }));
    const event = eventOf('model.call', { callId: 'c', model: 'm', messages });

    // When it is gated with that size
    const result = gateEvent(event, 4096, 4097);

    // Then the result still fits: the confirming measure caught the wrong size
    expectRecordable(result, 4096);
    expect(dataOf(result).messages).toEqual([]);
    expect(stampOf(result)).toMatchObject({ originalByteLength: 4097, omittedMessageCount: 20 });
  });

  it('throws when not even the envelope fits, naming the event and the limit', () => {
    const id = 'i'.repeat(4000);
    const event = { id, type: 'message.added', data: { text: 'hi' }, metadata: {} };

    expect(() => gateEvent(event, MIN_LIMIT_BYTES)).toThrow(
      `cannot reduce message.added event ${'i'.repeat(64)} to ${MIN_LIMIT_BYTES} bytes: its envelope alone is too big`,
    );
  });
});

describe('gateEvent: a surrogate pair at the cut', () => {
  it.each([
    ['the first', '\ud800\udc00'],
    ['the last', '\udbff\udfff'],
  ])('is kept whole or cut before, for %s pair of Unicode', (_which, pair) => {
    // Given a tool whose name has a surrogate pair across the 64th character, and a schema
    // large enough that the tools become name stubs (names clamped to 64 characters)
    const name = `${'a'.repeat(63)}${pair}${'b'.repeat(100)}`;
    const tools = [{ name, description: 'd'.repeat(100_000) }];
    const messages = [{ role: 'user', content: 'Look up order 1042' }];
    const event = eventOf('model.call', { callId: 'c', model: 'm', messages, tools });

    // When it is gated
    const result = gateEvent(event, 64 * 1024);

    // Then the stub's name stops before the pair rather than splitting it
    expectRecordable(result, 64 * 1024);
    expect(dataOf(result).tools).toEqual([
      { name: `${'a'.repeat(63)}${TRUNCATION_MARKER} ${name.length - 63} chars]` },
    ]);
  });

  it('cuts a name at 64 characters when a character just below the surrogates is there', () => {
    const name = `${'a'.repeat(63)}\ud7ff${'b'.repeat(100)}`;
    const tools = [{ name, description: 'd'.repeat(100_000) }];
    const event = eventOf('model.call', { callId: 'c', model: 'm', messages: [], tools });

    const result = gateEvent(event, 64 * 1024);

    expect(dataOf(result).tools).toEqual([
      { name: `${name.slice(0, 64)}${TRUNCATION_MARKER} ${name.length - 64} chars]` },
    ]);
  });
});

describe('gateEvent: the fallback', () => {
  it('keeps what the schema requires, identifiers clamped, the input as a placeholder, and counts each', () => {
    // Given identifiers at their schema maximum in characters JSON escapes 6-fold, and an input
    // that is no use to clamp
    const toolCallId = '\u0000'.repeat(256);
    const toolName = '\u0001'.repeat(1024);
    const input = { blob: Array.from({ length: 2000 }, (_, i) => i) };
    const metadata = { traceId: 't-1' };
    const event = eventOf('tool.started', { toolCallId, toolName, input }, metadata);

    // When it is gated to the smallest limit
    const result = gateEvent(event, MIN_LIMIT_BYTES);

    // Then only the envelope is left: identifiers cut to 16 characters, the input's size named
    expectRecordable(result, MIN_LIMIT_BYTES);
    expect(dataOf(result)).toEqual({
      toolCallId: `${toolCallId.slice(0, 16)}${TRUNCATION_MARKER} 240 chars]`,
      toolName: `${toolName.slice(0, 16)}${TRUNCATION_MARKER} 1008 chars]`,
      input: { raw: `[omitted: ${jsonBytes(input)} bytes of JSON]` },
      truncation: {
        originalByteLength: measureEvent(event),
        limitBytes: MIN_LIMIT_BYTES,
        omittedMessageCount: 0,
        clampedParts: 3,
      },
    });
    expect(result.event.metadata).toBe(metadata);
  });

  it('leaves out optional fields, counting each, and keeps required free text clamped to the floor', () => {
    // Given a finished run whose optional texts are huge and whose identifiers are long
    const event = eventOf('approval.requested', {
      approvalId: '\u0000'.repeat(256),
      toolCallId: 'tc-1',
      toolName: 'deploy',
      input: { env: 'prod' },
      question: 'q'.repeat(5000),
      options: Array.from({ length: 64 }, () => 'o'.repeat(100)),
    });

    const result = gateEvent(event, MIN_LIMIT_BYTES);

    expectRecordable(result, MIN_LIMIT_BYTES);
    const data = dataOf(result);
    expect(Object.keys(data).sort()).toEqual([
      'approvalId',
      'input',
      'toolCallId',
      'toolName',
      'truncation',
    ]);
    expect(data.toolCallId).toBe('tc-1');
    expect(data.toolName).toBe('deploy');
  });

  it('first keeps identifiers and labels whole, leaving out what the schema does not require', () => {
    // Given a run whose optional title is a label at its maximum, which nothing may clamp
    // before the fallback, and an agent name longer than the fallback's 16 characters
    const event = eventOf('run.started', {
      threadId: 'thread-1',
      agent: 'support-bot-for-refunds',
      source: 'typed',
      title: '\u0001'.repeat(1024),
      goal: 'g'.repeat(100),
    });

    const result = gateEvent(event, 4096);

    // Then the title and goal are left out, counted, and the agent kept whole
    expectRecordable(result, 4096);
    expect(dataOf(result)).toEqual({
      threadId: 'thread-1',
      agent: 'support-bot-for-refunds',
      source: 'typed',
      truncation: {
        originalByteLength: measureEvent(event),
        limitBytes: 4096,
        omittedMessageCount: 0,
        clampedParts: 2,
      },
    });
  });

  it('keeps a fallback that fills the budget to the byte', () => {
    // Given events that only the fallback fits, their ids a character longer each time
    const sized = (n: number) => ({
      id: 'i'.repeat(n),
      type: 'message.added',
      data: { messageId: 'm', role: 'user', text: 'x'.repeat(5000) },
      metadata: {},
    });
    const fits = (n: number) => {
      try {
        return gateEvent(sized(n), MIN_LIMIT_BYTES);
      } catch {
        return undefined;
      }
    };
    let longest = 900;
    while (fits(longest + 1) !== undefined) longest += 1;

    // Then the longest id that fits makes an event of exactly the budget
    expect(fits(longest)?.byteLength).toBe(MIN_LIMIT_BYTES - STAMP_RESERVE_BYTES);
  });

  it('empties the metadata as a last resort, when the id is far longer than a UUID', () => {
    const metadata = { traceId: 't'.repeat(100) };
    const event = {
      id: 'i'.repeat(1000),
      type: 'message.added',
      data: { messageId: 'm', role: 'user', text: 'x'.repeat(5000) },
      metadata,
    };

    const result = gateEvent(event, MIN_LIMIT_BYTES);

    expect(result.event.metadata).toEqual({});
    expect(result.byteLength).toBeLessThanOrEqual(MIN_LIMIT_BYTES - STAMP_RESERVE_BYTES);
    expect(stampOf(result)).toEqual({
      originalByteLength: measureEvent(event),
      limitBytes: MIN_LIMIT_BYTES,
      omittedMessageCount: 0,
      clampedParts: 2,
    });
    expect(dataOf(result).text).toBe(`${'x'.repeat(16)}${TRUNCATION_MARKER} 4984 chars]`);
  });
});

describe('gateEvent: edges of the reduction', () => {
  it('keeps a reduction that fills the budget to the byte, rather than falling back', () => {
    // Given model calls of short messages (nothing to clamp) whose callId grows a character at
    // a time: one of them is reduced, by dropping its oldest messages, to exactly the budget
    const limit = 16 * 1024;
    const budget = limit - STAMP_RESERVE_BYTES;
    const messages = Array.from({ length: 1000 }, (_, i) => ({ role: 'user', content: `m${i}` }));
    const exact = Array.from({ length: 60 }, (_, pad) =>
      gateEvent(
        eventOf('model.call', { callId: 'c'.repeat(1 + pad), model: 'm', messages }),
        limit,
      ),
    ).find((result) => result.byteLength === budget);

    // Then it is kept as reduced: the newest messages, not the envelope alone
    expect(exact).toBeDefined();
    expect((dataOf(exact!).messages as Message[]).length).toBeGreaterThan(100);
  });

  it('names an omitted part by its whole type when that is exactly 32 characters', () => {
    const type = `${'t'.repeat(31)}\ud83d`;
    const part = { type, data: 'x'.repeat(100_000) };
    const event = eventOf('model.call', {
      callId: 'c',
      model: 'm',
      messages: [{ role: 'user', content: [part] }],
    });

    const result = gateEvent(event, 16 * 1024);

    const [kept] = dataOf(result).messages as { content: Part[] }[];
    expect(kept.content[0]).toEqual({
      type: 'text',
      text: `[omitted ${type} part of ${jsonBytes(part)} bytes]`,
    });
  });

  it('keeps a tool name of exactly 64 characters whole in its stub', () => {
    const name = 'n'.repeat(MIN_CLAMP_CHARS);
    const tools = [{ name, description: 'd'.repeat(100_000) }];
    const event = eventOf('model.call', { callId: 'c', model: 'm', messages: [], tools });

    expect(dataOf(gateEvent(event, 64 * 1024)).tools).toEqual([{ name }]);
  });

  it('returns plain data: every property of the reduced event can be written and deleted', () => {
    const event = eventOf(
      'tool.started',
      {
        toolCallId: 'tc-1',
        toolName: 'search',
        input: { query: 'refund', pages: [{ text: 'p'.repeat(50_000) }] },
      },
      { trace: { notes: ['n'.repeat(50_000)] } },
    );

    const result = gateEvent(event, 16 * 1024);

    const problems: string[] = [];
    const walk = (value: unknown, path: string) => {
      if (value === null || typeof value !== 'object') return;
      for (const key of Object.keys(value)) {
        const d = Object.getOwnPropertyDescriptor(value, key)!;
        if (!d.writable || !d.configurable || !d.enumerable) problems.push(`${path}.${key}`);
        walk((value as Data)[key], `${path}.${key}`);
      }
    };
    walk(result.event, 'event');
    expect(problems).toEqual([]);
    expect((result.event.data as Data).input).toMatchObject({ query: 'refund' });
  });
});

describe('gateEvent: bulky fields of other types', () => {
  const approval = (input: unknown, options: string[], toolName = 'deploy') =>
    eventOf('approval.requested', {
      approvalId: 'ap-1',
      toolCallId: 'tc-1',
      toolName,
      input,
      question: 'Deploy to prod?',
      options,
    });

  it('drops the approval options when they are what does not fit, keeping the input whole', () => {
    // Given options too long even at the floor (64 of 500 characters), and a small input
    const input = { env: 'prod', replicas: 3 };
    const event = approval(
      input,
      Array.from({ length: 64 }, () => 'o'.repeat(500)),
    );

    // When it is gated
    const result = gateEvent(event, 4096);

    // Then the options are left out, counted once, and everything else kept as it came
    expectRecordable(result, 4096);
    expect(dataOf(result)).toEqual({
      approvalId: 'ap-1',
      toolCallId: 'tc-1',
      toolName: 'deploy',
      input,
      question: 'Deploy to prod?',
      truncation: stampOf(result),
    });
    expect(stampOf(result).clampedParts).toBe(1);
    // And gating the reduced event again changes nothing
    expect(gateEvent(result.event, 4096).event).toBe(result.event);
  });

  it('replaces the bulkiest field first, then previews the next in the room that leaves', () => {
    // Given options (64 KiB) bulkier than an input of numbers (49 KiB)
    const input = { blob: Array.from({ length: 10_000 }, (_, i) => i) };
    const event = approval(
      input,
      Array.from({ length: 64 }, () => 'o'.repeat(1000)),
    );

    // When it is gated
    const result = gateEvent(event, 4096);

    // Then the options are dropped, and the input is a preview of its JSON filling the room
    expectRecordable(result, 4096);
    const data = dataOf(result);
    expect(data).not.toHaveProperty('options');
    expect(data.question).toBe('Deploy to prod?');
    const raw = (data.input as { raw: string }).raw;
    expect(raw.startsWith('{"blob":[0,1,2,3,')).toBe(true);
    expect(raw.endsWith(`${TRUNCATION_MARKER}: ${jsonBytes(input)} bytes of JSON]`)).toBe(true);
    expect(result.byteLength).toBeGreaterThan(0.9 * (4096 - STAMP_RESERVE_BYTES));
    expect(stampOf(result).clampedParts).toBe(2);
  });

  it('keeps the options when previewing the input is enough', () => {
    // Given an input of numbers far over the limit, and short options
    const input = { blob: Array.from({ length: 10_000 }, (_, i) => i) };
    const options = ['yes', 'no'];
    const event = approval(input, options);

    const result = gateEvent(event, 4096);

    expectRecordable(result, 4096);
    const data = dataOf(result);
    expect(data.options).toEqual(options);
    expect((data.input as { raw: string }).raw.startsWith('{"blob":[0,1,2,3,')).toBe(true);
    expect(result.byteLength).toBeGreaterThan(0.9 * (4096 - STAMP_RESERVE_BYTES));
    expect(stampOf(result).clampedParts).toBe(1);
  });

  it('previews a tool output as a string, keeping the error text it was recorded with', () => {
    const output = { rows: Array.from({ length: 10_000 }, (_, i) => i) };
    const event = eventOf('tool.finished', {
      toolCallId: 'tc-1',
      toolName: 'load',
      output,
      failed: true,
      errorText: 'exit code 2',
    });

    const result = gateEvent(event, 4096);

    expectRecordable(result, 4096);
    const data = dataOf(result);
    expect(data).toMatchObject({ toolName: 'load', failed: true, errorText: 'exit code 2' });
    expect(typeof data.output).toBe('string');
    expect((data.output as string).startsWith('{"rows":[0,1,2,3,')).toBe(true);
    expect(stampOf(result).clampedParts).toBe(1);
  });

  it('drops options to fit the budget to the byte, rather than touching the input', () => {
    // Given approvals whose options must go, their tool names a character longer each time
    const budget = MIN_LIMIT_BYTES - STAMP_RESERVE_BYTES;
    const input = { env: 'prod' };
    const options = Array.from({ length: 64 }, () => 'o'.repeat(500));
    const results = Array.from({ length: 40 }, (_, i) =>
      gateEvent(approval(input, options, 't'.repeat(938 + i)), MIN_LIMIT_BYTES),
    );

    // Then each keeps its input and question, and one fills the budget exactly
    for (const result of results) {
      expect(dataOf(result)).toMatchObject({ input, question: 'Deploy to prod?' });
      expect(dataOf(result)).not.toHaveProperty('options');
    }
    expect(results.map((result) => result.byteLength)).toContain(budget);
  });

  it('clamps a string field to fit the budget to the byte, keeping the optional tool name', () => {
    // Given tool outputs to clamp, their tool names a character longer each time
    const budget = MIN_LIMIT_BYTES - STAMP_RESERVE_BYTES;
    // (a surrogate pair across the 16,384th character: long texts are sized in chunks of that)
    const output = `${'o'.repeat(16_383)}\u{1f600}${'o'.repeat(5000)}`;
    const results = Array.from({ length: 13 }, (_, i) =>
      gateEvent(
        eventOf('tool.finished', {
          toolCallId: 'tc-1',
          toolName: 't'.repeat(925 + i),
          output,
          failed: false,
        }),
        MIN_LIMIT_BYTES,
      ),
    );

    // Then each keeps its tool name and a clamped output, and one fills the budget exactly
    results.forEach((result, i) => {
      expect(dataOf(result).toolName).toBe('t'.repeat(925 + i));
      expect(clampedPrefix(output, dataOf(result).output as string)).toBeGreaterThanOrEqual(
        MIN_CLAMP_CHARS,
      );
    });
    expect(results.map((result) => result.byteLength)).toContain(budget);
  });

  it('previews a string field to fit the budget to the byte, keeping the optional tool name', () => {
    // Given tool outputs that even clamped to the floor do not fit beside their tool names
    const budget = MIN_LIMIT_BYTES - STAMP_RESERVE_BYTES;
    // (a surrogate pair across the 16,384th character: long texts are sized in chunks of that)
    const output = `${'o'.repeat(16_383)}\u{1f600}${'o'.repeat(5000)}`;
    const marker = `${TRUNCATION_MARKER}: ${jsonBytes(output)} bytes of JSON]`;
    const results = Array.from({ length: 55 }, (_, i) =>
      gateEvent(
        eventOf('tool.finished', {
          toolCallId: 'tc-1',
          toolName: 't'.repeat(938 + i),
          output,
          failed: false,
        }),
        MIN_LIMIT_BYTES,
      ),
    );

    // Then each output is a preview of its JSON in the room left, and one fills it exactly
    results.forEach((result, i) => {
      expect(dataOf(result).toolName).toBe('t'.repeat(938 + i));
      const preview = dataOf(result).output as string;
      // (the marker alone when the room left is less than one character and the marker)
      expect(preview.startsWith(`"o`) || preview === marker).toBe(true);
      expect(preview.endsWith(marker)).toBe(true);
    });
    expect(results.map((result) => result.byteLength)).toContain(budget);
  });
});

describe('gateEvent: where the passes stop', () => {
  it('keeps metadata of exactly its share as the same object, and clamps one a byte over it', () => {
    // Given metadata of exactly 1/8 of the budget, then one byte more
    const allowance = Math.floor((4096 - STAMP_RESERVE_BYTES) / 8);
    const sized = (bytes: number) => ({ note: 'n'.repeat(bytes - jsonBytes({ note: '' })) });
    const data = { messageId: 'msg-1', role: 'user', text: 'x'.repeat(10_000) };
    const atShare = sized(allowance);
    const overShare = sized(allowance + 1);

    // When events carrying them are gated
    const kept = gateEvent(eventOf('message.added', data, atShare), 4096);
    const clamped = gateEvent(eventOf('message.added', data, overShare), 4096);

    // Then the first is kept as it came, the second clamped and counted
    expect(jsonBytes(atShare)).toBe(allowance);
    expect(kept.event.metadata).toBe(atShare);
    expect(stampOf(kept).clampedParts).toBe(1);
    expect(clampedPrefix(overShare.note, clamped.event.metadata.note as string)).toBeGreaterThan(
      MIN_CLAMP_CHARS,
    );
    expect(stampOf(clamped).clampedParts).toBe(2);
  });

  it('clamps metadata to the floor beside many short values, rather than emptying it', () => {
    // Given 100 empty values beside 8 long ones that fit the share only at the floor
    const metadata: Data = Object.fromEntries(
      Array.from({ length: 100 }, (_, i) => [`s${String(i).padStart(2, '0')}`, '']),
    );
    for (let i = 0; i < 8; i += 1) metadata[`long${i}`] = `${i}`.padEnd(1000, '.');
    const data = { messageId: 'msg-1', role: 'user', text: 'x'.repeat(100_000) };

    const result = gateEvent(eventOf('message.added', data, metadata), 16 * 1024);

    // Then every key is kept, the long values clamped near the floor
    expectRecordable(result, 16 * 1024);
    const reduced = result.event.metadata;
    expect(Object.keys(reduced)).toEqual(Object.keys(metadata));
    for (let i = 0; i < 8; i += 1) {
      const prefix = clampedPrefix(metadata[`long${i}`] as string, reduced[`long${i}`] as string);
      expect(prefix).toBeGreaterThanOrEqual(MIN_CLAMP_CHARS);
      expect(prefix).toBeLessThan(128);
    }
  });

  it.each([
    ['the metadata was clamped', {}, { traceId: 't-1', notes: 'n'.repeat(100_000) }],
    [
      'the client sent a stamp',
      {
        truncation: {
          originalByteLength: 1,
          limitBytes: 1,
          omittedMessageCount: 0,
          clampedParts: 0,
        },
      },
      {},
    ],
    ['small tools come along', { tools: [{ name: 'search' }] }, {}],
  ])('drops no more messages than needed when %s', (_case, extra, metadata) => {
    // Given 1,000 short messages
    const messages = Array.from({ length: 1000 }, (_, i) => ({
      role: 'user',
      content: `message ${i} `.padEnd(60, '.'),
    }));
    const data = { callId: 'call-1', model: 'm', messages, ...extra };
    const event = eventOf('model.call', data, metadata);

    const result = gateEvent(event, 16 * 1024);

    // Then the newest messages are kept, and one more would not have fitted
    expectRecordable(result, 16 * 1024);
    const stamp = stampOf(result);
    expect(dataOf(result).messages).toEqual(messages.slice(stamp.omittedMessageCount));
    expect(stamp.omittedMessageCount).toBeLessThan(1000);
    expect(result.byteLength + jsonBytes(messages[0]) + 1).toBeGreaterThan(
      16 * 1024 - STAMP_RESERVE_BYTES,
    );
  });

  it('does not force the texts beside a huge image to the floor', () => {
    const image = { type: 'image', data: 'iVBORw0KGgo'.repeat(30_000) };
    const text = 'The order shipped. '.repeat(1000);
    const event = eventOf('model.call', {
      callId: 'c',
      model: 'm',
      messages: [{ role: 'user', content: [image, { type: 'text', text }] }],
    });

    const result = gateEvent(event, 64 * 1024);

    expectRecordable(result, 64 * 1024);
    const [kept] = dataOf(result).messages as { content: Part[] }[];
    expect(kept.content[0]).toEqual({
      type: 'text',
      text: `[omitted image part of ${jsonBytes(image)} bytes]`,
    });
    expect(kept.content[1].text).toBe(text);
  });

  it('keeps a non-text part of 64 bytes at the floor, and replaces one of 65', () => {
    // Given model calls that must drop messages, the newest holding a small image part
    // (beside a text 23 characters over the floor, which clamped would take as many bytes:
    // the marker, "…[truncated 23 chars]", takes what it cuts)
    const notWorthClamping = { type: 'text', text: 'x'.repeat(MIN_CLAMP_CHARS + 23) };
    const partOf = (bytes: number) => {
      const part = { type: 'image', data: '' };
      return { ...part, data: 'i'.repeat(bytes - jsonBytes(part)) };
    };
    const gated = (part: Part) => {
      const older = Array.from({ length: 400 }, (_, i) => ({ role: 'user', content: `m${i}` }));
      const messages = [...older, { role: 'user', content: [part, notWorthClamping] }];
      return gateEvent(eventOf('model.call', { callId: 'c', model: 'm', messages }), 4096);
    };
    const small = partOf(MIN_CLAMP_CHARS);
    const large = partOf(MIN_CLAMP_CHARS + 1);

    const keptSmall = (dataOf(gated(small)).messages as { content: Part[] }[]).at(-1)!;
    const keptLarge = (dataOf(gated(large)).messages as { content: Part[] }[]).at(-1)!;

    expect(stampOf(gated(small)).omittedMessageCount).toBeGreaterThan(0);
    expect(keptSmall.content[0]).toBe(small);
    expect(keptSmall.content[1]).toBe(notWorthClamping);
    expect(keptLarge.content[0]).toEqual({
      type: 'text',
      text: `[omitted image part of ${MIN_CLAMP_CHARS + 1} bytes]`,
    });
  });

  it('keeps tool stubs of exactly 1/16 of the budget when the pass cap is smaller, and drops larger ones', () => {
    // Given 20 long messages that must be clamped far below the stubs' size, and tools whose
    // stubs take exactly the allowance, then one byte more
    const limit = 15_616 + STAMP_RESERVE_BYTES;
    const allowance = Math.floor((limit - STAMP_RESERVE_BYTES) / 16);
    const stubsOf = (bytes: number) => {
      const names = Array.from({ length: 13 }, (_, i) => `tool_${i}`.padEnd(60, 'x'));
      const last = bytes - jsonBytes(names.map((name) => ({ name }))) - jsonBytes({ name: '' }) - 1;
      return [...names, 'y'.repeat(last)].map((name) => ({ name, description: 'd'.repeat(5000) }));
    };
    const gated = (tools: unknown[]) => {
      const messages = Array.from({ length: 20 }, () => ({
        role: 'user',
        content: 'z'.repeat(100_000),
      }));
      return gateEvent(eventOf('model.call', { callId: 'c', model: 'm', messages, tools }), limit);
    };
    const exact = stubsOf(allowance);
    const over = stubsOf(allowance + 1);

    const kept = gated(exact);
    const dropped = gated(over);

    expectRecordable(kept, limit);
    expect(jsonBytes(dataOf(kept).tools as unknown[])).toBe(allowance);
    expect(dataOf(kept).tools).toEqual(exact.map(({ name }) => ({ name })));
    expect(dataOf(dropped)).not.toHaveProperty('tools');
    // (the messages were clamped to fewer characters than the stubs take)
    const [first] = dataOf(kept).messages as Message[];
    expect((first.content as string).length).toBeLessThan(allowance);
  });

  it('stubs a tool by name or function name, and one without a name as {}', () => {
    const text = 'The order shipped. '.repeat(500);
    const tools = [
      { name: 'search', description: 'd'.repeat(50_000) },
      { type: 'function', function: { name: 'lookup', parameters: {} } },
      { type: 'function', function: { parameters: { note: 'p'.repeat(50_000) } } },
    ];
    const event = eventOf('model.call', {
      callId: 'c',
      model: 'm',
      messages: [{ role: 'user', content: text }],
      tools,
    });

    const result = gateEvent(event, 64 * 1024);

    // (the tools are reduced in the passes, before any text beside them)
    expectRecordable(result, 64 * 1024);
    expect(dataOf(result).tools).toEqual([{ name: 'search' }, { name: 'lookup' }, {}]);
    expect(dataOf(result).messages).toEqual([{ role: 'user', content: text }]);
  });

  it('never clamps an agent name in the passes, only free text', () => {
    const agent = 'a'.repeat(200);
    const event = eventOf('run.started', {
      threadId: 'thread-1',
      agent,
      source: 'typed',
      goal: 'g'.repeat(100_000),
    });

    const result = gateEvent(event, 64 * 1024);

    expectRecordable(result, 64 * 1024);
    expect(dataOf(result).agent).toBe(agent);
    expect(clampedPrefix('g'.repeat(100_000), dataOf(result).goal as string)).toBeGreaterThan(0);
  });
});

describe('gateEvent: the guaranteed fit of every catalogue type', () => {
  it.each(EVENT_TYPES)('%s keeps what its schema requires when only the envelope fits', (type) => {
    // Given the type at its worst, with the longest id that still lets it fit the smallest
    // limit (only the guaranteed fit gets that far: the id is far longer than a UUID)
    const data = inflate(type, MIN_LIMIT_BYTES);
    const gated = (idLength: number) => {
      try {
        const id = 'i'.repeat(idLength);
        return gateEvent({ id, type, data, metadata: {} }, MIN_LIMIT_BYTES);
      } catch {
        return undefined;
      }
    };
    let fits = 36;
    let fails = MIN_LIMIT_BYTES;
    while (fails - fits > 1) {
      const mid = (fits + fails) >> 1;
      if (gated(mid) === undefined) fails = mid;
      else fits = mid;
    }
    const result = gated(fits)!;

    // Then the data keeps every required field, and has no problem but the id
    for (const key of REQUIRED[type]) expect(dataOf(result)).toHaveProperty(key);
    expect(problemsOf(result.event).filter((problem) => problem.field !== 'id')).toEqual([]);
    // A type whose worst data fits the smallest limit (a turn's: an id and an enum) is never
    // reduced: it is recorded whole, within the limit.
    if (!result.truncated) expect(dataOf(result)).toEqual(data);
    expect(result.byteLength).toBeLessThanOrEqual(
      result.truncated ? MIN_LIMIT_BYTES - STAMP_RESERVE_BYTES : MIN_LIMIT_BYTES,
    );
  });
});

describe('gateEvent: model.call at the floor', () => {
  it('stubs huge tools at the floor too, so that messages still fit beside them', () => {
    // Given 200 long messages that fit only clamped to the floor, and 100 KiB of tools
    const messages = Array.from({ length: 200 }, (_, i) => ({
      role: 'user',
      content: `${i}`.padEnd(1000, '.'),
    }));
    const tools = [{ name: 'search', description: 'd'.repeat(100_000) }];
    const event = eventOf('model.call', { callId: 'c', model: 'm', messages, tools });

    const result = gateEvent(event, 16 * 1024);

    // Then the tools are a stub, and the newest messages are kept at the floor
    expectRecordable(result, 16 * 1024);
    const data = dataOf(result);
    expect(data.tools).toEqual([{ name: 'search' }]);
    const stamp = stampOf(result);
    expect(stamp.omittedMessageCount).toBeGreaterThan(0);
    expect(stamp.omittedMessageCount).toBeLessThan(200);
    const kept = data.messages as Message[];
    expect(clampedPrefix(messages[199].content, kept.at(-1)!.content as string)).toBe(
      MIN_CLAMP_CHARS,
    );
    expect(stamp.clampedParts).toBe(kept.length + 1);
  });

  it('keeps clamped messages up to the budget to the byte, counting each in the stamp', () => {
    // Given model calls of long messages whose callId grows a character at a time
    const limit = 16 * 1024;
    const messages = Array.from({ length: 300 }, (_, i) => ({
      role: 'user',
      content: `${i}`.padEnd(100, '.'),
    }));
    const results = Array.from({ length: 90 }, (_, pad) =>
      gateEvent(
        eventOf('model.call', { callId: 'c'.repeat(1 + pad), model: 'm', messages }),
        limit,
      ),
    );

    // Then each keeps the newest messages at the floor, and one fills the budget exactly
    for (const result of results) {
      const kept = dataOf(result).messages as Message[];
      expect(kept.length).toBeGreaterThan(50);
      expect(stampOf(result).clampedParts).toBe(kept.length);
    }
    expect(results.map((result) => result.byteLength)).toContain(limit - STAMP_RESERVE_BYTES);
  });

  it('clamps the strings of an event of a type it has no rules for, rather than failing', () => {
    const note = 'x'.repeat(100_000);
    const event = eventOf('custom.note', { noteId: 'n-1', note });

    const result = gateEvent(event, 4096);

    expect(result.byteLength).toBeLessThanOrEqual(4096 - STAMP_RESERVE_BYTES);
    expect(dataOf(result).noteId).toBe('n-1');
    expect(clampedPrefix(note, dataOf(result).note as string)).toBeGreaterThan(MIN_CLAMP_CHARS);
  });

  it('keeps a tool input whole when reducing the metadata is enough', () => {
    const input = { query: 'refund', page: 3 };
    const event = eventOf(
      'tool.started',
      { toolCallId: 'tc-1', toolName: 'search', input },
      { samples: Array.from({ length: 20_000 }, (_, i) => i) },
    );

    const result = gateEvent(event, 16 * 1024);

    expectRecordable(result, 16 * 1024);
    expect(result.event.metadata).toEqual({});
    expect(dataOf(result).input).toBe(input);
  });

  it('previews a tool output beside an error text clamped to the floor', () => {
    // Given an output of numbers and an error text, both far over the smallest limit
    const errorText = 'e'.repeat(50_000);
    const event = eventOf('tool.finished', {
      toolCallId: 'tc-1',
      toolName: 'load',
      output: { rows: Array.from({ length: 10_000 }, (_, i) => i) },
      failed: true,
      errorText,
    });

    const result = gateEvent(event, MIN_LIMIT_BYTES);

    // Then the error text is at the floor and the output a preview in the room left
    expectRecordable(result, MIN_LIMIT_BYTES);
    const data = dataOf(result);
    expect(data.toolName).toBe('load');
    expect(clampedPrefix(errorText, data.errorText as string)).toBe(MIN_CLAMP_CHARS);
    expect((data.output as string).startsWith('{"rows":[0,1,2,')).toBe(true);
  });

  it('leaves a string that clamping would not shorten as it is, while clamping the others', () => {
    // Given an input of 8 long strings that fit only near the floor, and one of 87 characters
    // (clamped to 64 it would take as many bytes)
    const input: Data = { short: 's'.repeat(MIN_CLAMP_CHARS + 23) };
    for (let i = 0; i < 8; i += 1) input[`long${i}`] = `${i}`.padEnd(1000, '.');
    const event = eventOf('tool.started', { toolCallId: 'tc-1', toolName: 'load', input });

    const result = gateEvent(event, MIN_LIMIT_BYTES);

    expectRecordable(result, MIN_LIMIT_BYTES);
    const reduced = dataOf(result).input as Data;
    expect(reduced.short).toBe(input.short);
    for (let i = 0; i < 8; i += 1) {
      const prefix = clampedPrefix(input[`long${i}`] as string, reduced[`long${i}`] as string);
      expect(prefix).toBeGreaterThanOrEqual(MIN_CLAMP_CHARS);
    }
  });

  it('keeps every message at the floor when only the floor fits them all', () => {
    // Given 20 long messages that all fit clamped to 64 characters, and not to 97
    const messages = Array.from({ length: 20 }, (_, i) => ({
      role: 'user',
      content: `${i}`.padEnd(10_000, '.'),
    }));
    const event = eventOf('model.call', { callId: 'c', model: 'm', messages });

    // When it is gated to a limit with some bytes to spare at the floor (a budget of 2,832)
    const limit = 2832 + STAMP_RESERVE_BYTES;
    const result = gateEvent(event, limit);

    // Then every message is kept, each cut at the floor: the spare bytes stay unspent
    expectRecordable(result, limit);
    expect(result.byteLength).toBeLessThan(limit - STAMP_RESERVE_BYTES - 200);
    const kept = dataOf(result).messages as Message[];
    expect(stampOf(result).omittedMessageCount).toBe(0);
    kept.forEach((message, i) => {
      expect(clampedPrefix(messages[i].content, message.content as string)).toBe(MIN_CLAMP_CHARS);
    });
  });

  it('sizes the messages from the event exactly, beside clamped metadata, tools and a client stamp', () => {
    // Given model calls whose one long message is clamped by the first pass, its length
    // growing a character at a time across the length where that pass fills the budget
    const limit = 15_616 + STAMP_RESERVE_BYTES;
    const budget = limit - STAMP_RESERVE_BYTES;
    const forged = {
      originalByteLength: 1,
      limitBytes: 1,
      omittedMessageCount: 0,
      clampedParts: 0,
    };
    const results = Array.from({ length: 41 }, (_, i) => {
      const data = {
        callId: 'c',
        model: 'm',
        messages: [{ role: 'user', content: 'x'.repeat(26_690 + i) }],
        tools: [{ name: 'search' }],
        truncation: forged,
      };
      return gateEvent(eventOf('model.call', data, { notes: 'n'.repeat(50_000) }), limit);
    });

    // Then each keeps its message at half its length or more, and its tools; one fills the
    // budget to the byte, which only a size exact to the byte can reach
    results.forEach((result, i) => {
      const [kept] = dataOf(result).messages as Message[];
      expect(clampedPrefix('x'.repeat(26_690 + i), kept.content as string)).toBeGreaterThan(13_000);
      expect(dataOf(result).tools).toEqual([{ name: 'search' }]);
    });
    expect(results.map((result) => result.byteLength)).toContain(budget);
  });

  it('keeps a text that clamping would not shorten when reducing the metadata is enough', () => {
    // Given a text of 70 characters (cut to 64 it would grow) beside metadata far over its share
    const text = 't'.repeat(70);
    const event = eventOf(
      'message.added',
      { messageId: 'msg-1', role: 'user', text },
      { samples: Array.from({ length: 20_000 }, (_, i) => i) },
    );

    const result = gateEvent(event, 16 * 1024);

    // Then only the metadata is reduced
    expectRecordable(result, 16 * 1024);
    expect(dataOf(result).text).toBe(text);
    expect(stampOf(result).clampedParts).toBe(1);
  });
});
