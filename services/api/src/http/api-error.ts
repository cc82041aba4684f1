/**
 * The one error shape every route answers: `{ error, message, details }` with a stable
 * machine-readable `error` code and a status from ../shared/DESIGN.md.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = 'ApiError';
  }

  body(): { error: string; message: string; details?: unknown } {
    return this.details === undefined
      ? { error: this.error, message: this.message }
      : { error: this.error, message: this.message, details: this.details };
  }
}
