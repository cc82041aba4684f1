/** Channel bindings through the started app on a real SQLite file. */
import { randomUUID } from 'node:crypto';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ READ_WAIT_MS: '2000' });
});
afterAll(async () => {
  await t.close();
});

function bind(body: object, key = KEYS.tenantA, user?: string) {
  return t
    .http()
    .put('/v1/bindings')
    .set({ ...t.auth(key), ...(user ? { 'X-Runledger-User': user } : {}) })
    .send(body);
}

function list(query: string, key = KEYS.tenantA) {
  return t.http().get(`/v1/bindings${query}`).set(t.auth(key));
}

const conversation = () => ({
  channel: 'telegram',
  account: `bot-${randomUUID()}`,
  chat: '-100200300',
});

describe('PUT /v1/bindings', () => {
  it('20 racing calls for one conversation give one thread, recorded once', async () => {
    const key = conversation();
    const answers = await Promise.all(Array.from({ length: 20 }, () => bind(key)));
    const threads = new Set(answers.map((a) => a.body.threadId as string));
    expect(threads.size).toBe(1);
    expect(answers.filter((a) => a.status === 201)).toHaveLength(1);
    expect(answers.filter((a) => a.status === 200)).toHaveLength(19);
    const created = answers.find((a) => a.status === 201)!.body;
    const listed = await list(
      `?channel=telegram&account=${key.account}&minPosition=${created.position}`,
    );
    expect(listed.status).toBe(200);
    expect(listed.body.bindings).toEqual([
      {
        bindingId: created.bindingId,
        threadId: created.threadId,
        ...key,
        boundBy: expect.stringMatching(/^key:[0-9a-f]{16}$/),
        boundAt: created.boundAt,
        position: created.position,
      },
    ]);
  });

  it('two topics of one chat are two threads; the chat itself is a third', async () => {
    const key = conversation();
    const a = await bind({ ...key, topic: 'billing' });
    const b = await bind({ ...key, topic: 'shipping' });
    const plain = await bind(key);
    expect([a.status, b.status, plain.status]).toEqual([201, 201, 201]);
    expect(new Set([a.body.threadId, b.body.threadId, plain.body.threadId]).size).toBe(3);
    expect((await bind({ ...key, topic: 'billing' })).body.threadId).toBe(a.body.threadId);
    const listed = await list(`?account=${key.account}&minPosition=${plain.body.position}`);
    expect((listed.body.bindings as { topic?: string }[]).map((x) => x.topic ?? null)).toEqual([
      'billing',
      'shipping',
      null,
    ]);
  });

  it('binds a second channel to an existing thread, independently of the first', async () => {
    const first = await bind(conversation(), KEYS.gatewayA, 'ana');
    expect(first.body.boundBy).toBe('ana');
    const slack = { channel: 'slack', account: `T-${randomUUID()}`, chat: 'C042' };
    const second = await bind({ ...slack, threadId: first.body.threadId });
    expect(second.status).toBe(201);
    expect(second.body.threadId).toBe(first.body.threadId);
    expect(second.body.bindingId).not.toBe(first.body.bindingId);

    const conflict = await bind({ ...slack, threadId: `t-${randomUUID()}` });
    expect(conflict.status).toBe(409);
    expect(conflict.body).toMatchObject({
      error: 'binding_conflict',
      threadId: first.body.threadId,
    });
  });

  it('refuses a thread the tenant does not have, and bad bodies, writing nothing', async () => {
    const key = conversation();
    const missing = await bind({ ...key, threadId: `t-${randomUUID()}` });
    expect(missing.status).toBe(404);
    expect(missing.body.error).toBe('thread_not_found');
    const bad: [object, string][] = [
      [{ ...key, chat: undefined }, 'chat'],
      [{ ...key, chat: '' }, 'chat'],
      [{ ...key, topic: null }, 'topic'],
      [{ ...key, channel: 'tele gram' }, 'channel'],
      [{ ...key, account: 7 }, 'account'],
      [{ ...key, extra: true }, 'extra'],
      [{ ...key, threadId: '../x' }, 'threadId'],
      // Half a character: a store turns it into U+FFFD, and two chats into one.
      [{ ...key, chat: '\ud800' }, 'chat'],
      [{ ...key, account: 'a\udfff' }, 'account'],
      [{ ...key, topic: '\udbff' }, 'topic'],
    ];
    for (const [body, field] of bad) {
      const res = await bind(body);
      expect(res.status).toBe(400);
      expect(res.body.details).toEqual(
        expect.arrayContaining([expect.objectContaining({ field })]),
      );
    }
    const head = await t.http().put('/v1/bindings').set(t.auth()).send(key);
    expect(head.status).toBe(201);
    const listed = await list(`?account=${key.account}&minPosition=${head.body.position}`);
    expect(listed.body.bindings).toHaveLength(1);
  });

  it('lists by any account it binds: 256 characters, however many of them are pairs', async () => {
    const key = { ...conversation(), account: '😀'.repeat(255) + randomUUID().slice(0, 1) };
    const bound = await bind(key);
    expect(bound.status).toBe(201);
    const listed = await list(
      `?account=${encodeURIComponent(key.account)}&minPosition=${bound.body.position}`,
    );
    expect(listed.status).toBe(200);
    expect(listed.body.bindings.map((b: { bindingId: string }) => b.bindingId)).toEqual([
      bound.body.bindingId,
    ]);
    const over = await list(`?account=${encodeURIComponent('😀'.repeat(257))}`);
    expect(over.status).toBe(400);
  });

  it('keeps tenants apart: the same conversation is another thread, and never listed to the other', async () => {
    const key = conversation();
    const a = await bind(key, KEYS.tenantA);
    const b = await bind(key, KEYS.tenantB);
    expect(b.status).toBe(201);
    expect(b.body.threadId).not.toBe(a.body.threadId);
    const other = await list(
      `?account=${key.account}&minPosition=${b.body.position}`,
      KEYS.tenantB,
    );
    expect((other.body.bindings as { threadId: string }[]).map((x) => x.threadId)).toEqual([
      b.body.threadId,
    ]);
    const crossBind = await bind({ ...conversation(), threadId: a.body.threadId }, KEYS.tenantB);
    expect(crossBind.status).toBe(404);
  });

  it('needs the append scope to bind, and read to list', async () => {
    expect((await bind(conversation(), KEYS.readerA)).status).toBe(403);
    expect((await list('', KEYS.readerA)).status).toBe(200);
    expect((await list('?channel=a%20b')).status).toBe(400);
  });
});
