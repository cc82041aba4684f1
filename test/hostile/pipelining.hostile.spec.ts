/**
 * A stranger's pipelining flood: tens of thousands of tiny requests written at once on a few
 * sockets, without a key. node:http hands every request of what it read to the server in one
 * turn of the event loop, so each costing the refusal path (routing, the key check, a 401
 * written) held the loop for 1 to 2.5 s. Now a connection may have only so many requests in
 * flight: the one past that is refused 429 and the connection closes after it; a client that
 * writes more after that is cut off at once.
 */
import { connect } from 'node:net';
import type { RunningService } from '../support/service-process';
import { MAX_PIPELINED_REQUESTS } from '../../services/api/src/http/http-server';
import {
  expectHealthy,
  logState,
  MIB,
  startHostileService,
  startRun,
  underWatch,
} from './hostile-support';

const RSS_BOUND = 400 * MIB;
const REQUESTS = 20_000;
const SOCKETS = 2;

let service: RunningService;
beforeAll(async () => {
  service = await startHostileService();
  await startRun(service, 'target');
}, 60_000);

afterAll(async () => {
  await service.kill();
});

interface Flooded {
  statuses: number[];
  /** The last answer's body (the refusal, when there was one). */
  last: string;
  closedByServer: boolean;
}

/** Writes `count` copies of `request` at once and reads every answer until the server closes. */
function flood(request: string, count: number): Promise<Flooded> {
  return new Promise((resolve) => {
    const socket = connect(service.port, '127.0.0.1');
    let received = '';
    const finish = (closedByServer: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      const statuses = [...received.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
      const lastHead = received.lastIndexOf('HTTP/1.1 ');
      const last = received.slice(received.indexOf('\r\n\r\n', lastHead) + 4);
      resolve({ statuses, last, closedByServer });
    };
    const timer = setTimeout(() => finish(false), 20_000);
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (received += chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => finish(true));
    socket.write(request.repeat(count));
  });
}

it(`refuses ${SOCKETS} sockets of ${REQUESTS} pipelined requests without a key, the loop free`, async () => {
  const before = await logState(service, 'target');
  const request = 'GET /v1/runs/target/events HTTP/1.1\r\nHost: x\r\n\r\n';
  const { result, watched } = await underWatch(service, () =>
    Promise.all(Array.from({ length: SOCKETS }, () => flood(request, REQUESTS))),
  );
  expectHealthy(watched, RSS_BOUND);
  for (const answer of result) {
    expect(answer.closedByServer).toBe(true);
    expect(answer.statuses.length).toBeLessThanOrEqual(MAX_PIPELINED_REQUESTS + 1);
    for (const status of answer.statuses) expect([401, 429]).toContain(status);
  }
  expect(await logState(service, 'target')).toEqual(before);
}, 60_000);

it(`answers ${MAX_PIPELINED_REQUESTS} pipelined requests, and refuses the next 429, then closes`, async () => {
  const request = 'GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n';
  const answer = await flood(request, MAX_PIPELINED_REQUESTS + 1);
  expect(answer.closedByServer).toBe(true);
  expect(answer.statuses).toEqual([...Array(MAX_PIPELINED_REQUESTS).fill(200), 429]);
  expect(JSON.parse(answer.last)).toMatchObject({ error: 'too_many_pipelined' });
}, 30_000);

it('answers a client that pipelines a few requests, each in turn', async () => {
  const request = 'GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n';
  const socket = connect(service.port, '127.0.0.1');
  const statuses = await new Promise<number[]>((resolve) => {
    let received = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      received += chunk;
      const seen = [...received.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
      if (seen.length === 8) resolve(seen);
    });
    socket.write(request.repeat(8));
  });
  socket.destroy();
  expect(statuses).toEqual(Array(8).fill(200));
}, 30_000);
