/**
 * The one error shape every route answers: `{ error, message, details? }` with a stable
 * machine-readable `error` code and a status listed in docs/api.md. A few refusals carry more
 * top-level fields that their contract names (the 413 of an oversize model call).
 *
 * An error body stays small whatever the input: a list of problems keeps its first
 * MAX_PROBLEMS, and `problemCount` says how many there were; a message, or a problem's text,
 * that quotes the client (a 50,000-character key, a path) is cut, saying how long it was.
 */
import { PositionNotReachedError } from '@runledger/event-store';

export const MAX_PROBLEMS = 100;
/** Longest message an error carries, in characters. */
export const MAX_MESSAGE_CHARS = 1024;
/** Longest text of one listed problem (its field path, its message), in characters. */
export const MAX_PROBLEM_TEXT_CHARS = 256;

/** `text` cut to `max` characters (never between the halves of a surrogate pair), saying so. */
export function clipText(text: string, max: number): string {
  if (text.length <= max) return text;
  const code = text.charCodeAt(max - 1);
  const end = code >= 0xd800 && code <= 0xdbff ? max - 1 : max;
  return `${text.slice(0, end)}… (${text.length} characters)`;
}

function clipProblem(problem: unknown): unknown {
  if (typeof problem === 'string') return clipText(problem, MAX_PROBLEM_TEXT_CHARS);
  if (typeof problem !== 'object' || problem === null || Array.isArray(problem)) return problem;
  return Object.fromEntries(
    Object.entries(problem).map(([key, value]) => [
      key,
      typeof value === 'string' ? clipText(value, MAX_PROBLEM_TEXT_CHARS) : value,
    ]),
  );
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
    const capped = Array.isArray(details) && details.length > MAX_PROBLEMS;
    const clipped = clipText(message, MAX_MESSAGE_CHARS);
    super(
      capped
        ? `${clipped} (the first ${MAX_PROBLEMS} of ${details.length} problems are listed)`
        : clipped,
    );
    this.name = 'ApiError';
    this.details = Array.isArray(details)
      ? details.slice(0, MAX_PROBLEMS).map(clipProblem)
      : details;
    this.fields = capped ? { ...fields, problemCount: details.length } : fields;
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
