/**
 * Browser streams: a key holder mints a short-lived token for one run's or thread's stream,
 * and a client without an Authorization header (EventSource) opens exactly that stream with
 * `?token=`: not another thread's, not another route, not after it expired. And CORS, when
 * configured, lets the listed origins call the API.
 */
import fc from 'fast-check';
import { signStreamToken } from '@runledger/domain';
import { isReader, SseReader } from '../testing/sse-reader';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';

const SECRET = 'stream-token-int-secret-0123456789abcdef';

async function listening(env: Record<string, string> = {}): Promise<TestApp> {
  const app = await startTestApp({ RECEIPT_SECRET: SECRET, ...env });
  await app.app.listen(0, '127.0.0.1');
  return app;
}

async function startRun(t: TestApp, runId: string, threadId: string, key = KEYS.tenantA) {
  const res = await t
    .http()
    .post(`/v1/runs/${runId}/events`)
    .set(t.auth(key))
    .send({ events: [{ type: 'run.started', data: { threadId, agent: 'ui', source: 'api' } }] });
  expect(res.status).toBe(201);
}

async function mint(t: TestApp, body: object, key = KEYS.tenantA, user?: string) {
  const request = t.http().post('/v1/stream-tokens').set(t.auth(key));
  return (user === undefined ? request : request.set('X-Runledger-User', user)).send(body);
}

/** Opens `path` and reads it until its first recorded event, or answers the refusal. */
async function open(t: TestApp, path: string, headers: Record<string, string> = {}) {
  const reader = await SseReader.open(t.app, path, headers);
  if (isReader(reader)) await reader.until((r) => r.recorded().length === 1);
  return reader;
}

const statusOf = (reader: SseReader | { status: number }) =>
  isReader(reader) ? 200 : reader.status;

describe('stream tokens', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening();
    await startRun(t, 'run-1', 'thread-1');
    await startRun(t, 'run-2', 'thread-2');
    await startRun(t, 'run-b', 'thread-b', KEYS.tenantB);
  });
  afterAll(() => t.close());

  it('opens the thread it was minted for, without an Authorization header', async () => {
    const res = await mint(t, { threadId: 'thread-1' });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ kind: 'thread', id: 'thread-1', token: expect.any(String) });
    expect(Date.parse(res.body.expiresAt) - Date.now()).toBeLessThanOrEqual(60_000);
    const reader = await SseReader.open(t.app, `${res.body.streamUrl}&from=0`, {});
    if (!isReader(reader)) throw new Error(`answered ${reader.status}`);
    try {
      await reader.until((r) => r.recorded().length === 1);
      expect(reader.recorded()[0]).toMatchObject({
        type: 'run.started',
        data: { threadId: 'thread-1' },
      });
    } finally {
      reader.close();
    }
  });

  it('opens a run stream with a run token', async () => {
    const { body } = await mint(t, { runId: 'run-2' });
    const reader = await SseReader.open(t.app, `${body.streamUrl}&from=0`, {});
    if (!isReader(reader)) throw new Error(`answered ${reader.status}`);
    try {
      await reader.until((r) => r.recorded().length === 1);
      expect(reader.recorded()[0].metadata).toMatchObject({ runId: 'run-2' });
    } finally {
      reader.close();
    }
  });

  it("does not open another thread's stream, nor the run's own thread, nor another route", async () => {
    const { body: thread } = await mint(t, { threadId: 'thread-1' });
    const { body: run } = await mint(t, { runId: 'run-1' });
    const token = (b: { token: string }) => encodeURIComponent(b.token);
    for (const path of [
      `/v1/threads/thread-2/stream?token=${token(thread)}`,
      `/v1/threads/thread-1/stream?token=${token(run)}`,
      `/v1/threads/thread-1?token=${token(thread)}`,
      `/v1/runs/run-1/events?token=${token(run)}`,
    ]) {
      const res = await t.http().get(path);
      expect({ path, status: res.status, error: res.body.error }).toEqual({
        path,
        status: 401,
        error: 'unauthorized',
      });
    }
  });

  it('refuses an expired token and a forged one', async () => {
    const expired = signStreamToken(
      {
        tenant: 'tenant-a',
        key: 'k',
        kind: 'thread',
        id: 'thread-1',
        exp: Math.floor(Date.now() / 1000) - 1,
      },
      SECRET,
    );
    const forged = signStreamToken(
      { tenant: 'tenant-a', key: 'k', kind: 'thread', id: 'thread-1', exp: 9_999_999_999 },
      'another-secret-0123456789abcdef0123',
    );
    for (const [token, reason] of [
      [expired, 'expired'],
      [forged, 'signature'],
    ]) {
      const res = await t
        .http()
        .get(`/v1/threads/thread-1/stream?token=${encodeURIComponent(token)}`);
      expect(res.status).toBe(401);
      expect(res.body.message).toContain(reason);
    }
  });

  it('answers any hostile ?token= with a JSON 401, never a 5xx or a stream', async () => {
    const valid = (await mint(t, { threadId: 'thread-1' })).body.token as string;
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string(),
          fc.base64String(),
          fc.constant(`${valid}x`),
          fc.constant(valid.replace('.', '..')),
          fc.constant(valid.split('.').reverse().join('.')),
          fc.string().map((tail) => `${valid.split('.')[0]}.${tail}`),
        ),
        async (token) => {
          const res = await t
            .http()
            .get(`/v1/threads/thread-1/stream?token=${encodeURIComponent(token)}`);
          expect(res.status).toBe(401);
          expect(res.body.error).toBe('unauthorized');
        },
      ),
      { numRuns: 60 },
    );
  });

  it("mints nothing for another tenant's thread or a missing run (404) and names a bad body (400)", async () => {
    expect((await mint(t, { threadId: 'thread-b' })).status).toBe(404);
    expect((await mint(t, { runId: 'no-such-run' })).status).toBe(404);
    for (const body of [
      {},
      { runId: 'run-1', threadId: 'thread-1' },
      { runId: 7 },
      { thread: 'x' },
    ]) {
      const res = await mint(t, body);
      expect({ body, status: res.status, error: res.body.error }).toEqual({
        body,
        status: 400,
        error: 'validation_failed',
      });
    }
    const unauthenticated = await t.http().post('/v1/stream-tokens').send({ threadId: 'thread-1' });
    expect(unauthenticated.status).toBe(401);
  });
});

