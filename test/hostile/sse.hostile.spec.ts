/**
 * Server-Sent Events clients that stop reading, and more streams than a key may hold. Before
 * issue 10 a stalled client kept up to SSE_MAX_BUFFER frames (about 1 GiB at the defaults)
 * queued and was never timed out: one stalled client per run added 225-300 MB. Now each has
 * a byte budget and a send timeout, then gets `overflow` and is closed; streams per key and
 * per tenant are capped. The notification stream, paced by its socket, had no send timeout:
 * a client that stopped reading held its stream slot until it disconnected.
 */
import { connect, type Socket } from 'node:net';
import { request, type RunningService } from '../support/service-process';
import {
  expectHealthy,
  KEY,
  KEY_2,
  logState,
  metric,
  MIB,
  startHostileService,
  startRun,
  underWatch,
} from './hostile-support';

const STALLED = 24;
const BUDGET = 2 * MIB;
/** Baseline about 150 MiB, the burst's frames (shared by every client) 13 MiB, plus each client's budget. */
const RSS_BOUND = 150 * MIB + 13 * MIB + STALLED * BUDGET + 150 * MIB;

let service: RunningService;
beforeAll(async () => {
  service = await startHostileService({
    SSE_MAX_BUFFER_BYTES: String(BUDGET),
    SSE_SEND_TIMEOUT_MS: '2000',
    SSE_MAX_STREAMS_PER_KEY: '45',
    SSE_MAX_STREAMS_PER_TENANT: '60',
  });
}, 60_000);

afterAll(async () => {
  await service.kill();
});

async function eventually(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not reached within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Opens a stream and answers the socket once the status line arrived: 200, or the refusal. */
function openStream(path: string, key: string): Promise<{ socket: Socket; status: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(service.port, '127.0.0.1');
    socket.once('data', (chunk: Buffer) => {
      resolve({ socket, status: Number(/^HTTP\/1\.1 (\d+)/.exec(chunk.toString())?.[1] ?? 0) });
    });
    socket.on('error', reject);
    socket.write(
      `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer ${key}\r\n\r\n`,
    );
  });
}

