/**
 * Who is calling, settled as soon as a request is routed (Fastify `onRequest`), before any
 * byte of its body is read: a request without a recognised key is answered 401 here, and a
 * key without the scope the route declares 403, and neither reaches a body parser, so a
 * stranger's 16 MiB body costs a header lookup; so is an acting user the key may not name
 * (or a malformed one). The decision is the AccessGuard's own (AccessPolicy, actorOf), taken
 * early; the guard still settles stream tokens.
 * Routes declared @Public() (probes, metrics) and the API docs need no key.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Metrics } from '@runledger/observability';
import { ApiError } from '../http/api-error';
import { lingerUnread } from '../http/request-guards';
import { routeAccess, usesStreamToken } from './access.decorators';
import { actorOf } from './acting-user';
import type { AccessPolicy } from './access.guard';

function isPublic(request: FastifyRequest): boolean {
  const access = routeAccess(request.routeOptions.config);
  return access !== undefined && 'public' in access;
}

export function authenticateRequests(
  fastify: FastifyInstance,
  policy: AccessPolicy,
  metrics: Metrics,
): void {
  fastify.addHook('onRequest', (request, reply, done) => {
    // A browser's stream token is checked by the AccessGuard against the route's run or
    // thread; a bad one is answered 401 there, before anything is streamed.
    if (isPublic(request) || usesStreamToken(request)) {
      done();
      return;
    }
    try {
      // The guard's own decision (AccessPolicy.principalFor), taken before the body: a key
      // without the route's scope is refused unread, not after its 32 MiB were parsed.
      const access = routeAccess(request.routeOptions.config);
      const principal =
        access !== undefined && 'scope' in access
          ? policy.principalFor(request, access.scope)
          : policy.identify(request);
      request.principal = principal;
      // Who the key acts for is a header too: a user it may not name, or a malformed one, is
      // refused unread as well.
      request.actor = actorOf(principal, request.raw.headersDistinct);
    } catch (error) {
      if (!(error instanceof ApiError)) {
        done(error instanceof Error ? error : new Error(String(error)));
        return;
      }
      metrics.rejections.inc({ reason: error.error });
      // The body is never parsed: node:http discards it, for a while.
      lingerUnread(request, reply);
      // A challenge for a missing or unknown key; a known key without the scope is told so.
      if (error.status === 401) void reply.header('WWW-Authenticate', 'Bearer');
      void reply.code(error.status).send(error.body());
      return;
    }
    done();
  });
}
