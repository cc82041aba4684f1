/**
 * The request a piece of work is done for, carried through its async calls
 * (AsyncLocalStorage): the service's log lines name it (JsonLinesLogger) without every call
 * that logs passing it on.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { FastifyInstance } from 'fastify';

export interface RequestContext {
  requestId: string;
}

const storage = new AsyncLocalStorage<RequestContext>();

/** The request the current work is for, if any. */
export function currentRequest(): RequestContext | undefined {
  return storage.getStore();
}

/**
 * Enters each request's context as it is routed: the hooks, the body's parse (a slow body's
 * parts included) and the handler after it run in it.
 */
export function carryRequestContext(fastify: FastifyInstance): void {
  fastify.addHook('onRequest', (request, _reply, done) => {
    storage.run({ requestId: request.id }, done);
  });
}
