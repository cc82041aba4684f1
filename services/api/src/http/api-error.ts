/**
 * The one error shape every route answers: `{ error, message, details? }` with a stable
 * machine-readable `error` code and a status listed in docs/api.md. A few refusals carry
 * more top-level fields that their contract names (the 413 of an oversize model call).
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
    readonly details?: unknown,
    readonly fields: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'ApiError';
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
