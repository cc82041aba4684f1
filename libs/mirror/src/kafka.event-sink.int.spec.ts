/**
 * The Kafka sink against a broker that takes connections and never answers (a frozen
 * broker: SIGSTOP, a hung VM). The real broker's behaviour is in
 * services/api/src/mirror/mirror.kafka.spec.ts.
 */
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { KafkaEventSink } from './kafka.event-sink';

let server: Server;
const sockets: Socket[] = [];

beforeEach(async () => {
  server = createServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
});
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await new Promise((resolve) => server.close(resolve));
});

it('closes within its grace while a publish waits on a broker that never answers', async () => {
  const { port } = server.address() as AddressInfo;
  const sink = new KafkaEventSink({
    brokers: [`127.0.0.1:${port}`],
    topic: 'runledger.frozen',
    partitions: 1,
    requestTimeoutMs: 60_000,
    closeGraceMs: 300,
  });
  let settled = false;
  const publishing = sink
    .publish([{ eventId: 'e1', position: 1, key: 'r1', value: Buffer.from('{}'), headers: {} }])
    .finally(() => (settled = true));
  publishing.catch(() => undefined);
  await new Promise((r) => setTimeout(r, 200));
  expect(sockets.length).toBeGreaterThan(0);
  expect(settled).toBe(false);

  const started = Date.now();
  await sink.close();
  const tookMs = Date.now() - started;
  expect(tookMs).toBeGreaterThanOrEqual(250);
  expect(tookMs).toBeLessThan(2000);
  expect(settled).toBe(false);
});
