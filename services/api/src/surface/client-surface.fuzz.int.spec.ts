/**
 * Random bodies and queries on the client surface's routes (bindings, prompt, seen,
 * notifications): never a 5xx, an error body under a page, and a refusal writes nothing.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { startTestApp, type TestApp } from '../testing/test-app';

let t: TestApp;
let log: EventStore;
let threadId: string;
beforeAll(async () => {
  t = await startTestApp();
  log = t.app.get(EVENT_STORE);
  const bound = await t
    .http()
    .put('/v1/bindings')
    .set(t.auth())
    .send({ channel: 'telegram', account: 'fuzz', chat: 'c' });
  threadId = bound.body.threadId as string;
});
afterAll(async () => {
  await t.close();
});

const PAGE = 16 * 1024;

const value = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom('', ' ', '\u0000', 'x'.repeat(300), -1, 1.5, 2 ** 60, null, true),
);

/** Objects shaped like the routes' bodies, with random values and stray keys. */
const body = fc.oneof(
  value,
  fc.record(
    {
      channel: value,
      account: value,
      chat: value,
      topic: value,
      threadId: value,
      text: value,
      source: value,
      agent: value,
      binding: value,
      position: value,
      extra: value,
    },
    { requiredKeys: [] },
  ),
);

const writes = [
  { method: 'put', path: () => '/v1/bindings' },
  { method: 'post', path: () => `/v1/threads/${threadId}/prompt` },
  { method: 'post', path: () => `/v1/threads/${encodeURIComponent(`x/${randomUUID()}`)}/prompt` },
  { method: 'post', path: () => '/v1/notifications/seen' },
] as const;

describe('client surface under random input', () => {
  it('write routes answer 2xx or a small 4xx, and a 4xx writes nothing', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...writes), body, async (route, payload) => {
        const before = await log.headPosition();
        const res = await t
          .http()
          [route.method](route.path())
          .set({ ...t.auth(), 'Content-Type': 'application/json' })
          .send(JSON.stringify(payload));
        expect(res.status).toBeLessThan(500);
        if (res.status >= 400) {
          expect(JSON.stringify(res.body).length).toBeLessThan(PAGE);
          expect(typeof res.body.error).toBe('string');
          expect(await log.headPosition()).toBe(before);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('read routes answer 200 or a small 4xx for any query', async () => {
    const query = fc.dictionary(
      fc.constantFrom('after', 'user', 'limit', 'minPosition', 'channel', 'account'),
      fc.oneof(
        fc.string({ maxLength: 40 }),
        fc.constantFrom('-1', '1e3', '9'.repeat(30), 'me'),
        // A repeated parameter arrives as an array.
        fc.array(fc.constantFrom('1', 'me', 'telegram'), { minLength: 2, maxLength: 3 }),
      ),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('/v1/notifications', '/v1/bindings'),
        query,
        async (path, q) => {
          const res = await t
            .http()
            .get(path)
            .query(q)
            .set({ ...t.auth() });
          expect([200, 400, 503]).toContain(res.status);
          expect(JSON.stringify(res.body).length).toBeLessThan(PAGE * 4);
        },
      ),
      { numRuns: 100 },
    );
  });
});
