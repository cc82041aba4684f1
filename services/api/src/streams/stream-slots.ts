/**
 * How many Server-Sent Events streams are open at once, per API key and per tenant: each
 * open stream holds a socket and up to SSE_MAX_BUFFER_BYTES, so their number is what bounds
 * the memory one caller can pin. Beyond a cap the stream is refused 429 before it starts.
 */
import { Inject, Injectable } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { apiKeyOf, type Principal } from '../auth/principal';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';

@Injectable()
export class StreamSlots {
  private readonly byKey = new Map<string, number>();
  private readonly byTenant = new Map<string, number>();

  constructor(@Inject(APP_CONFIG) private readonly config: AppConfig) {}

  /**
   * Takes a slot for the caller of `request`, or refuses 429, giving back the call its rate
   * limit counted (a client retrying as Retry-After invites would otherwise spend its budget
   * for thread reads on streams it never got). The returned release is safe to call twice.
   */
  acquire(principal: Principal, request: FastifyRequest): () => void {
    const { maxStreamsPerKey, maxStreamsPerTenant } = this.config.sse;
    const key = apiKeyOf(principal);
    const refused =
      (this.byKey.get(key) ?? 0) >= maxStreamsPerKey
        ? `this API key has ${maxStreamsPerKey} streams open (SSE_MAX_STREAMS_PER_KEY)`
        : (this.byTenant.get(principal.tenantId) ?? 0) >= maxStreamsPerTenant
          ? `this tenant has ${maxStreamsPerTenant} streams open (SSE_MAX_STREAMS_PER_TENANT)`
          : null;
    if (refused !== null) {
      request.refundRateLimit?.();
      throw tooMany(refused);
    }
    add(this.byKey, key, 1);
    add(this.byTenant, principal.tenantId, 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      add(this.byKey, key, -1);
      add(this.byTenant, principal.tenantId, -1);
    };
  }

  /** Streams open now for a tenant (for tests of the release). */
  openFor(tenantId: string): number {
    return this.byTenant.get(tenantId) ?? 0;
  }
}

function add(counts: Map<string, number>, name: string, delta: number): void {
  const next = (counts.get(name) ?? 0) + delta;
  if (next === 0) counts.delete(name);
  else counts.set(name, next);
}

function tooMany(what: string): ApiError {
  return new ApiError(
    429,
    'too_many_streams',
    `${what}; close one before opening another. Nothing was started`,
  );
}
