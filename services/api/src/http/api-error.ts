/**
 * The one error shape every route answers: `{ error, message, details? }` with a stable
 * machine-readable `error` code and a status listed in docs/api.md. A few refusals carry more
 * top-level fields that their contract names (the 413 of an oversize model call).
 *
 * An error body stays small whatever the input: a list of problems keeps its first
 * MAX_PROBLEMS, and `problemCount` says how many there were.
 */
import { PositionNotReachedError } from '@runledger/event-store';

export const MAX_PROBLEMS = 100;

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
    super(
      capped
        ? `${message} (the first ${MAX_PROBLEMS} of ${details.length} problems are listed)`
        : message,
    );
    this.name = 'ApiError';
    this.details = capped ? details.slice(0, MAX_PROBLEMS) : details;
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

/**
 * A read-your-writes wait on a read model (`what`): when it does not pass `minPosition` within
 * the read wait, 503 `projection_behind` with where it stood. Every such wait answers alike.
 */
export async function awaitReadModel(
  what: string,
  wait: Promise<void>,
  minPosition: number,
  waitMs: number,
): Promise<void> {
  try {
    await wait;
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