it(`sends overflow to ${STALLED} clients that stop reading during a burst and closes them; RSS stays bounded`, async () => {
  await startRun(service, 'hot');
  const stalled: Socket[] = [];
  for (let i = 0; i < STALLED; i += 1) {
    const { socket, status } = await openStream('/v1/runs/hot/stream', KEY);
    expect(status).toBe(200);
    socket.pause();
    stalled.push(socket);
  }
  expect(await metric(service, 'runledger_sse_clients')).toBe(STALLED);
  const text = 'x'.repeat(64 * 1024);
  const { watched } = await underWatch(service, async () => {
    // 200 events of 64 KiB, 2 an append: more than the kernel's socket buffers and the
    // budget take for a client that reads nothing.
    for (let batch = 0; batch < 100; batch += 1) {
      const res = await request(service.baseUrl, '/v1/runs/hot/events', {
        key: KEY,
        body: {
          // model.call: the thread views ignore it, so the burst costs the fan-out, not a projection.
          events: Array.from({ length: 2 }, (_, i) => ({
            type: 'model.call',
            data: {
              callId: `c-${batch}-${i}`,
              model: 'm',
              messages: [{ role: 'user', content: text }],
            },
          })),
        },
      });
      expect(res.status).toBe(201);
      // A burst, but an agent's: appends arrive one after another, not all in one instant.
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    // Within the send timeout, plus the grace the overflow frame gets.
    await eventually(async () => (await metric(service, 'runledger_sse_clients')) === 0, 10_000);
  });
  expect(await metric(service, 'runledger_sse_overflows_total')).toBe(STALLED);
  expectHealthy(watched, RSS_BOUND);
  expect((await logState(service, 'hot')).events).toHaveLength(201);
  for (const socket of stalled) socket.destroy();
}, 60_000);

it('refuses streams past SSE_MAX_STREAMS_PER_KEY and SSE_MAX_STREAMS_PER_TENANT with 429', async () => {
  await startRun(service, 'capped');
  const before = await logState(service, 'capped');
  const open: Socket[] = [];
  const { result, watched } = await underWatch(service, async () => {
    const statuses: number[] = [];
    for (const [key, count] of [
      [KEY, 46],
      [KEY_2, 16],
    ] as const) {
      for (let i = 0; i < count; i += 1) {
        const { socket, status } = await openStream('/v1/runs/capped/stream', key);
        statuses.push(status);
        if (status === 200) open.push(socket);
        else socket.destroy();
      }
    }
    return statuses;
  });
  // 45 for the first key, 15 more for the tenant's 60, each one past a cap refused.
  expect(result.slice(0, 45)).toEqual(Array(45).fill(200));
  expect(result[45]).toBe(429);
  expect(result.slice(46, 61)).toEqual(Array(15).fill(200));
  expect(result[61]).toBe(429);
  expectHealthy(watched, RSS_BOUND);
  for (const socket of open) socket.destroy();
  await eventually(async () => (await metric(service, 'runledger_sse_clients')) === 0, 10_000);
  // Slots come back when streams close.
  const { socket, status } = await openStream('/v1/runs/capped/stream', KEY);
  expect(status).toBe(200);
  socket.destroy();
  expect(await logState(service, 'capped')).toEqual(before);
}, 60_000);

// Last: its 20 MiB of notifications stay in the service's heap, and the tests above bound RSS.
it('sends overflow to a notification stream client that stops reading, and closes it', async () => {
  const overflowsBefore = await metric(service, 'runledger_sse_overflows_total');
  const { socket, status } = await openStream('/v1/notifications/stream', KEY);
  expect(status).toBe(200);
  socket.pause();
  expect(await metric(service, 'runledger_sse_clients')).toBe(1);
  // A thread blocked 4,500 times, each on a question of 4,096 characters (the most an item
  // keeps), unblocked each time by its tool's finish: items of about 4.7 KB, 21 MB in all,
  // more than the kernel's socket buffers take.
  const question = 'q'.repeat(4096);
  const append = async (events: object[]) => {
    const res = await request(service.baseUrl, '/v1/runs/asks/events', {
      key: KEY,
      body: { events },
    });
    expect(res.status).toBe(201);
  };
  await append([{ type: 'run.started', data: { threadId: 't-asks', agent: 'a', source: 'api' } }]);
  for (let batch = 0; batch < 9; batch += 1) {
    // 500 blocks an append: 1,000 events, the most one takes.
    const events = Array.from({ length: 500 }, (_, i) => {
      const call = `c-${batch}-${i}`;
      return [
        {
          type: 'approval.requested',
          data: {
            approvalId: `a-${batch}-${i}`,
            toolCallId: call,
            toolName: 'deploy',
            input: {},
            question,
          },
        },
        { type: 'tool.finished', data: { toolCallId: call, failed: false, output: 'done' } },
      ];
    });
    await append(events.flat());
  }
  // Within the send timeout, plus the grace the overflow frame gets.
  await eventually(async () => (await metric(service, 'runledger_sse_clients')) === 0, 15_000);
  expect(await metric(service, 'runledger_sse_overflows_total')).toBe(overflowsBefore + 1);
  socket.destroy();
}, 60_000);

it('serves /health/live while ten clients catch up on a 20,000-event run at once', async () => {
  // Before, a client that read as fast as it was written never waited on its socket, so its
  // whole catch-up ran in one turn of the event loop: ten of them held it for 4.7 s.
  const runId = 'catch-up-ten';
  await startRun(service, runId);
  for (let batch = 0; batch < 40; batch += 1) {
    const events = Array.from({ length: 500 }, (_, i) => ({
      type: 'tool.started',
      data: { toolCallId: `c${batch}-${i}`, toolName: 'read', input: { q: 'y'.repeat(1000) } },
    }));
    const res = await request(service.baseUrl, `/v1/runs/${runId}/events`, {
      key: KEY,
      body: { events },
    });
    expect(res.status).toBe(201);
  }
  const readWhole = async (): Promise<number> => {
    const res = await fetch(`${service.baseUrl}/v1/runs/${runId}/stream?from=0`, {
      headers: { authorization: `Bearer ${KEY_2}` },
    });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let frames = 0;
    while (frames < 20_001) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      const parts = text.split('\n\n');
      text = parts.pop()!;
      frames += parts.filter((part) => part.includes('\ndata:')).length;
    }
    await reader.cancel();
    return frames;
  };
  const { result, watched } = await underWatch(service, () =>
    Promise.all(Array.from({ length: 10 }, readWhole)),
  );
  expect(result).toEqual(Array.from({ length: 10 }, () => 20_001));
  expectHealthy(watched, 1024 * MIB);
}, 120_000);
