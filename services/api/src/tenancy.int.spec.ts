/**
 * Two tenants using the same run ids, thread ids, event ids, approval ids and tool call ids,
 * on every route: each sees and changes only its own, and a foreign id behaves exactly like a
 * free one. Through the started app on a real SQLite file, SSE through plain node:http.
 */
import { KEYS, startTestApp, type TestApp } from './testing/test-app';
import { isReader, SseReader } from './testing/sse-reader';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
  await t.app.listen(0, '127.0.0.1');
});
afterAll(async () => {
  await t.close();
});

const RUN = 'shared-run';
const THREAD = 'shared-thread';
const A = KEYS.tenantA;
const B = KEYS.tenantB;

/** The same ids for both tenants; only the words differ, so each answer shows whose it is. */
function history(words: string) {
  return [
    {
      id: '00000000-0000-7000-8000-000000000001',
      type: 'run.started',
      data: { threadId: THREAD, agent: 'coder', source: 'typed', title: words },
    },
    {
      id: '00000000-0000-7000-8000-000000000002',
      type: 'message.added',
      data: { messageId: 'm1', role: 'user', text: words },
    },
    {
      id: '00000000-0000-7000-8000-000000000003',
      type: 'turn.started',
      data: { turnId: 'turn-1', source: 'typed' },
    },
    {
      id: '00000000-0000-7000-8000-000000000004',
      type: 'tool.started',
      data: { toolCallId: 'tc-1', toolName: 'lookup', input: { q: words } },
    },
    {
      id: '00000000-0000-7000-8000-000000000005',
      type: 'tool.finished',
      data: { toolCallId: 'tc-1', toolName: 'lookup', output: { found: words }, failed: false },
    },
    {
      id: '00000000-0000-7000-8000-000000000006',
      type: 'approval.requested',
      data: { approvalId: 'ap-1', toolCallId: 'tc-2', toolName: 'deploy', input: { who: words } },
    },
  ];
}

const get = (path: string, key: string) => t.http().get(path).set(t.auth(key));
const post = (path: string, body: object, key: string) =>
  t.http().post(path).set(t.auth(key)).send(body);

