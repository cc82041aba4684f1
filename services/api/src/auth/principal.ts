import type { Scope } from '../config/config';

/** Who is calling: resolved once by the AccessGuard from the bearer key. */
export interface Principal {
  tenantId: string;
  scopes: ReadonlySet<Scope>;
  /** Names the key used, never revealing it: a prefix of its SHA-256. */
  keyId: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}
