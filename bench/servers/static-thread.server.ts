/**
 * The thread-query baseline: a bare Fastify 5 server, no Nest, no auth, no store. It
 * answers `GET /v1/threads/:threadId` and `GET /v1/threads/:threadId/voice-seed` with the
 * very bytes runledger answered for them, precomputed (BENCH_BODIES_FILE: a JSON file
 * `{ threads: { id: body }, seeds: { id: body } }`), so what it costs is routing and sending.
 */
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { serveParent } from '../lib/child-server';

interface Bodies {
  threads: Record<string, string>;
  seeds: Record<string, string>;
}

async function main(): Promise<void> {
  const file = process.env.BENCH_BODIES_FILE;
  if (!file) throw new Error('BENCH_BODIES_FILE must be set');
  const bodies = JSON.parse(readFileSync(file, 'utf8')) as Bodies;
  const threads = new Map(Object.entries(bodies.threads));
  const seeds = new Map(Object.entries(bodies.seeds));
  const app = Fastify();
  const answer =
    (map: Map<string, string>) =>
    async (request: FastifyRequest<{ Params: { threadId: string } }>, reply: FastifyReply) => {
      const body = map.get(request.params.threadId);
      reply.type('application/json; charset=utf-8');
      if (body === undefined) return reply.code(404).send('{"error":"thread_not_found"}');
      return reply.send(body);
    };
  app.get<{ Params: { threadId: string } }>('/v1/threads/:threadId', answer(threads));
  app.get<{ Params: { threadId: string } }>('/v1/threads/:threadId/voice-seed', answer(seeds));
  await app.listen({ port: 0, host: '127.0.0.1' });
  serveParent((app.server.address() as AddressInfo).port, () => app.close());
}

main().catch((error: unknown) => {
  console.error('static thread bench server failed:', error);
  process.exit(1);
});
