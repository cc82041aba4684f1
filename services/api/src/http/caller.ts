/**
 * Who is calling a client-surface route: the tenant of the key and the acting user the
 * AccessGuard resolved (`actorOf`): a user's name, or `key:<key id>` for a key acting as itself.
 */
import type { FastifyRequest } from 'fastify';

export interface ClientCaller {
  tenantId: string;
  user: string;
}

/** For routes behind the AccessGuard, which has set the principal. */
export function clientCaller(request: FastifyRequest): ClientCaller {
  const { principal, actor } = request;
  if (!principal || !actor)
    throw new Error('clientCaller used on a route the AccessGuard did not authenticate');
  return { tenantId: principal.tenantId, user: actor.name };
}
