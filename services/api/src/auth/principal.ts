import type { Scope } from '../config/config';

/** Who is calling: resolved once by the AccessGuard from the bearer key. */
export interface Principal {
  tenantId: string;
  scopes: ReadonlySet<Scope>;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}
