/**
 * Run and thread streams (Server-Sent Events) through a listening app and plain node:http
 * clients: resume without gap or duplicate, the switch from catch-up to live under
 * concurrent appends, thread streams that pick up new runs, tenant isolation, a client
 * whose socket backs up, heartbeats, and shutdown with streams open.
 */
import Database from 'better-sqlite3';
import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { loopTurns } from '../../../../libs/domain/src/testing/loop-turns';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';
import { SseFanout } from './sse-fanout.service';
import { isReader, SseReader, type StreamedEvent } from '../testing/sse-reader';

async function listening(env: Record<string, string> = {}): Promise<TestApp> {
  const app = await startTestApp(env);
  await app.app.listen(0, '127.0.0.1');
  return app;
}

function append(t: TestApp, runId: string, events: object[], key = KEYS.tenantA) {
  return t.http().post(`/v1/runs/${runId}/events`).set(t.auth(key)).send({ events });
}

const say = (text: string) => ({
  type: 'message.added',
  data: { messageId: randomUUID(), role: 'user', text },
});

async function startRun(t: TestApp, threadId = `t-${randomUUID()}`, key = KEYS.tenantA) {
  const runId = `run-${randomUUID()}`;
  const res = await append(
    t,
    runId,
    [{ type: 'run.started', data: { threadId, agent: 'coder', source: 'api' } }],
    key,
  );
  expect(res.status).toBe(201);
  return { runId, threadId, position: res.body.position as number };
}

async function open(
  t: TestApp,
  path: string,
  headers: Record<string, string> = {},
  key = KEYS.tenantA,
): Promise<SseReader> {
  const reader = await SseReader.open(t.app, path, { ...t.auth(key), ...headers });
  if (!isReader(reader)) throw new Error(`${path} answered ${reader.status}`);
  return reader;
}

async function metric(t: TestApp, name: string): Promise<number> {
  const res = await t.http().get('/metrics');
  const line = (res.text as string).split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? NaN : Number(line.split(' ')[1]);
}

