/**
 * "What needs me" through the started app: a page, a live SSE stream resumed with
 * Last-Event-ID, and per-user seen cursors, on a real SQLite file.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';
import { isReader, SseReader } from '../testing/sse-reader';
import { SURFACE_FILE, SurfaceService } from '../surface/surface.service';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ READ_WAIT_MS: '2000' });
  await t.app.listen(0, '127.0.0.1');
});
afterAll(async () => {
  await t.close();
});

async function append(runId: string, events: object[], key = KEYS.tenantA): Promise<number> {
  const res = await t.http().post(`/v1/runs/${runId}/events`).set(t.auth(key)).send({ events });
  expect(res.status).toBe(201);
  return res.body.position as number;
}

const approval = (approvalId: string) => ({
  type: 'approval.requested',
  data: {
    approvalId,
    toolCallId: `call-${approvalId}`,
    toolName: 'deploy',
    input: { env: 'prod' },
    question: 'Deploy to prod?',
  },
});

/** A thread whose run blocks on an approval and then finishes; answers the two positions. */
async function blockThenFinish(
  threadId: string,
  metadata: Record<string, unknown> = {},
  key = KEYS.tenantA,
) {
  const runId = `run-${randomUUID()}`;
  await append(
    runId,
    [
      {
        type: 'run.started',
        data: { threadId, agent: 'ops', source: 'api', title: 'Ship it' },
        metadata,
      },
    ],
    key,
  );
  const blocked = await append(runId, [approval('ap1'), approval('ap2')], key);
  const finished = await append(
    runId,
    [{ type: 'run.finished', data: { status: 'failed', errorText: 'deploy refused' } }],
    key,
  );
  return { runId, blocked, finished };
}

function list(query: string, headers: Record<string, string> = t.auth()) {
  return t.http().get(`/v1/notifications${query}`).set(headers);
}

async function stream(path: string, headers: Record<string, string> = {}): Promise<SseReader> {
  const reader = await SseReader.open(t.app, path, { ...t.auth(), ...headers });
  if (!isReader(reader)) throw new Error(`stream refused: ${JSON.stringify(reader)}`);
  return reader;
}

const items = (reader: SseReader) =>
  reader.events('notification').map((m) => JSON.parse(m.data!) as Record<string, unknown>);

