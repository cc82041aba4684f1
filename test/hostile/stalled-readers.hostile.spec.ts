/**
 * Clients that ask for a run's replay or a thread's export and then stop reading. The answer
 * goes out as the socket takes it, a page of the log at a time, so such a client held that
 * page and the lines made of it (about 10 MB) for as long as it kept the connection open:
 * 40 of them held 300 MB for as long as they liked. Now, like an SSE stream, the answer is cut
 * off once its socket took nothing for SSE_SEND_TIMEOUT_MS while bytes waited.
 */
import { connect } from 'node:net';
import { request, type RunningService } from '../support/service-process';
import { KEY, startHostileService, startRun } from './hostile-support';

const SEND_TIMEOUT_MS = 1000;
const EVENTS = 200;
const TEXT = 'x'.repeat(60_000);

let service: RunningService;
beforeAll(async () => {
  service = await startHostileService({ SSE_SEND_TIMEOUT_MS: String(SEND_TIMEOUT_MS) });
  await startRun(service, 'big');
  for (let at = 0; at < EVENTS; at += 20) {
    const events = Array.from({ length: 20 }, (_, i) => ({
      type: 'message.added',
      data: { messageId: `m${at + i}`, role: 'assistant', text: TEXT },
    }));
    const res = await request(service.baseUrl, '/v1/runs/big/events', {
      key: KEY,
      body: { events },
    });
    if (res.status !== 201) throw new Error(`append answered ${res.status}`);
  }
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
      resolve({ bytes: all.length, cutOff: !all.subarray(-5).equals(Buffer.from('0\r\n\r\n')) });
    });
    socket.write(
      `GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`,
    );
    socket.pause();
    setTimeout(() => socket.resume(), stallMs);
  });
}

it.each(['/v1/runs/big/replay', '/v1/threads/t-big/export'])(
  'cuts off %s to a client that stopped reading',
  async (path) => {
    const read = await stallThenRead(path, 3 * SEND_TIMEOUT_MS + 1000);
    expect(read.cutOff).toBe(true);
    expect(read.bytes).toBeLessThan(EVENTS * TEXT.length);
  },
  30_000,
);

it('sends the whole replay to a client that reads', async () => {
  const read = await stallThenRead('/v1/runs/big/replay', 0);
  expect(read.cutOff).toBe(false);
  expect(read.bytes).toBeGreaterThan(EVENTS * TEXT.length);
}, 30_000);
