/**
 * The one error shape every route answers: `{ error, message, details? }` with a stable
 * machine-readable `error` code and a status listed in docs/api.md. A few refusals carry more
 * top-level fields that their contract names (the 413 of an oversize model call).
 *
 * An error body stays within ERROR_BODY_MAX_BYTES whatever the input: a message, or a
 * problem's text, that quotes the client (a 50,000-character key, a path) is cut, saying how
 * long it was, and a list of problems keeps as many of its first problems as fit, with
 * `problemCount` saying how many there were. Sizes are counted as the body is sent: UTF-8 of
 * the JSON, escapes included, so a text of control characters or CJK is not six or three
 * times its length on the wire.
 */
import { PositionNotReachedError } from '@runledger/event-store';

/** The most bytes an error body takes (its JSON, UTF-8): one memory page. */
export const ERROR_BODY_MAX_BYTES = 4096;
/** Longest message an error carries, in bytes of its JSON string. */
export const MAX_MESSAGE_BYTES = 1024;
/** Longest text of one listed problem (its field path, its message), in bytes of its JSON string. */
export const MAX_PROBLEM_TEXT_BYTES = 256;
/**
 * Room kept for what a cut list adds: the message's "(the first N of M problems are listed)"
 * and the `problemCount` member.
 */
const CUT_LIST_NOTE_BYTES = 96;

/** The bytes of character `code` inside a JSON string, as JSON.stringify writes it in UTF-8. */
function jsonCharBytes(code: number): number {
  if (code === 0x22 || code === 0x5c) return 2;
  if (code < 0x20)
    return code === 0x08 || code === 0x09 || code === 0x0a || code === 0x0c || code === 0x0d
      ? 2
      : 6;
  if (code < 0x80) return 1;
  if (code < 0x800) return 2;
  return 3;
}

/**
 * `text` cut so that its JSON string takes at most `maxBytes` (never between the halves of a
 * surrogate pair), saying how long it was in characters.
 */
export function clipText(text: string, maxBytes: number): string {
  let bytes = 0;
  for (let i = 0; i < text.length; i += 1) {
    const code = text.charCodeAt(i);
    const next = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
    const pair = code >= 0xd800 && code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff;
    // A pair is 4 bytes of UTF-8; a lone surrogate is written as a 6-byte \u escape.
    const size = pair ? 4 : code >= 0xd800 && code <= 0xdfff ? 6 : jsonCharBytes(code);
    if (bytes + size > maxBytes) return `${text.slice(0, i)}… (${text.length} characters)`;
    bytes += size;
    if (pair) i += 1;
  }
  return text;
}

function clipProblem(problem: unknown): unknown {
  if (typeof problem === 'string') return clipText(problem, MAX_PROBLEM_TEXT_BYTES);
  if (typeof problem !== 'object' || problem === null || Array.isArray(problem)) return problem;
  return Object.fromEntries(
    Object.entries(problem).map(([key, value]) => [
      key,
      typeof value === 'string' ? clipText(value, MAX_PROBLEM_TEXT_BYTES) : value,
    ]),
  );
}

function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? 'null');
}

interface Shaped {
  message: string;
  details?: unknown;
  fields: Record<string, unknown>;
}

/** The message, problems and fields of an error body, within ERROR_BODY_MAX_BYTES. */
function shape(
  error: string,
  message: string,
  details: unknown,
  fields: Record<string, unknown>,
): Shaped {
  const clipped = clipText(message, MAX_MESSAGE_BYTES);
  if (!Array.isArray(details)) return { message: clipped, details, fields };
  // The body without problems, and a cut list's note: what is left is the problems' room.
  let used = jsonBytes({ error, message: clipped, ...fields, details: [] }) + CUT_LIST_NOTE_BYTES;
  const listed: unknown[] = [];
  for (const problem of details) {
    const kept = clipProblem(problem);
    const bytes = jsonBytes(kept) + 1;
    if (used + bytes > ERROR_BODY_MAX_BYTES) break;
    listed.push(kept);
    used += bytes;
  }
  if (listed.length === details.length) return { message: clipped, details: listed, fields };
  return {
    message: `${clipped} (the first ${listed.length} of ${details.length} problems are listed)`,
    details: listed,
    fields: { ...fields, problemCount: details.length },
  };
}

export class ApiError extends Error {
  readonly details?: unknown;
  readonly fields: Record<string, unknown>;

  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
    details?: unknown,
    fields: Record<string, unknown> = {},
  ) {
    const shaped = shape(error, message, details, fields);
    super(shaped.message);
    this.name = 'ApiError';
    this.details = shaped.details;
    this.fields = shaped.fields;
  }

  body(): Record<string, unknown> {
    return {
      error: this.error,
      message: this.message,
      ...this.fields,
      ...(this.details === undefined ? {} : { details: this.details }),
    };
  }
}

/** What follows the log into a read model: resolves once past `minPosition`, or rejects. */
export interface ReadModelFollower {
  waitFor(minPosition: number, timeoutMs: number): Promise<void>;
}

/**
 * A read-your-writes wait on a read model (`what`): when it does not pass `minPosition` within
 * `waitMs`, 503 `projection_behind` with where it stood. Every such wait answers alike.
 */
export async function awaitReadModel(
  what: string,
  follower: ReadModelFollower,
  minPosition: number,
  waitMs: number,
): Promise<void> {
  try {
    await follower.waitFor(minPosition, waitMs);
  } catch (error) {
    if (!(error instanceof PositionNotReachedError)) throw error;
    throw new ApiError(
      503,
      'projection_behind',
      `${what} has not reached position ${minPosition} within ${waitMs} ms; retry`,
      undefined,
      { position: error.position, minPosition },
    );
  }
}
