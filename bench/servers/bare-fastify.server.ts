/**
 * The HTTP baseline: a bare Fastify 5 server, no Nest, no store. Its one route is the
 * append route's path and method; it parses the JSON body with the same parser options as
 * runledger's adapter (body limit, prototype-poisoning checks) and answers 201 `{}`.
 */
import Fastify from 'fastify';
import type { AddressInfo } from 'node:net';
import { serveParent } from '../lib/child-server';

async function main(): Promise<void> {
  const app = Fastify({
    bodyLimit: 33_554_432,
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
  });
  app.post('/v1/runs/:runId/events', async (_request, reply) => {
    reply.code(201);
    return {};
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  serveParent((app.server.address() as AddressInfo).port, () => app.close());
}

main().catch((error: unknown) => {
  console.error('bare fastify bench server failed:', error);
  process.exit(1);
});