describe('a stream opened with a token', () => {
  it("spends the budget of the user who minted it, not one shared by the tenant's browsers", async () => {
    const t = await listening({
      RATE_LIMIT_CALLS: '4',
      RATE_LIMIT_COSTLY: '1',
      RATE_LIMIT_SERVICE_CALLS: '4',
      RATE_LIMIT_SERVICE_COSTLY: '1',
    });
    try {
      await startRun(t, 'run-1', 'thread-1', KEYS.runtimeA);
      // Ana's key is the user Ana; the gateway names Bob. A mint is a call of each one's.
      const ana = (await mint(t, { threadId: 'thread-1' }, KEYS.anaA)).body.streamUrl as string;
      const bob = (await mint(t, { threadId: 'thread-1' }, KEYS.gatewayA, 'bob')).body
        .streamUrl as string;
      const opened: number[] = [];
      for (let i = 0; i < 3; i += 1) {
        const reader = await open(t, `${ana}&from=0`);
        opened.push(statusOf(reader));
        if (isReader(reader)) reader.close();
      }
      expect(opened).toEqual([200, 200, 200]);
      // Bob's browser has its own budget; Ana's fifth call is past hers.
      for (let i = 0; i < 2; i += 1) {
        const reader = await open(t, `${bob}&from=0`);
        expect(statusOf(reader)).toBe(200);
        if (isReader(reader)) reader.close();
      }
      const refused = await open(t, `${ana}&from=0`);
      expect(refused).toMatchObject({ status: 429, body: { error: 'rate_limited' } });
    } finally {
      await t.close();
    }
  });

  it('holds a stream slot of the key that minted it', async () => {
    const t = await listening({ SSE_MAX_STREAMS_PER_KEY: '2' });
    const readers: SseReader[] = [];
    try {
      await startRun(t, 'run-1', 'thread-1', KEYS.runtimeA);
      for (let i = 0; i < 2; i += 1) {
        const reader = await open(t, '/v1/threads/thread-1/stream?from=0', t.auth(KEYS.anaA));
        if (!isReader(reader)) throw new Error(`answered ${reader.status}`);
        readers.push(reader);
      }
      // Ana's key has its two streams open: a token it mints opens no third.
      const ana = (await mint(t, { threadId: 'thread-1' }, KEYS.anaA)).body.streamUrl as string;
      expect(await open(t, `${ana}&from=0`)).toMatchObject({
        status: 429,
        body: { error: 'too_many_streams' },
      });
      // Another key's token holds a slot of its own key, which has none open.
      const gateway = (await mint(t, { threadId: 'thread-1' }, KEYS.gatewayA, 'bob')).body
        .streamUrl as string;
      const reader = await open(t, `${gateway}&from=0`);
      expect(statusOf(reader)).toBe(200);
      if (isReader(reader)) readers.push(reader);
    } finally {
      for (const reader of readers) reader.close();
      await t.close();
    }
  });
});

describe('CORS', () => {
  it('answers a preflight from a listed origin, and says nothing to another', async () => {
    const t = await listening({ CORS_ORIGINS: 'https://app.example,https://ops.example' });
    try {
      const preflight = await t
        .http()
        .options('/v1/threads')
        .set('Origin', 'https://ops.example')
        .set('Access-Control-Request-Method', 'GET')
        .set('Access-Control-Request-Headers', 'authorization');
      expect(preflight.status).toBe(204);
      expect(preflight.headers['access-control-allow-origin']).toBe('https://ops.example');
      expect(preflight.headers['access-control-allow-headers']).toMatch(/Authorization/i);
      const stranger = await t
        .http()
        .get('/v1/threads')
        .set('Origin', 'https://evil.example')
        .set(t.auth());
      expect(stranger.headers['access-control-allow-origin']).toBeUndefined();
    } finally {
      await t.close();
    }
  });

  it('sends no CORS headers when CORS_ORIGINS is unset', async () => {
    const t = await listening();
    try {
      const res = await t
        .http()
        .get('/v1/threads')
        .set('Origin', 'https://app.example')
        .set(t.auth());
      expect(res.status).toBe(200);
      expect(res.headers['access-control-allow-origin']).toBeUndefined();
    } finally {
      await t.close();
    }
  });
});
