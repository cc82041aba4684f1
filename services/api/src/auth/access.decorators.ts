import {
  applyDecorators,
  createParamDecorator,
  SetMetadata,
  type ExecutionContext,
} from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import type { Scope } from '../config/config';
import { AddRouteConfig } from '../http/route-config';
import type { Actor, Principal } from './principal';

export const ACCESS_KEY = 'runledger:access';
export type Access = { scope: Scope } | { public: true };

/**
 * The declaration is also the Fastify route's config, for what runs before Nest does: the
 * onRequest authentication and the body limit chosen by scope (http/request-guards.ts).
 */
const declareAccess = (access: Access) =>
  applyDecorators(SetMetadata(ACCESS_KEY, access), AddRouteConfig({ access }));

/** The scope a route needs. A route without an access declaration is refused (deny by default). */
export const RequireScope = (scope: Scope) => declareAccess({ scope });
/** Probes and scrapes: no key needed. */
export const Public = () => declareAccess({ public: true });

/** The access a Fastify route declared, from its config; undefined for a route that declared none. */
export function routeAccess(config: unknown): Access | undefined {
  const access = (config as { access?: Access } | undefined)?.access;
  return access !== undefined && ('public' in access || 'scope' in access) ? access : undefined;
}

export const STREAM_TOKEN_KEY = 'runledger:stream-token';
export interface StreamTokenRoute {
  kind: 'run' | 'thread';
  /** The path parameter the token's id must match. */
  param: string;
}

/**
 * A stream that needs the `read` scope, or, from a browser's EventSource that cannot send
 * an Authorization header, a stream token for this route's run or thread as `?token=`.
 */
export const ReadOrStreamToken = (kind: 'run' | 'thread', param: string) =>
  applyDecorators(
    SetMetadata(ACCESS_KEY, { scope: 'read' } satisfies Access),
    SetMetadata(STREAM_TOKEN_KEY, { kind, param } satisfies StreamTokenRoute),
    AddRouteConfig({ access: { scope: 'read' }, streamToken: { kind, param } }),
  );

/** True when a request may authenticate with `?token=`: such a route, and no Authorization. */
export function usesStreamToken(request: FastifyRequest): boolean {
  const route = (request.routeOptions.config as { streamToken?: StreamTokenRoute } | undefined)
    ?.streamToken;
  const token = (request.query as Record<string, unknown> | undefined)?.token;
  return (
    route !== undefined && request.headers.authorization === undefined && typeof token === 'string'
  );
}

export const CurrentPrincipal = createParamDecorator(
  (_: unknown, context: ExecutionContext): Principal => {
    const principal = context.switchToHttp().getRequest<FastifyRequest>().principal;
    if (!principal)
      throw new Error('CurrentPrincipal used on a route the AccessGuard did not authenticate');
    return principal;
  },
);

/** The acting user the AccessGuard settled (`actorOf`): a user, or the key acting as itself. */
export const CurrentActor = createParamDecorator((_: unknown, context: ExecutionContext): Actor => {
  const actor = context.switchToHttp().getRequest<FastifyRequest>().actor;
  if (!actor) throw new Error('CurrentActor used on a route the AccessGuard did not authenticate');
  return actor;
});
