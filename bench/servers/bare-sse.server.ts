/**
 * The SSE fan-out baseline: a bare node:http server, no framework, no store, no access
 * check. `GET /stream` holds a response open with runledger's SSE headers and start frame;
 * `POST /publish` takes an append body (`{ events: [{ type, data }] }`), gives each event a
 * position, serialises it once into a frame shaped like runledger's (same fields, same
 * metadata keys, hashes of the same length) and writes that Buffer to every open stream,
 * then answers like an append: `{ position, events: [{ position }] }`.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serveParent } from '../lib/child-server';

const HEADERS = {
  'Content-Type': 'text/event-stream; charset=utf-8',
  'Cache-Control': 'no-cache',
  Connection: 'keep-alive',
  'X-Accel-Buffering': 'no',
};
const HASH = 'f'.repeat(64);

async function body(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

async function main(): Promise<void> {
  const clients = new Set<ServerResponse>();
  let position = 0;
  let revision = 0;
  const server = createServer((request, response) => {
    if (request.method === 'GET' && request.url?.startsWith('/stream')) {
      response.writeHead(200, HEADERS);
      response.write(`id: ${position}\n\n`);
      clients.add(response);
      response.on('close', () => clients.delete(response));
      return;
    }
    if (request.method === 'POST' && request.url === '/publish') {
      void body(request).then((text) => {
        const { events } = JSON.parse(text) as { events: { type: string; data: unknown }[] };
        const recorded = events.map((event) => {
          position += 1;
          const frame = Buffer.from(
            `id: ${position}\nevent: ${event.type}\ndata: ${JSON.stringify({
              id: randomUUID(),
              type: event.type,
              revision,
              position,
              recordedAt: new Date().toISOString(),
              data: event.data,
              metadata: {
                tenantId: 'bench',
                runId: 'bench-sse-run',
                threadId: 'bench-thread',
                prevHash: HASH,
                hash: HASH,
              },
            })}\n\n`,
          );
          revision += 1;
          for (const client of clients) client.write(frame);
          return { position };
        });
        response.writeHead(201, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ position, events: recorded }));
      });
      return;
    }
    response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  serveParent((server.address() as AddressInfo).port, async () => {
    for (const client of clients) client.end();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
}

main().catch((error: unknown) => {
  console.error('bare SSE bench server failed:', error);
  process.exit(1);
});