async function eventually(check: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const positions = (events: StreamedEvent[]) => events.map((e) => e.position);

describe('SSE streams', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening();
  });
  afterAll(async () => {
    await t.close();
  });

  it('streams a run from now, then resumes after Last-Event-ID with no gap and no duplicate', async () => {
    const { runId } = await startRun(t);
    const first = await open(t, `/v1/runs/${runId}/stream`);
    expect(first.res.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(first.res.headers['cache-control']).toBe('no-cache');
    expect(first.res.headers['x-accel-buffering']).toBe('no');
    expect(first.res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);

    const batch = await append(t, runId, [say('one'), say('two'), say('three')]);
    await first.until((r) => r.recorded().length === 3);
    const received = first.recorded();
    expect(positions(received)).toEqual(
      (batch.body.events as { position: number }[]).map((e) => e.position),
    );
    expect(received.map((e) => e.revision)).toEqual([1, 2, 3]);
    const message = first.events()[0];
    expect(message.id).toBe(String(received[0].position));
    expect(message.event).toBe('message.added');
    expect(received[0]).toMatchObject({
      type: 'message.added',
      data: { text: 'one' },
      metadata: { runId, tenantId: 'tenant-a' },
    });
    expect(Object.keys(received[0]).sort()).toEqual(
      ['data', 'id', 'metadata', 'position', 'recordedAt', 'revision', 'type'].sort(),
    );
    first.close();

    const missed = await append(t, runId, [say('four'), say('five')]);
    await append(t, runId, [say('six')]);
    const resumed = await open(t, `/v1/runs/${runId}/stream`, {
      'Last-Event-ID': String(received[2].position),
    });
    await resumed.until((r) => r.recorded().length === 3);
    await append(t, runId, [say('seven')]);
    await resumed.until((r) => r.recorded().length === 4);
    const again = resumed.recorded();
    expect(again.map((e) => e.revision)).toEqual([4, 5, 6, 7]);
    expect(again.map((e) => e.data.text)).toEqual(['four', 'five', 'six', 'seven']);
    expect(again[0].position).toBe(missed.body.events[0].position);
    resumed.close();
  });

  it('starts a fresh stream with its position as the last event id, so a reconnect resumes there', async () => {
    const { runId, position } = await startRun(t);
    const reader = await open(t, `/v1/runs/${runId}/stream`);
    await reader.until((r) => r.messages.length > 0);
    expect(reader.messages[0]).toEqual({ id: String(position), comments: [] });
    reader.close();
  });

  it('replays ?from= (exclusive) and switches to live without gap or duplicate while appends race it', async () => {
    const { runId } = await startRun(t);
    const other = await startRun(t);
    for (let i = 0; i < 4; i += 1) {
      const batch = Array.from({ length: 500 }, (_, j) => say(`history ${i}-${j}`));
      expect((await append(t, runId, batch)).status).toBe(201);
      expect((await append(t, other.runId, [say(`noise ${i}`)])).status).toBe(201);
    }
    const racing = Array.from({ length: 30 }, (_, i) =>
      Promise.all([
        append(t, runId, [say(`live ${i}`), say(`live ${i}'`)]),
        append(t, other.runId, [say(`noise live ${i}`)]),
      ]),
    );
    const reader = await open(t, `/v1/runs/${runId}/stream?from=0`);
    await Promise.all(racing);
    const total = 1 + 2000 + 60;
    await reader.until((r) => r.recorded().length >= total);
    await append(t, runId, [say('last')]);
    await reader.until((r) => r.recorded().some((e) => e.data.text === 'last'));
    const events = reader.recorded();
    expect(events.map((e) => e.revision)).toEqual(Array.from({ length: total + 1 }, (_, i) => i));
    expect(new Set(events.map((e) => e.metadata.runId))).toEqual(new Set([runId]));
    reader.close();

    // Exclusive: from the run.started's position, the next event comes first.
    const fromStart = await open(t, `/v1/runs/${runId}/stream?from=${events[0].position}`);
    await fromStart.until((r) => r.recorded().length > 0);
    expect(fromStart.recorded()[0].revision).toBe(1);
    fromStart.close();
  });

  it('streams every run of a thread, including runs started after the client connected', async () => {
    const threadId = `t-${randomUUID()}`;
    const a = await startRun(t, threadId);
    const reader = await open(t, `/v1/threads/${threadId}/stream?minPosition=${a.position}`);

    const b = await startRun(t, threadId);
    await append(t, b.runId, [say('in b')]);
    await append(t, a.runId, [say('in a')]);
    const elsewhere = await startRun(t);
    await append(t, elsewhere.runId, [say('another thread')]);
    const foreign = await startRun(t, threadId, KEYS.tenantB);
    await append(t, foreign.runId, [say('same thread id, another tenant')], KEYS.tenantB);
    await append(t, a.runId, [say('done')]);

    await reader.until((r) => r.recorded().some((e) => e.data.text === 'done'));
    const events = reader.recorded();
    expect(events.map((e) => [e.metadata.runId, e.type])).toEqual([
      [b.runId, 'run.started'],
      [b.runId, 'message.added'],
      [a.runId, 'message.added'],
      [a.runId, 'message.added'],
    ]);
    const ordered = positions(events);
    expect(ordered).toEqual([...ordered].sort((x, y) => x - y));
    reader.close();

    // Resuming a thread stream from the start replays both runs' history in log order.
    const history = await open(t, `/v1/threads/${threadId}/stream?from=0`);
    await history.until((r) => r.recorded().length === events.length + 1);
    expect(positions(history.recorded())).toEqual([a.position, ...ordered]);
    history.close();
  });

  it('answers a foreign, missing or malformed stream with a JSON error before any stream starts', async () => {
    const { runId, threadId, position } = await startRun(t);
    await t.http().get(`/v1/threads/${threadId}?minPosition=${position}`).set(t.auth());
    const cases: [string, string, number, string][] = [
      [`/v1/runs/${runId}/stream`, KEYS.tenantB, 404, 'run_not_found'],
      [`/v1/runs/run-${randomUUID()}/stream`, KEYS.tenantA, 404, 'run_not_found'],
      [`/v1/threads/${threadId}/stream`, KEYS.tenantB, 404, 'thread_not_found'],
      [`/v1/threads/t-${randomUUID()}/stream`, KEYS.tenantA, 404, 'thread_not_found'],
      [`/v1/runs/${runId}/stream?from=-1`, KEYS.tenantA, 400, 'validation_failed'],
      // A repeated parameter arrives as an array (it was a 500, found by the fuzz suite).
      [`/v1/runs/${runId}/stream?from=0&from=0`, KEYS.tenantA, 400, 'validation_failed'],
      [`/v1/threads/${threadId}/stream?from=1&from=2`, KEYS.tenantA, 400, 'validation_failed'],
      [`/v1/runs/${runId}/stream`, 'not-a-key-0123456789', 401, 'unauthorized'],
    ];
    for (const [path, key, status, error] of cases) {
      const answer = await SseReader.open(t.app, path, t.auth(key));
      expect(isReader(answer)).toBe(false);
      expect(answer).toMatchObject({ status, body: { error } });
      expect((answer as { type: string }).type).toMatch(/^application\/json/);
    }
    const badId = await SseReader.open(t.app, `/v1/runs/${runId}/stream`, {
      ...t.auth(),
      'Last-Event-ID': 'abc',
    });
    expect(badId).toMatchObject({ status: 400, body: { error: 'validation_failed' } });

    // A read-only key of the owning tenant may stream.
    const reader = await open(t, `/v1/runs/${runId}/stream`, {}, KEYS.readerA);
    reader.close();
  });

  it('refuses a start past the log head 400, rather than skip the events up to it unseen', async () => {
    const { runId, threadId, position } = await startRun(t);
    const cases: [string, Record<string, string>, string][] = [
      [`/v1/runs/${runId}/stream`, { 'Last-Event-ID': String(position + 5) }, 'Last-Event-ID'],
      [`/v1/runs/${runId}/stream?from=${position + 5}`, {}, 'from'],
      [`/v1/threads/${threadId}/stream`, { 'Last-Event-ID': '99999999999' }, 'Last-Event-ID'],
    ];
    for (const [path, headers, field] of cases) {
      const answer = await SseReader.open(t.app, path, { ...t.auth(), ...headers });
      expect(isReader(answer)).toBe(false);
      expect(answer).toMatchObject({
        status: 400,
        body: { error: 'validation_failed', details: [{ field, rule: 'max' }] },
      });
    }
    // The head itself is where a client that has seen everything resumes.
    const atHead = await open(t, `/v1/runs/${runId}/stream`, {
      'Last-Event-ID': String(position),
    });
    atHead.close();
  });

  it('answers HEAD with the headers and an end, holding no stream', async () => {
    const { runId, threadId } = await startRun(t);
    const before = await metric(t, 'runledger_sse_clients');
    for (const path of [
      `/v1/runs/${runId}/stream`,
      `/v1/threads/${threadId}/stream`,
      '/v1/notifications/stream',
    ]) {
      const res = await t.http().head(path).set(t.auth()).timeout(5000);
      expect({ path, status: res.status, type: res.headers['content-type'] }).toEqual({
        path,
        status: 200,
        type: expect.stringMatching(/^text\/event-stream/),
      });
    }
    expect(await metric(t, 'runledger_sse_clients')).toBe(before);
  });

  it('counts open streams and forgets a client that disconnected', async () => {
    const { runId } = await startRun(t);
    const before = await metric(t, 'runledger_sse_clients');
    const reader = await open(t, `/v1/runs/${runId}/stream`);
    await eventually(async () => (await metric(t, 'runledger_sse_clients')) === before + 1);
    reader.close();
    await eventually(async () => (await metric(t, 'runledger_sse_clients')) === before);
    // Events after the disconnect are not written to a closed socket (nothing throws).
    expect((await append(t, runId, [say('nobody listens')])).status).toBe(201);
  });
});