describe('GET /v1/notifications', () => {
  it("counts a thread as every one of its users', however many prompted it", async () => {
    const threadId = `t-${randomUUID()}`;
    const runId = `run-${randomUUID()}`;
    const users = Array.from({ length: 40 }, (_, i) => `crowd-${i}-${randomUUID()}`);
    await append(runId, [
      {
        type: 'run.started',
        data: { threadId, agent: 'ops', source: 'api' },
        metadata: { user: users[0] },
      },
      ...users.flatMap((user, i) => [
        {
          type: 'turn.started',
          data: { turnId: `turn-${i}`, source: 'typed' },
          metadata: { user },
        },
        { type: 'turn.finished', data: { turnId: `turn-${i}`, status: 'completed' } },
      ]),
    ]);
    const blocked = await append(runId, [approval(`ap-${randomUUID()}`)]);
    for (const user of [users[0], users[31], users[32], users[39]]) {
      const res = await list(`?after=${blocked - 1}&user=${user}&minPosition=${blocked}`);
      expect({
        user,
        positions: res.body.notifications.map((i: { position: number }) => i.position),
      }).toEqual({
        user,
        positions: [blocked],
      });
    }
  });

  it('a thread that blocks then finishes gives exactly two items, in order, to its tenant only', async () => {
    const threadId = `t-${randomUUID()}`;
    const before = await append(`run-${randomUUID()}`, [
      {
        type: 'run.started',
        data: { threadId: `other-${randomUUID()}`, agent: 'a', source: 'api' },
      },
    ]);
    const { runId, blocked, finished } = await blockThenFinish(threadId);
    const res = await list(`?after=${before}&minPosition=${finished}`);
    expect(res.status).toBe(200);
    const mine = (res.body.notifications as { threadId: string }[]).filter(
      (n) => n.threadId === threadId,
    );
    expect(mine).toEqual([
      expect.objectContaining({
        threadId,
        runId,
        kind: 'blocked',
        state: 'blocked',
        title: 'Ship it',
        summary: 'approval requested: Deploying: prod | Deploy to prod?',
        position: blocked - 1,
        approvalId: 'ap1',
      }),
      expect.objectContaining({
        threadId,
        runId,
        kind: 'finished',
        state: 'failed',
        summary: 'run failed | deploy refused',
        position: finished,
      }),
    ]);
    expect(res.body.position).toBeGreaterThanOrEqual(finished);

    const metrics = await t.http().get('/metrics');
    expect(metrics.text).toMatch(/runledger_notifications_total\{kind="blocked"\} [1-9]/);
    expect(metrics.text).toMatch(/runledger_notifications_total\{kind="finished"\} [1-9]/);

    const other = await list(`?after=0&minPosition=${finished}`, t.auth(KEYS.tenantB));
    expect(other.status).toBe(200);
    expect(JSON.stringify(other.body.notifications)).not.toContain(threadId);
  });

  it("filters to one user's threads with ?user=, and ?user=me is the caller", async () => {
    const anas = `t-${randomUUID()}`;
    const bobs = `t-${randomUUID()}`;
    await blockThenFinish(anas, { user: 'ana' });
    const { finished } = await blockThenFinish(bobs, { user: 'bob' });
    const byName = await list(`?after=0&user=ana&limit=100&minPosition=${finished}`);
    const threads = new Set(
      (byName.body.notifications as { threadId: string }[]).map((n) => n.threadId),
    );
    expect(threads.has(anas)).toBe(true);
    expect(threads.has(bobs)).toBe(false);
    const me = await list(`?after=0&user=me&limit=100`, {
      ...t.auth(KEYS.gatewayA),
      'X-Runledger-User': 'bob',
    });
    const mine = new Set((me.body.notifications as { threadId: string }[]).map((n) => n.threadId));
    expect([...mine]).toEqual([bobs]);
  });

  it('refuses a bad query with a 400 naming it', async () => {
    const res = await list('?after=-1');
    expect(res.status).toBe(400);
    expect(res.body.details[0]).toMatchObject({ field: 'after' });
    expect((await list('?limit=1000')).body.details[0]).toMatchObject({ field: 'limit' });
  });

  it('refuses ?after= past the log head: the items up to it would be skipped unseen', async () => {
    const { finished } = await blockThenFinish(`t-${randomUUID()}`);
    const ahead = await list(`?after=${finished + 50}`);
    expect(ahead.status).toBe(400);
    expect(ahead.body.details[0]).toMatchObject({ field: 'after', rule: 'max' });
    expect((await list(`?after=${finished}`)).status).toBe(200);
  });
});

describe('seen cursors', () => {
  // A gateway names each reader: only an act-as key may send X-Runledger-User.
  const user = () => ({ ...t.auth(KEYS.gatewayA), 'X-Runledger-User': `reader-${randomUUID()}` });

  it('after seen, a page without ?after= holds neither item again, only what is new', async () => {
    const headers = user();
    const first = await blockThenFinish(`t-${randomUUID()}`);
    const seen = await t
      .http()
      .post('/v1/notifications/seen')
      .set(headers)
      .send({ position: first.finished });
    expect(seen.status).toBe(200);
    expect(seen.body).toEqual({ seen: first.finished });

    const threadId = `t-${randomUUID()}`;
    const second = await blockThenFinish(threadId);
    const page = await list(`?minPosition=${second.finished}`, headers);
    expect(page.body.seen).toBe(first.finished);
    const positions = (page.body.notifications as { position: number }[]).map((n) => n.position);
    expect(positions.every((p) => p > first.finished)).toBe(true);
    expect(positions).toEqual(expect.arrayContaining([second.blocked - 1, second.finished]));

    // Another user of the same key has a cursor of its own.
    const fresh = await list(`?limit=100`, user());
    expect(fresh.body.seen).toBe(0);
  });

  it("takes a burst of one user's seen calls, every one answered, the cursor at the highest", async () => {
    const headers = user();
    const { finished } = await blockThenFinish(`t-${randomUUID()}`);
    const positions = Array.from({ length: 30 }, (_, i) => finished - 29 + i);
    const answers = await Promise.all(
      positions.map((position) =>
        t.http().post('/v1/notifications/seen').set(headers).send({ position }),
      ),
    );
    expect(answers.map((res) => res.status)).toEqual(positions.map(() => 200));
    const page = await list('?limit=1', headers);
    expect(page.body.seen).toBe(finished);
  });

  it('never moves back, and refuses a position past the log head or a bad body, changing nothing', async () => {
    const headers = user();
    const { finished } = await blockThenFinish(`t-${randomUUID()}`);
    await t.http().post('/v1/notifications/seen').set(headers).send({ position: finished });
    const back = await t.http().post('/v1/notifications/seen').set(headers).send({ position: 1 });
    expect(back.body).toEqual({ seen: finished });

    const ahead = await t
      .http()
      .post('/v1/notifications/seen')
      .set(headers)
      .send({ position: finished + 1_000_000 });
    expect(ahead.status).toBe(400);
    expect(ahead.body.details[0]).toMatchObject({ field: 'position', rule: 'max' });
    for (const body of [{}, { position: 'x' }, { position: 1.5 }, { position: 1, extra: 1 }]) {
      const bad = await t.http().post('/v1/notifications/seen').set(headers).send(body);
      expect(bad.status).toBe(400);
      expect(bad.body.error).toBe('validation_failed');
    }
    expect((await list('', headers)).body.seen).toBe(finished);
  });
});

