/**
 * Rate limits through the started app, with the limiter's clock held still and moved by hand:
 * 30 calls, 6 of them costly, per user in a sliding 10 s window, on the client surface only.
 * Users are named by a trusted gateway key (act-as); a key naming no user spends its own
 * (service) budget.
 */
import { randomUUID } from 'node:crypto';
import type { Response } from 'supertest';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';
import { RateLimitClock } from './rate-limit.guard';

let t: TestApp;
let now = 0;
beforeAll(async () => {
  t = await startTestApp({
    RATE_LIMIT_WINDOW_MS: '10000',
    RATE_LIMIT_CALLS: '30',
    RATE_LIMIT_COSTLY: '6',
    RATE_LIMIT_SERVICE_CALLS: '30',
    RATE_LIMIT_SERVICE_COSTLY: '6',
  });
  jest.spyOn(t.app.get(RateLimitClock), 'now').mockImplementation(() => now);
});
afterAll(async () => {
  await t.close();
});
// Every test starts with every budget whole.
beforeEach(() => {
  now += 1_000_000;
});

const USER = 'X-Runledger-User';

/** The gateway's key names the user (percent-encoded); without a user, the key acts as itself. */
function withUser<T extends { set(name: string, value: string): T }>(req: T, user?: string): T {
  return user === undefined ? req : req.set(USER, encodeURIComponent(user));
}
const keyFor = (user?: string) => (user === undefined ? KEYS.tenantA : KEYS.gatewayA);

const listThreads = (user?: string, key = keyFor(user)) =>
  withUser(t.http().get('/v1/threads').set(t.auth(key)), user);

const append = (runId: string, events: object[], user?: string, key = keyFor(user)) =>
  withUser(t.http().post(`/v1/runs/${runId}/events`).set(t.auth(key)), user).send({ events });

const started = () => ({
  type: 'run.started',
  data: { threadId: `thread-${randomUUID()}`, agent: 'coder', source: 'api', title: 'Limits' },
});
const message = (text: string) => ({
  type: 'message.added',
  data: { messageId: randomUUID(), role: 'user', text },
});
const startRun = (user?: string, key = keyFor(user)) =>
  append(`run-${randomUUID()}`, [started()], user, key);
const turn = () => ({ type: 'turn.started', data: { turnId: randomUUID(), source: 'typed' } });
/** A user starting a turn of a run the runtime started: the client surface starting work. */
async function startTurn(user: string, key = keyFor(user)): Promise<Response> {
  const runId = `run-${randomUUID()}`;
  expect((await append(runId, [started()], undefined, KEYS.runtimeA)).status).toBe(201);
  return append(runId, [turn()], user, key);
}

/** The statuses of `n` calls made one after another. */
async function statuses(n: number, call: () => PromiseLike<Response>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i += 1) out.push((await call()).status);
  return out;
}
const count = (list: number[], status: number) => list.filter((s) => s === status).length;

function expectRefused(res: Response, limit: 'calls' | 'costly', retryAfterSeconds: number) {
  expect(res.status).toBe(429);
  expect(res.headers['retry-after']).toBe(String(retryAfterSeconds));
  expect(res.body).toEqual({
    error: 'rate_limited',
    message: expect.stringMatching(limit === 'costly' ? /6 costly calls.*10 s/ : /30 calls.*10 s/),
    details: { limit, retryAfterSeconds },
  });
}

