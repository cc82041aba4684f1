/**
 * Clients that ask for a run's replay, a thread's export or a page of a run's events and then
 * stop reading. What waited for such a client's socket (a page of the log and the lines made
 * of it, about 10 MB; a page of events, up to 16 MiB of JSON) stayed for as long as it kept
 * the connection open: 40 replays held 300 MB, 40 pages 900 MB, for as long as they liked.
 * Now, like an SSE stream, the answer is cut off once its socket took nothing for
 * SSE_SEND_TIMEOUT_MS while bytes waited.
 */
import { connect } from 'node:net';
import type { RunningService } from '../support/service-process';
import { KEY, startHostileService, startLargeRun } from './hostile-support';

const SEND_TIMEOUT_MS = 1000;
const EVENTS = 200;
const TEXT_CHARS = 60_000;

let service: RunningService;
beforeAll(async () => {
  service = await startHostileService({ SSE_SEND_TIMEOUT_MS: String(SEND_TIMEOUT_MS) });
  await startLargeRun(service, 'big', EVENTS, TEXT_CHARS);
}, 60_000);

afterAll(async () => {
  await service.kill();
});

interface Read {
  bytes: number;
  /** The server closed the connection before the answer's end (no final chunk). */
  cutOff: boolean;
}

/** GETs `path`, reads nothing for `stallMs`, then reads on until the connection closes. */
function stallThenRead(path: string, stallMs: number): Promise<Read> {
  return new Promise((resolve, reject) => {
    const socket = connect(service.port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('the connection stayed open'));
    }, 30_000);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      const all = Buffer.concat(chunks);
      const headEnd = all.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length: (\d+)/i.exec(all.subarray(0, headEnd).toString());
      const whole =
        length === null
          ? all.subarray(-5).equals(Buffer.from('0\r\n\r\n'))
          : all.length - headEnd - 4 >= Number(length[1]);
      resolve({ bytes: all.length, cutOff: !whole });
    });
    socket.write(
      `GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`,
    );
    socket.pause();
    setTimeout(() => socket.resume(), stallMs);
  });
}

it.each(['/v1/runs/big/replay', '/v1/threads/t-big/export', '/v1/runs/big/events?limit=1000'])(
  'cuts off %s to a client that stopped reading',
  async (path) => {
    const read = await stallThenRead(path, 3 * SEND_TIMEOUT_MS + 1000);
    expect(read.cutOff).toBe(true);
    expect(read.bytes).toBeLessThan(EVENTS * TEXT_CHARS);
  },
  30_000,
);

it.each(['/v1/runs/big/replay', '/v1/runs/big/events?limit=1000'])(
  'sends the whole of %s to a client that reads',
  async (path) => {
    const read = await stallThenRead(path, 0);
    expect(read.cutOff).toBe(false);
    expect(read.bytes).toBeGreaterThan(EVENTS * TEXT_CHARS);
  },
  30_000,
);