describe('GET /v1/notifications/stream', () => {
  it('streams both items live; resuming with Last-Event-ID gets neither again, only what is new', async () => {
    const threadId = `t-${randomUUID()}`;
    const start = await append(`run-${randomUUID()}`, [
      { type: 'run.started', data: { threadId: `x-${randomUUID()}`, agent: 'a', source: 'api' } },
    ]);
    const live = await stream(`/v1/notifications/stream?after=${start}`);
    const { blocked, finished } = await blockThenFinish(threadId);
    await live.until((r) => items(r).filter((i) => i.threadId === threadId).length === 2);
    const mine = items(live).filter((i) => i.threadId === threadId);
    expect(mine.map((i) => [i.kind, i.position])).toEqual([
      ['blocked', blocked - 1],
      ['finished', finished],
    ]);
    const lastId = live.events('notification').at(-1)!.id!;
    expect(Number(lastId)).toBe(finished);
    live.close();

    const resumed = await stream(`/v1/notifications/stream?after=0`, { 'Last-Event-ID': lastId });
    const next = `t-${randomUUID()}`;
    const more = await blockThenFinish(next);
    await resumed.until((r) => items(r).some((i) => i.position === more.finished));
    expect(items(resumed).map((i) => i.threadId)).toEqual([next, next]);
    resumed.close();
  });

  it('refuses a start past the log head, by Last-Event-ID or ?after=, before it streams', async () => {
    const { finished } = await blockThenFinish(`t-${randomUUID()}`);
    for (const [query, headers, field] of [
      ['', { 'Last-Event-ID': String(finished + 50) }, 'Last-Event-ID'],
      [`?after=${finished + 50}`, {}, 'after'],
    ] as const) {
      const refused = await SseReader.open(t.app, `/v1/notifications/stream${query}`, {
        ...t.auth(),
        ...headers,
      });
      if (isReader(refused)) throw new Error(`streamed from past the head (${field})`);
      expect(refused.status).toBe(400);
      expect(refused.body).toMatchObject({ details: [{ field, rule: 'max' }] });
    }
  });

  it('ends open streams when the app shuts down, so the shutdown does not wait for clients', async () => {
    const other = await startTestApp();
    await other.app.listen(0, '127.0.0.1');
    const reader = await SseReader.open(other.app, '/v1/notifications/stream', other.auth());
    if (!isReader(reader)) throw new Error('stream refused');
    await other.close();
    await reader.until((r) => r.ended);
    expect(reader.ended).toBe(true);
  });

  it('starts from now for a caller who never marked anything seen', async () => {
    const old = await blockThenFinish(`t-${randomUUID()}`);
    const reader = await stream('/v1/notifications/stream', {
      ...t.auth(KEYS.gatewayA),
      'X-Runledger-User': `new-${randomUUID()}`,
    });
    await reader.until((r) => r.messages.length > 0);
    expect(Number(reader.messages[0].id)).toBeGreaterThanOrEqual(old.finished);
    const threadId = `t-${randomUUID()}`;
    const { finished } = await blockThenFinish(threadId);
    await reader.until((r) => items(r).some((i) => i.position === finished));
    expect(items(reader).every((i) => (i.position as number) > old.finished)).toBe(true);
    reader.close();
  });

  it("starts after the caller's seen cursor when given no position", async () => {
    const headers = { ...t.auth(KEYS.gatewayA), 'X-Runledger-User': `streamer-${randomUUID()}` };
    const old = await blockThenFinish(`t-${randomUUID()}`);
    await t
      .http()
      .post('/v1/notifications/seen')
      .set({ ...t.auth(), ...headers })
      .send({ position: old.finished });
    const reader = await stream('/v1/notifications/stream', headers);
    const threadId = `t-${randomUUID()}`;
    const { finished } = await blockThenFinish(threadId);
    await reader.until((r) => items(r).some((i) => i.position === finished));
    expect(items(reader).every((i) => (i.position as number) > old.finished)).toBe(true);
    expect(reader.messages[0].id).toBe(String(old.finished));
    reader.close();
  });
});

