import type { Scope } from '../config/config';

/** Who is calling: resolved once by the AccessGuard from the bearer key. */
export interface Principal {
  tenantId: string;
  scopes: ReadonlySet<Scope>;
  /** Names the key used, never revealing it: a prefix of its SHA-256. */
  keyId: string;
  /** The user this key is, when RUNLEDGER_API_KEYS names one. */
  user?: string;
}

/**
 * One API key, told apart across tenants (a key id is a prefix of the key's hash, listed per
 * tenant): what per-key limits count by.
 */
export function apiKeyOf(principal: Principal): string {
  return `${principal.tenantId}\u0000${principal.keyId}`;
}

/**
 * On whose behalf a request acts: a person (`user`), named by the key itself or by a trusted
 * gateway (`act-as`), or a key acting as itself (`service`: an agent runtime, a script).
 */
export interface Actor {
  kind: 'user' | 'service';
  /** The user's name exactly as sent or configured; `key:<keyId>` for a service. */
  name: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
    actor?: Actor;
  }
}