describe('a stream over an event the store cannot read (a damaged row)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening();
  });
  afterAll(async () => {
    await t.close();
  });

  it('shows it in its place and goes on after it, on the run and the thread streams', async () => {
    const { runId, threadId } = await startRun(t);
    expect(
      (
        await append(
          t,
          runId,
          [1, 2, 3, 4, 5].map((n) => say(`m${n}`)),
        )
      ).status,
    ).toBe(201);
    const db = new Database(join(t.config.dataDir, 'runledger.db'));
    db.prepare("UPDATE events SET data = '{broken' WHERE stream LIKE ? AND revision = 2").run(
      `%${runId}`,
    );
    db.close();
    const errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      for (const path of [
        `/v1/runs/${runId}/stream?from=0`,
        `/v1/threads/${threadId}/stream?from=0`,
      ]) {
        const reader = await open(t, path);
        await reader.until((r) => r.recorded().length >= 6);
        const events = reader.recorded();
        reader.close();
        expect(events.map((e) => e.revision)).toEqual([0, 1, 2, 3, 4, 5]);
        expect(events[2]).toMatchObject({
          type: 'message.added',
          data: null,
          metadata: {},
          unreadable: expect.stringContaining('does not parse'),
        });
        expect(events[5].data.text).toBe('m5');
      }
      expect(errors).toHaveBeenCalledWith(
        expect.objectContaining({ msg: 'a recorded event is unreadable', runId, revision: 2 }),
      );
    } finally {
      errors.mockRestore();
    }
  });
});