describe('GET /v1/notifications/stream?minPosition=', () => {
  it('waits for the position as the list does: streams once passed, 503 past the view, 400 malformed', async () => {
    const threadId = `t-${randomUUID()}`;
    const { finished } = await blockThenFinish(threadId);
    const reader = await stream(`/v1/notifications/stream?after=0&minPosition=${finished}`);
    await reader.until((r) => items(r).some((i) => i.position === finished));
    reader.close();

    const beyond = await SseReader.open(
      t.app,
      `/v1/notifications/stream?minPosition=${finished + 1_000_000}`,
      t.auth(),
    );
    expect(isReader(beyond)).toBe(false);
    expect(beyond).toMatchObject({ status: 503, body: { error: 'projection_behind' } });

    const malformed = await SseReader.open(
      t.app,
      '/v1/notifications/stream?minPosition=abc',
      t.auth(),
    );
    expect(malformed).toMatchObject({ status: 400 });
  });
});

/** Starts a run in `app`, then asks /health/ready until it is not ready (2 s at most). */
async function startRunUntilNotReady(app: TestApp) {
  const res = await app
    .http()
    .post(`/v1/runs/run-${randomUUID()}/events`)
    .set(app.auth())
    .send({
      events: [{ type: 'run.started', data: { threadId: 't', agent: 'a', source: 'api' } }],
    });
  expect(res.status).toBe(201);
  let health = await app.http().get('/health/ready');
  for (let i = 0; i < 100 && health.status === 200; i += 1) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    health = await app.http().get('/health/ready');
  }
  return { position: res.body.position as number, health };
}

describe('a stopped notification view', () => {
  it('turns /health/ready to 503 naming it, and a query waiting on it answers 503 at once', async () => {
    const other = await startTestApp();
    try {
      const ready = await other.http().get('/health/ready');
      expect(ready.body.checks).toMatchObject({ clientSurface: 'ok' });
      // The view's file becomes unwritable: the next batch cannot commit.
      other.app.get(SurfaceService).store.close();
      const { position, health } = await startRunUntilNotReady(other);
      expect(health.status).toBe(503);
      expect(health.body.checks.clientSurface).toMatch(/client surface stopped/);
      const page = await other
        .http()
        .get(`/v1/notifications?minPosition=${position}`)
        .set(other.auth());
      expect(page.status).toBe(503);
      expect(page.body.error).toBe('projection_stopped');
    } finally {
      await other.close().catch(() => undefined);
    }
  });
});

describe('a notification view that stopped', () => {
  it('starts again from its checkpoint by itself once the cause has passed, and catches up', async () => {
    const other = await startTestApp();
    // Another writer holds the view's file locked: the follower's next commit fails.
    const lock = new Database(join(other.config.dataDir, SURFACE_FILE), { timeout: 0 });
    try {
      lock.exec('BEGIN IMMEDIATE');
      const started = await startRunUntilNotReady(other);
      let health = started.health;
      expect(health.body.checks.clientSurface).toMatch(/client surface stopped/);

      lock.exec('ROLLBACK');
      for (let i = 0; i < 200 && health.status !== 200; i += 1) {
        await new Promise((resolve) => setTimeout(resolve, 25));
        health = await other.http().get('/health/ready');
      }
      expect(health.body.checks.clientSurface).toBe('ok');
      const page = await other
        .http()
        .get(`/v1/notifications?minPosition=${started.position}`)
        .set(other.auth());
      expect(page.status).toBe(200);
    } finally {
      if (lock.inTransaction) lock.exec('ROLLBACK');
      lock.close();
      await other.close().catch(() => undefined);
    }
  }, 30_000);
});