describe('two tenants with the same ids', () => {
  let positionA = 0;
  let positionB = 0;

  it('both record the same run id and the same event ids, each in its own run', async () => {
    const a = await post(`/v1/runs/${RUN}/events`, { events: history('alpha') }, A);
    expect(a.status).toBe(201);
    const b = await post(`/v1/runs/${RUN}/events`, { events: history('bravo') }, B);
    expect(b.status).toBe(201);
    expect(b.body).toMatchObject({ firstRevision: 0, lastRevision: 5 });
    positionA = a.body.position;
    positionB = b.body.position;
    // A retry is idempotent within each tenant, and neither's ids conflict with the other's.
    const retryA = await post(`/v1/runs/${RUN}/events`, { events: history('alpha') }, A);
    expect(retryA.status).toBe(201);
    expect(retryA.body.events).toEqual(a.body.events);
    const altered = await post(`/v1/runs/${RUN}/events`, { events: history('charlie') }, B);
    expect(altered.status).toBe(409);
  });

  it('read each its own events, replay and audit', async () => {
    for (const [key, words] of [
      [A, 'alpha'],
      [B, 'bravo'],
    ]) {
      const events = await get(`/v1/runs/${RUN}/events`, key);
      expect(events.status).toBe(200);
      expect(events.body.events).toHaveLength(6);
      expect(events.body.events[1].data.text).toBe(words);
      expect(events.body.events[0].metadata.tenantId).toBe(key === A ? 'tenant-a' : 'tenant-b');
      const replay = await t.replay(RUN, key);
      expect(replay.lines.map((l) => (l.data as { title?: string }).title)[0]).toBe(words);
      const audit = await get(`/v1/runs/${RUN}/audit`, key);
      expect(audit.body).toMatchObject({ verified: true, count: 6 });
    }
  });

  it('read each its own thread, thread list, voice seed and tool result', async () => {
    for (const [key, words, position] of [
      [A, 'alpha', positionA],
      [B, 'bravo', positionB],
    ] as const) {
      const thread = await get(`/v1/threads/${THREAD}?minPosition=${position}`, key);
      expect(thread.status).toBe(200);
      expect(thread.body.title).toBe(words);
      expect(JSON.stringify(thread.body)).not.toContain(words === 'alpha' ? 'bravo' : 'alpha');
      const list = await get(`/v1/threads?minPosition=${position}`, key);
      expect(
        list.body.threads.filter((th: { threadId: string }) => th.threadId === THREAD),
      ).toHaveLength(1);
      const seed = await get(`/v1/threads/${THREAD}/voice-seed`, key);
      expect(seed.status).toBe(200);
      expect(JSON.stringify(seed.body)).toContain(words);
      const result = await get(`/v1/threads/${THREAD}/tool-results/tc-1`, key);
      expect(result.status).toBe(200);
      expect(JSON.stringify(result.body)).toContain(words);
    }
  });

  it('stream each its own run and thread', async () => {
    for (const [key, words] of [
      [A, 'alpha'],
      [B, 'bravo'],
    ]) {
      for (const path of [`/v1/runs/${RUN}/stream`, `/v1/threads/${THREAD}/stream`]) {
        const reader = await SseReader.open(t.app, path, { ...t.auth(key), 'Last-Event-ID': '0' });
        if (!isReader(reader)) throw new Error(`${path} answered ${reader.status}`);
        try {
          await reader.until((r) => r.recorded().length >= 6);
          const recorded = reader.recorded();
          expect(
            recorded.every((e) => e.metadata.tenantId === (key === A ? 'tenant-a' : 'tenant-b')),
          ).toBe(true);
          expect(recorded[1].data.text).toBe(words);
        } finally {
          reader.close();
        }
      }
    }
  });

  it('steer, resolve, consume and answer each their own run', async () => {
    for (const key of [A, B]) {
      const steer = await post(
        `/v1/runs/${RUN}/steer`,
        { expectedTurnId: 'turn-1', instruction: 'narrower' },
        key,
      );
      expect(steer.status).toBe(201);
      const resolved = await post(
        `/v1/runs/${RUN}/approvals/ap-1/resolve`,
        { decision: 'allow' },
        key,
      );
      expect(resolved.status).toBe(201);
      const consumed = await post(
        '/v1/receipts/consume',
        {
          receipt: resolved.body.receipt,
          toolName: 'deploy',
          input: { who: key === A ? 'alpha' : 'bravo' },
        },
        key,
      );
      expect(consumed.status).toBe(200);
      // The other tenant cannot spend this tenant's receipt, even holding the same ids.
      const foreign = await post(
        '/v1/receipts/consume',
        { receipt: resolved.body.receipt, toolName: 'deploy', input: { who: 'alpha' } },
        key === A ? B : A,
      );
      expect(foreign.status).toBe(404);
    }
    const answer = await post(`/v1/threads/${THREAD}/approvals/answer`, { decision: 'allow' }, B);
    expect(answer.status).toBe(409);
    expect(answer.body.error).toBe('no_pending_approval');
  });

  it('stop each its own run; a run id free in one tenant stays free after the other stops', async () => {
    expect((await post(`/v1/runs/${RUN}/stop`, {}, A)).status).toBe(201);
    const more = await post(
      `/v1/runs/${RUN}/events`,
      {
        events: [{ type: 'message.added', data: { messageId: 'm2', role: 'user', text: 'still' } }],
      },
      B,
    );
    expect(more.status).toBe(201);
    expect((await post(`/v1/runs/${RUN}/stop`, {}, B)).status).toBe(201);
    const types = async (key: string) =>
      (await get(`/v1/runs/${RUN}/events`, key)).body.events.map((e: { type: string }) => e.type);
    expect((await types(A)).filter((type: string) => type === 'run.finished')).toHaveLength(1);
    expect((await types(B)).slice(-2)).toEqual(['message.added', 'run.finished']);
  });

  it('answer a run id used only by the other tenant exactly as a free one', async () => {
    const only = 'only-in-a';
    await post(`/v1/runs/${only}/events`, { events: history('alpha').slice(0, 1) }, A);
    for (const id of [only, 'never-used']) {
      const reads = await Promise.all([
        get(`/v1/runs/${id}/events`, B),
        get(`/v1/runs/${id}/audit`, B),
        post(`/v1/runs/${id}/stop`, {}, B),
        post(`/v1/runs/${id}/steer`, { expectedTurnId: 't', instruction: 'x' }, B),
        post(`/v1/runs/${id}/approvals/ap-1/resolve`, { decision: 'allow' }, B),
        post(
          `/v1/runs/${id}/events`,
          {
            events: [{ type: 'message.added', data: { messageId: 'm', role: 'user', text: 'x' } }],
          },
          B,
        ),
      ]);
      expect(reads.map((r) => [r.status, r.body.error])).toEqual(
        Array(6).fill([404, 'run_not_found']),
      );
    }
  });
});