describe('clients catching up at once', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening();
  });
  afterAll(async () => {
    await t.close();
  });

  it('read their pages of the log a turn of the event loop apart, not all in one turn', async () => {
    const { runId } = await startRun(t);
    for (let batch = 0; batch < 3; batch += 1) {
      const events = Array.from({ length: 400 }, (_, n) => say(`${batch}-${n}`));
      expect((await append(t, runId, events)).status).toBe(201);
    }
    // A clock whose slice is over once a page has been read, as when a page of large events
    // (tens of milliseconds) takes longer than a slice.
    let spent = false;
    let next: Promise<void> | null = null;
    const pageClock = {
      due: () => spent,
      turn: () =>
        (next ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
          next = null;
          spent = false;
        })),
    };
    (t.app.get(SseFanout) as unknown as { catchUpClock: typeof pageClock }).catchUpClock =
      pageClock;
    const store = t.app.get<EventStore>(EVENT_STORE);
    const readAll = store.readAll.bind(store);
    const headPosition = store.headPosition.bind(store);
    // At each page read, whether the loop had a turn since the one before.
    const { turns, mark } = loopTurns();
    const reads = jest.spyOn(store, 'readAll').mockImplementation((options) => {
      if (options?.stream !== undefined) {
        mark();
        spent = true;
      }
      return readAll(options);
    });
    // The first stream starts the shared follower at the log head: the four streams opened
    // meanwhile wait for it, and start catching up together.
    const heads = jest.spyOn(store, 'headPosition').mockImplementation(async (options) => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      return headPosition(options);
    });
    try {
      const readers = await Promise.all(
        [1, 2, 3, 4].map(() => open(t, `/v1/runs/${runId}/stream`, { 'Last-Event-ID': '0' })),
      );
      await Promise.all(readers.map((reader) => reader.until((r) => r.recorded().length === 1201)));
      readers.forEach((reader) => reader.close());
      // Three pages of 500 and the end of the run, for each of the four.
      expect(turns.length).toBeGreaterThanOrEqual(12);
      expect(turns.filter((turn) => !turn)).toEqual([]);
    } finally {
      reads.mockRestore();
      heads.mockRestore();
    }
  }, 60_000);
});

