/**
 * Who is calling, settled as soon as a request is routed (Fastify `onRequest`), before any
 * byte of its body is read: a request without a recognised key is answered 401 here and
 * never reaches a body parser, so a stranger's 16 MiB body costs a header lookup. The
 * principal is attached to the request; which scope a route needs stays the AccessGuard's
 * decision. Routes declared @Public() (probes, metrics) and the API docs need no key.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Metrics } from '@runledger/observability';
import { ApiError } from '../http/api-error';
import { lingerUnread } from '../http/request-guards';
import { routeAccess } from './access.decorators';
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
    if (isPublic(request)) {
      done();
      return;
    }
    try {
      request.principal = policy.identify(request);
    } catch (error) {
      if (!(error instanceof ApiError)) {
        done(error instanceof Error ? error : new Error(String(error)));
        return;
      }
      metrics.rejections.inc({ reason: error.error });
      // The body is never parsed: node:http discards it, for a while.
      lingerUnread(request, reply);
      void reply.code(error.status).header('WWW-Authenticate', 'Bearer').send(error.body());
      return;
    }
    done();
  });
}
