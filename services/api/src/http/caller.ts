/**
 * Who is calling a client-surface route: the tenant of the key and the acting user as the
 * rest of the API derives it (`u:<name>` from X-Runledger-User, else `k:<key id>`).
 */
import type { FastifyRequest } from 'fastify';
import { actingUser, USER_HEADER } from '../auth/acting-user';

export interface ClientCaller {
  tenantId: string;
  user: string;
}

/** For routes behind the AccessGuard, which has set the principal. */
export function clientCaller(request: FastifyRequest): ClientCaller {
  const principal = request.principal;
  if (!principal)
    throw new Error('clientCaller used on a route the AccessGuard did not authenticate');
  return {
    tenantId: principal.tenantId,
    user: actingUser(principal, request.headers[USER_HEADER]),
  };
}