describe('a client whose socket backs up', () => {
  let t: TestApp;
  beforeAll(async () => {
    // Room for four of the 64 KiB events below.
    t = await listening({ SSE_MAX_BUFFER_BYTES: String(4 * 66 * 1024), EVENT_MAX_BYTES: '131072' });
  });
  afterAll(async () => {
    await t.close();
  });

  it('gets overflow with resumeFrom, and resuming from it receives everything', async () => {
    const { runId } = await startRun(t);
    const slow = await open(t, `/v1/runs/${runId}/stream`);
    await slow.until((r) => r.messages.length > 0);
    slow.res.pause();

    // Large events fill the kernel's socket buffers quickly; then the server's queue grows.
    // Two events an append (less than SSE_MAX_BUFFER_BYTES): only a socket that stopped draining
    // lets the backlog pass the bound, not one burst.
    const text = 'x'.repeat(64 * 1024);
    const appended: number[] = [];
    for (let i = 0; i < 500 && (await metric(t, 'runledger_sse_overflows_total')) < 1; i += 1) {
      const res = await append(t, runId, [say(`${i}-a ${text}`), say(`${i}-b ${text}`)]);
      expect(res.status).toBe(201);
      appended.push(...(res.body.events as { position: number }[]).map((e) => e.position));
    }
    expect(await metric(t, 'runledger_sse_overflows_total')).toBe(1);
    const after = await append(t, runId, [say('after the overflow')]);
    appended.push(after.body.position as number);

    slow.res.resume();
    await slow.until((r) => r.ended);
    const overflow = slow.events('overflow');
    expect(overflow).toHaveLength(1);
    expect(slow.messages[slow.messages.length - 1].event).toBe('overflow');
    const { resumeFrom } = JSON.parse(overflow[0].data!) as { resumeFrom: number };
    const delivered = positions(slow.recorded());
    expect(delivered.length).toBeGreaterThan(0);
    expect(delivered.length).toBeLessThan(appended.length);
    expect(delivered).toEqual(appended.slice(0, delivered.length));
    expect(resumeFrom).toBe(delivered[delivered.length - 1]);

    const resumed = await open(t, `/v1/runs/${runId}/stream`, {
      'Last-Event-ID': String(resumeFrom),
    });
    await resumed.until((r) => r.recorded().length === appended.length - delivered.length);
    expect([...delivered, ...positions(resumed.recorded())]).toEqual(appended);
    resumed.close();
  }, 60_000);
});

describe('stream caps', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening({ SSE_MAX_STREAMS_PER_KEY: '2', SSE_MAX_STREAMS_PER_TENANT: '3' });
  });
  afterAll(async () => {
    await t.close();
  });

  async function refusal(path: string, key: string) {
    const reader = await SseReader.open(t.app, path, t.auth(key));
    if (isReader(reader)) throw new Error(`${path} was not refused`);
    return reader;
  }

  it('refuses a key its third open stream and a tenant its fourth with 429, until one closes', async () => {
    const { runId, threadId } = await startRun(t);
    const first = await open(t, `/v1/runs/${runId}/stream`);
    const second = await open(t, `/v1/threads/${threadId}/stream`);
    const byKey = await refusal(`/v1/runs/${runId}/stream`, KEYS.tenantA);
    expect(byKey.status).toBe(429);
    expect(byKey.body).toMatchObject({
      error: 'too_many_streams',
      message: expect.stringContaining('SSE_MAX_STREAMS_PER_KEY'),
    });

    // Another key of the same tenant has a slot of its own, until the tenant's cap.
    const third = await open(t, `/v1/runs/${runId}/stream`, {}, KEYS.readerA);
    const byTenant = await refusal(`/v1/runs/${runId}/stream`, KEYS.readerA);
    expect(byTenant.status).toBe(429);
    expect(byTenant.body).toMatchObject({
      message: expect.stringContaining('SSE_MAX_STREAMS_PER_TENANT'),
    });
    // Another tenant is not affected.
    const other = await startRun(t, undefined, KEYS.tenantB);
    const foreign = await open(t, `/v1/runs/${other.runId}/stream`, {}, KEYS.tenantB);

    first.close();
    await eventually(async () => {
      const reader = await SseReader.open(t.app, `/v1/runs/${runId}/stream`, t.auth());
      if (!isReader(reader)) return false;
      reader.close();
      return true;
    });
    for (const reader of [second, third, foreign]) reader.close();
  });

  it('counts notification streams against the same caps', async () => {
    const { runId } = await startRun(t);
    const notifications = await open(t, '/v1/notifications/stream');
    const run = await open(t, `/v1/runs/${runId}/stream`);
    expect((await refusal('/v1/notifications/stream', KEYS.tenantA)).status).toBe(429);
    notifications.close();
    run.close();
    await eventually(async () => {
      const reader = await SseReader.open(t.app, '/v1/notifications/stream', t.auth());
      if (!isReader(reader)) return false;
      reader.close();
      return true;
    });
  });

  it('frees the slot of a stream refused before it started (unknown run)', async () => {
    for (let i = 0; i < 3; i += 1) {
      const missing = await refusal(`/v1/runs/run-${randomUUID()}/stream`, KEYS.tenantA);
      expect(missing.status).toBe(404);
    }
    const { runId } = await startRun(t);
    const reader = await open(t, `/v1/runs/${runId}/stream`);
    reader.close();
  });
});