describe('rate limits', () => {
  it('refuses the 31st call in a window with 429 and Retry-After from the oldest call', async () => {
    expect((await listThreads()).status).toBe(200);
    now += 4_000;
    expect(count(await statuses(29, () => listThreads()), 200)).toBe(29);
    expectRefused(await listThreads(), 'calls', 6);
  });

  it('does not count refused calls: as the window slides, exactly the freed calls are allowed', async () => {
    const first = now;
    expect((await listThreads('slide')).status).toBe(200);
    now = first + 4_000;
    expect(count(await statuses(29, () => listThreads('slide')), 200)).toBe(29);
    expect(count(await statuses(10, () => listThreads('slide')), 429)).toBe(10);
    // The first call leaves the window: one call fits, however many were refused.
    now = first + 10_000;
    expect(await statuses(3, () => listThreads('slide'))).toEqual([200, 429, 429]);
    // The 29 leave too; the window holds only the call just allowed.
    now = first + 14_000;
    const again = await statuses(35, () => listThreads('slide'));
    expect(again.slice(0, 29)).toEqual(Array(29).fill(200));
    expect(again.slice(29)).toEqual(Array(6).fill(429));
  });

  it("refuses a user's 7th costly call (a batch starting a turn) and records nothing", async () => {
    expect(count(await statuses(6, () => startTurn('costly')), 201)).toBe(6);
    now += 2_500;
    const runId = `run-${randomUUID()}`;
    expect((await append(runId, [started()], undefined, KEYS.runtimeA)).status).toBe(201);
    expectRefused(await append(runId, [turn()], 'costly'), 'costly', 8);
    const read = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
    expect(read.body.events.map((e: { type: string }) => e.type)).toEqual(['run.started']);
    // The costly calls were calls too: 24 plain calls are left.
    const plain = await statuses(25, () => listThreads('costly'));
    expect(count(plain, 200)).toBe(24);
    expect(plain[24]).toBe(429);
  });

  it('lets a runtime key start 50 runs in 10 s: the log is not the client surface', async () => {
    const runs = await statuses(50, () => startRun(undefined, KEYS.runtimeA));
    expect(runs).toEqual(Array(50).fill(201));
    // Nor did they spend the runtime's own budget for the client surface.
    expect(count(await statuses(30, () => listThreads(undefined, KEYS.runtimeA)), 200)).toBe(30);
  });

  it('does not count other appends, nor run reads', async () => {
    const runId = `run-${randomUUID()}`;
    expect((await append(runId, [started()], 'firehose')).status).toBe(201);
    const appends = await statuses(40, () => append(runId, [message('more')], 'firehose'));
    expect(appends).toEqual(Array(40).fill(201));
    for (const path of ['events', 'replay', 'audit']) {
      const reads = await statuses(12, () =>
        withUser(t.http().get(`/v1/runs/${runId}/${path}`).set(t.auth(KEYS.gatewayA)), 'firehose'),
      );
      expect(reads).toEqual(Array(12).fill(200));
    }
    expect((await t.http().get('/health/live')).status).toBe(200);
    // Not even the run.started append counted.
    const listed = await statuses(31, () => listThreads('firehose'));
    expect(count(listed, 200)).toBe(30);
    expect(listed[30]).toBe(429);
  });

  it('limits every /v1/threads route, not just the list', async () => {
    const runId = `run-${randomUUID()}`;
    const threadId = `thread-${randomUUID()}`;
    const start = { ...started(), data: { ...started().data, threadId } };
    expect((await append(runId, [start], 'reader')).status).toBe(201);
    const paths = [
      `/v1/threads/${threadId}`,
      `/v1/threads/${threadId}/voice-seed`,
      `/v1/threads/${threadId}/tool-results/tc-1`,
    ];
    let i = 0;
    const calls = await statuses(31, () =>
      withUser(
        t
          .http()
          .get(paths[i++ % paths.length])
          .set(t.auth(KEYS.gatewayA)),
        'reader',
      ),
    );
    expect(count(calls, 429)).toBe(1);
    expect(calls[30]).toBe(429);
  });

  it('gives another user of the same tenant (X-Runledger-User) its own budget', async () => {
    expect(count(await statuses(31, () => listThreads()), 200)).toBe(30);
    expect(count(await statuses(31, () => listThreads('alice')), 200)).toBe(30);
    expect((await listThreads('  alice  ')).status).toBe(429); // trimmed: the same user
    expect(count(await statuses(7, () => startTurn('bob')), 201)).toBe(6);
    expect((await listThreads('bob')).status).toBe(200);
    // Łukasz, percent-encoded, is one user: not 'Łukasz' mangled, not anyone else.
    expect(count(await statuses(31, () => listThreads('Łukasz')), 200)).toBe(30);
    expect((await listThreads('Lukasz')).status).toBe(200);
  });

  it('gives two keys of one tenant, without the header, a budget each', async () => {
    expect(count(await statuses(31, () => listThreads(undefined, KEYS.tenantA)), 200)).toBe(30);
    expect(count(await statuses(31, () => listThreads(undefined, KEYS.readerA)), 200)).toBe(30);
  });

  it('gives another tenant its own budget, even for a user of the same name', async () => {
    expect(count(await statuses(31, () => listThreads('carol', KEYS.gatewayA)), 200)).toBe(30);
    expect(count(await statuses(31, () => listThreads('carol', KEYS.gatewayB)), 200)).toBe(30);
  });

  it('refuses a key without act-as that names a user, 403, spending nothing', async () => {
    for (const key of [KEYS.tenantA, KEYS.runtimeA, KEYS.anaA]) {
      const res = await listThreads('mallory', key);
      expect(res.status).toBe(403);
      expect(res.body).toMatchObject({
        error: 'forbidden',
        message: expect.stringMatching(/act-as/),
      });
    }
    // Rotating the header gets a non-trusted key nothing: every call is refused.
    const rotated = await Promise.all(
      Array.from({ length: 40 }, (_, i) => listThreads(`user-${i}`, KEYS.runtimeA)),
    );
    expect(rotated.map((r) => r.status)).toEqual(Array(40).fill(403));
    expect(count(await statuses(31, () => listThreads(undefined, KEYS.runtimeA)), 200)).toBe(30);
  });

  it('answers an invalid X-Runledger-User 400 in the API error shape', async () => {
    for (const bad of ['x'.repeat(129), 'al\tice']) {
      const res = await listThreads(bad);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({
        error: 'validation_failed',
        message: expect.stringContaining('X-Runledger-User'),
        details: [{ field: 'X-Runledger-User' }],
      });
    }
    expect((await listThreads('x'.repeat(128))).status).toBe(200);
  });

  it('refuses X-Runledger-User sent twice, rather than joining two names into one', async () => {
    // node would join two lines into one name, "Ana, Bob": a user no one named.
    const res = await t
      .http()
      .get('/v1/threads')
      .set(t.auth(KEYS.gatewayA))
      .set({ [USER]: ['Ana', 'Bob'] });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      error: 'validation_failed',
      details: [{ field: 'X-Runledger-User' }],
    });
  });

  it('spends nothing on a call refused 401 or 403', async () => {
    const anonymous = await statuses(5, () => t.http().get('/v1/threads'));
    expect(anonymous).toEqual(Array(5).fill(401));
    const forbidden = await statuses(10, () => startRun(undefined, KEYS.readerA));
    expect(forbidden).toEqual(Array(10).fill(403));
    expect(count(await statuses(31, () => listThreads(undefined, KEYS.readerA)), 200)).toBe(30);
  });

  it.each([
    ['steer', (id: string) => `/v1/runs/${id}/steer`],
    ['resolve', (id: string) => `/v1/runs/${id}/approvals/ap-1/resolve`],
    ['answer', (id: string) => `/v1/threads/${id}/approvals/answer`],
  ])('counts %s as costly', async (name, path) => {
    const call = () =>
      withUser(
        t
          .http()
          .post(path(`missing-${randomUUID()}`))
          .set(t.auth(KEYS.gatewayA)),
        `cmd-${name}`,
      ).send({});
    const answers = await statuses(6, call);
    expect(answers.filter((s) => s === 429)).toEqual([]);
    expectRefused(await call(), 'costly', 10);
  });

  // DESIGN.md: costly calls are "commands that start or redirect work". Stopping a run starts
  // nothing (and must stay possible after a burst of steers), and consume is the runtime's
  // check before it acts, not a client command: each spends a plain call only.
  it.each([
    ['stop', (id: string) => `/v1/runs/${id}/stop`],
    ['consume', () => '/v1/receipts/consume'],
  ])('counts %s as a plain call, not a costly one', async (name, path) => {
    const call = () =>
      withUser(
        t
          .http()
          .post(path(`missing-${randomUUID()}`))
          .set(t.auth(KEYS.gatewayA)),
        `plain-${name}`,
      ).send({});
    const answers = await statuses(30, call);
    expect(answers.filter((s) => s === 429)).toEqual([]);
    expectRefused(await call(), 'calls', 10);
  });
});
