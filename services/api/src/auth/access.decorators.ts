import { createParamDecorator, SetMetadata, type ExecutionContext } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import type { Scope } from '../config/config';
import type { Principal } from './principal';

export const ACCESS_KEY = 'runledger:access';
export type Access = { scope: Scope } | { public: true };

/** The scope a route needs. A route without an access declaration is refused (deny by default). */
export const RequireScope = (scope: Scope) => SetMetadata(ACCESS_KEY, { scope } satisfies Access);
/** Probes and scrapes: no key needed. */
export const Public = () => SetMetadata(ACCESS_KEY, { public: true } satisfies Access);

export const STREAM_TOKEN_KEY = 'runledger:stream-token';
/**
 * A stream a browser may open with `?token=` (a stream token for this route's run or thread)
 * instead of an Authorization header. `param` names the path parameter the token must match.
 */
export const AcceptsStreamToken = (kind: 'run' | 'thread', param: string) =>
  SetMetadata(STREAM_TOKEN_KEY, { kind, param });

export const CurrentPrincipal = createParamDecorator(
  (_: unknown, context: ExecutionContext): Principal => {
    const principal = context.switchToHttp().getRequest<FastifyRequest>().principal;
    if (!principal)
      throw new Error('CurrentPrincipal used on a route the AccessGuard did not authenticate');
    return principal;
  },
);