describe('run and thread streams against the rate limit', () => {
  let t: TestApp;
  beforeAll(async () => {
    // The test key names no user: it spends the service budget, which the test app raises.
    t = await listening({ RATE_LIMIT_SERVICE_CALLS: '3', RATE_LIMIT_SERVICE_COSTLY: '3' });
  });
  afterAll(async () => {
    await t.close();
  });

  it('counts every connection of a run stream as a call: 429 with Retry-After beyond the budget', async () => {
    const { runId } = await startRun(t);
    // The runtime's run.started is not budgeted: the three calls are the three streams.
    const readers = [];
    for (let i = 0; i < 3; i += 1) readers.push(await open(t, `/v1/runs/${runId}/stream`));
    const refused = await SseReader.open(t.app, `/v1/runs/${runId}/stream`, t.auth());
    expect(isReader(refused)).toBe(false);
    if (isReader(refused)) return;
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBeDefined();
    for (const reader of readers) reader.close();
  });
});

describe('a stream refused by its cap', () => {
  it('gives back the call its rate limit counted: retrying it does not lock out thread reads', async () => {
    const t = await listening({
      SSE_MAX_STREAMS_PER_KEY: '1',
      RATE_LIMIT_SERVICE_CALLS: '3',
      RATE_LIMIT_SERVICE_COSTLY: '3',
    });
    try {
      const { runId, threadId } = await startRun(t);
      const held = await open(t, `/v1/runs/${runId}/stream`);
      for (let i = 0; i < 4; i += 1) {
        const refused = await SseReader.open(t.app, `/v1/threads/${threadId}/stream`, t.auth());
        expect(isReader(refused) ? 200 : refused.status).toBe(429);
        if (!isReader(refused)) expect(refused.body.error).toBe('too_many_streams');
      }
      // The stream held and these two reads are the three calls counted; the refusals are not.
      const reads = [];
      for (let i = 0; i < 3; i += 1) {
        reads.push((await t.http().get(`/v1/threads/${threadId}`).set(t.auth())).status);
      }
      expect(reads).toEqual([200, 200, 429]);
      held.close();
    } finally {
      await t.close();
    }
  });
});

describe('heartbeats and shutdown', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening({ SSE_HEARTBEAT_MS: '50' });
  });

  it('keeps an idle stream alive with heartbeat comments', async () => {
    const { runId } = await startRun(t);
    const reader = await open(t, `/v1/runs/${runId}/stream`);
    await reader.until(
      (r) => r.messages.filter((m) => m.comments.includes('heartbeat')).length >= 2,
    );
    expect(reader.recorded()).toEqual([]);
    reader.close();
  });

  it('ends open streams when the app closes, without waiting for the clients', async () => {
    const { runId } = await startRun(t);
    const reader = await open(t, `/v1/runs/${runId}/stream`);
    const started = Date.now();
    await t.close();
    expect(Date.now() - started).toBeLessThan(5000);
    await reader.until((r) => r.ended, 2000);
  });
});
