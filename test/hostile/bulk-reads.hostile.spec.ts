/**
 * Many bulk reads (pages of a run's events, replays, audits, exports) from one key at once,
 * by a client that stops reading their answers. Each such answer holds what it read (up to
 * 16 MiB of JSON a page) until its socket takes it or the send timeout cuts it off, and
 * nothing bounded how many one key had at once: 40 stalled pages of 16 MiB took the service
 * from 240 MiB to 1.38 GB of RSS.
 * Now a key has BULK_READS_PER_KEY of them in progress, the next ones wait their turn (4× as
 * many), and past that the key is refused 429 `too_many_bulk_reads`.
 */
import { connect, type Socket } from 'node:net';
import type { RunningService } from '../support/service-process';
import { request } from '../support/service-process';
import { KEY_2, metric, READER, startHostileService, startLargeRun } from './hostile-support';

const PER_KEY = 2;
const WAITING = 4 * PER_KEY;
const SEND_TIMEOUT_MS = 3000;
const EVENTS = 200;
const TEXT_CHARS = 60_000;
const PAGE = '/v1/runs/big/events?limit=1000';

let service: RunningService;
const sockets: Socket[] = [];

beforeAll(async () => {
  service = await startHostileService({
    BULK_READS_PER_KEY: String(PER_KEY),
    SSE_SEND_TIMEOUT_MS: String(SEND_TIMEOUT_MS),
  });
  await startLargeRun(service, 'big', EVENTS, TEXT_CHARS);
}, 60_000);

afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await service.kill();
});

/** Asks for `path` with `key` on a socket of its own that never reads a byte of the answer. */
function stalled(path: string, key: string): Socket {
  const socket = connect(service.port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`);
  socket.pause();
  sockets.push(socket);
  return socket;
}

async function bulkReads(): Promise<{ running: number; waiting: number }> {
  return {
    running: await metric(service, 'runledger_bulk_reads{state="running"}'),
    waiting: await metric(service, 'runledger_bulk_reads{state="waiting"}'),
  };
}

async function until<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  deadline = Date.now() + 40_000,
): Promise<T> {
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

it('lets a key have its bulk reads in progress, queues the next, and refuses past the queue', async () => {
  const held = Array.from({ length: PER_KEY + WAITING }, (_, i) =>
    stalled(i % 2 === 0 ? PAGE : '/v1/runs/big/replay', READER),
  );
  const full = (now: { running: number; waiting: number }) =>
    now.running === PER_KEY && now.waiting === WAITING;
  expect(await until(bulkReads, full)).toEqual({ running: PER_KEY, waiting: WAITING });
  const stalledSince = Date.now();

  // A waiting read whose client leaves (resets the connection) gives its place up at once:
  // seen before any stalled answer can have been cut off, which would also move the line.
  held[held.length - 1].resetAndDestroy();
  expect(
    await until(
      bulkReads,
      (now) => now.waiting === WAITING - 1,
      stalledSince + SEND_TIMEOUT_MS - 1000,
    ),
  ).toEqual({ running: PER_KEY, waiting: WAITING - 1 });
  stalled(PAGE, READER);
  expect(await until(bulkReads, full)).toEqual({ running: PER_KEY, waiting: WAITING });

  const refused = await request(service.baseUrl, '/v1/runs/big/audit', { key: READER });
  expect(refused.status).toBe(429);
  expect(refused.headers.get('retry-after')).toBe('1');
  const body = (await refused.json()) as { error: string; message: string };
  expect(body.error).toBe('too_many_bulk_reads');
  expect(body.message).toContain('BULK_READS_PER_KEY');

  // Another key of the same tenant is not held up, nor is a small read by the same key.
  const other = await request(service.baseUrl, PAGE, { key: KEY_2 });
  expect(other.status).toBe(200);
  expect(((await other.json()) as { events: unknown[] }).events).toHaveLength(EVENTS + 1);
  expect((await request(service.baseUrl, '/v1/threads/t-big', { key: READER })).status).toBe(200);

  // The stalled answers are cut off after the send timeout; the waiting ones start in turn
  // (and stall, and are cut off too), and the key's slots all come back.
  expect(await until(bulkReads, (now) => now.running === 0 && now.waiting === 0)).toEqual({
    running: 0,
    waiting: 0,
  });
  const again = await request(service.baseUrl, PAGE, { key: READER });
  expect(again.status).toBe(200);
  expect(((await again.json()) as { events: unknown[] }).events).toHaveLength(EVENTS + 1);
}, 90_000);

it('serves a key more bulk reads at once than it may run, in turn', async () => {
  const pages = await Promise.all(
    Array.from({ length: 3 * PER_KEY }, async () => {
      const res = await request(service.baseUrl, PAGE, { key: READER });
      return {
        status: res.status,
        events: ((await res.json()) as { events: unknown[] }).events.length,
      };
    }),
  );
  expect(pages).toEqual(Array(3 * PER_KEY).fill({ status: 200, events: EVENTS + 1 }));
}, 60_000);
