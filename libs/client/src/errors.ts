import type { components } from './openapi';

export type ErrorBody = components['schemas']['ErrorBody'];

/** A non-2xx answer: the status, the stable `error` code and the whole body to act on. */
export class RunledgerError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody & Record<string, unknown>,
    readonly retryAfterSeconds?: number,
  ) {
    super(`runledger answered ${status} ${body.error}: ${body.message}`);
    this.name = 'RunledgerError';
  }

  get code(): string {
    return this.body.error;
  }
}

/**
 * A replay whose hash chain is broken: every recorded event was yielded, and then the
 * service's verdict named the first revision that does not verify.
 */
export class ChainBrokenError extends Error {
  constructor(readonly verdict: components['schemas']['AuditVerdict']) {
    super(
      `the hash chain of run ${verdict.runId} breaks at revision ${verdict.firstBrokenRevision}`,
    );
    this.name = 'ChainBrokenError';
  }
}
