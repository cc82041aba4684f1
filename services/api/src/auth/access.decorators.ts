import {
  applyDecorators,
  createParamDecorator,
  SetMetadata,
  type ExecutionContext,
} from '@nestjs/common';
import { RouteConfig } from '@nestjs/platform-fastify';
import type { FastifyRequest } from 'fastify';
import type { Scope } from '../config/config';
import type { Principal } from './principal';

export const ACCESS_KEY = 'runledger:access';
export type Access = { scope: Scope } | { public: true };

/**
 * The declaration is also the Fastify route's config, for what runs before Nest does: the
 * onRequest authentication and the body limit chosen by scope (http/request-guards.ts).
 */
const declareAccess = (access: Access) =>
  applyDecorators(SetMetadata(ACCESS_KEY, access), RouteConfig({ access }));

/** The scope a route needs. A route without an access declaration is refused (deny by default). */
export const RequireScope = (scope: Scope) => declareAccess({ scope });
/** Probes and scrapes: no key needed. */
export const Public = () => declareAccess({ public: true });

/** The access a Fastify route declared, from its config; undefined for a route that declared none. */
export function routeAccess(config: unknown): Access | undefined {
  const access = (config as { access?: Access } | undefined)?.access;
  return access !== undefined && ('public' in access || 'scope' in access) ? access : undefined;
}

export const CurrentPrincipal = createParamDecorator(
  (_: unknown, context: ExecutionContext): Principal => {
    const principal = context.switchToHttp().getRequest<FastifyRequest>().principal;
    if (!principal)
      throw new Error('CurrentPrincipal used on a route the AccessGuard did not authenticate');
    return principal;
  },
);
