/** POST /v1/threads/:threadId/prompt through the started app on a real SQLite file. */
import { randomUUID } from 'node:crypto';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ READ_WAIT_MS: '2000' });
});
afterAll(async () => {
  await t.close();
});

function prompt(threadId: string, body: object, app = t, headers: Record<string, string> = {}) {
  return app
    .http()
    .post(`/v1/threads/${threadId}/prompt`)
    .set({ ...app.auth(), ...headers })
    .send(body);
}

async function events(runId: string) {
  const res = await t.http().get(`/v1/runs/${runId}/events?limit=1000`).set(t.auth());
  expect(res.status).toBe(200);
  return res.body.events as {
    type: string;
    data: Record<string, unknown>;
    metadata: Record<string, unknown>;
  }[];
}

async function append(runId: string, batch: object[]) {
  const res = await t.http().post(`/v1/runs/${runId}/events`).set(t.auth()).send({ events: batch });
  expect(res.status).toBe(201);
  return res.body.position as number;
}

const telegram = () => ({ channel: 'telegram', account: `bot-${randomUUID()}`, chat: '42' });

describe('POST /v1/threads/:threadId/prompt', () => {
  it('on a freshly bound thread: starts a run titled by the words, with the message and the turn, stamped with channel and user', async () => {
    const key = telegram();
    const bound = await t.http().put('/v1/bindings').set(t.auth()).send(key);
    const threadId = bound.body.threadId as string;
    const res = await prompt(threadId, { text: 'Where is my order?', binding: key }, t, {
      ...t.auth(KEYS.gatewayA),
      'X-Runledger-User': 'ana',
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ threadId, runStarted: true });
    const recorded = await events(res.body.runId);
    expect(recorded.map((e) => e.type)).toEqual(['run.started', 'message.added', 'turn.started']);
    expect(recorded[0].data).toMatchObject({
      threadId,
      source: 'telegram',
      agent: 'assistant',
      title: 'Where is my order?',
    });
    expect(recorded[1].data).toMatchObject({
      role: 'user',
      text: 'Where is my order?',
      messageId: res.body.messageId,
    });
    expect(recorded[2].data).toEqual({ turnId: res.body.turnId, source: 'telegram' });
    expect(recorded[2].metadata).toMatchObject({
      user: 'ana',
      channel: { bindingId: bound.body.bindingId, ...key },
    });

    const view = await t
      .http()
      .get(`/v1/threads/${threadId}?minPosition=${res.body.position}`)
      .set(t.auth());
    expect(view.body.status).toBe('running');
    expect(view.body.runs[0]).toMatchObject({
      runId: res.body.runId,
      activeTurnId: res.body.turnId,
    });
  });

  it('during an active turn: 409 turn_active with activeTurnId and the status, and nothing is written', async () => {
    const threadId = (await t.http().put('/v1/bindings').set(t.auth()).send(telegram())).body
      .threadId;
    const first = await prompt(threadId, { text: 'first' });
    expect(first.status).toBe(201);
    const before = await events(first.body.runId);

    const refused = await prompt(threadId, { text: 'second' });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({
      error: 'turn_active',
      activeTurnId: first.body.turnId,
      runId: first.body.runId,
      status: 'running',
    });
    expect(await events(first.body.runId)).toEqual(before);
    const view = await t
      .http()
      .get(`/v1/threads/${threadId}?minPosition=${first.body.position}`)
      .set(t.auth());
    expect(view.body.runs).toHaveLength(1);
    expect(JSON.stringify(view.body.messages)).not.toContain('second');
  });

  it('a retry naming its own turnId is told its turn is the active one, and records nothing more', async () => {
    const threadId = (await t.http().put('/v1/bindings').set(t.auth()).send(telegram())).body
      .threadId;
    const turnId = `turn-${randomUUID()}`;
    const first = await prompt(threadId, { text: 'once', turnId });
    expect(first.body.turnId).toBe(turnId);
    const retry = await prompt(threadId, { text: 'once', turnId });
    expect(retry.status).toBe(409);
    expect(retry.body).toMatchObject({ error: 'turn_active', activeTurnId: turnId });
    expect(retry.body.message).toContain('a retry');
    expect((await events(first.body.runId)).filter((e) => e.type === 'message.added')).toHaveLength(
      1,
    );
  });

  it('continues the open run once the turn finished, and starts a new run once the run finished', async () => {
    const threadId = (await t.http().put('/v1/bindings').set(t.auth()).send(telegram())).body
      .threadId;
    const first = await prompt(threadId, { text: 'one' });
    await append(first.body.runId, [
      { type: 'turn.finished', data: { turnId: first.body.turnId, status: 'completed' } },
    ]);
    const second = await prompt(threadId, { text: 'two' });
    expect(second.status).toBe(201);
    expect(second.body).toMatchObject({ runId: first.body.runId, runStarted: false });

    await append(first.body.runId, [{ type: 'run.finished', data: { status: 'completed' } }]);
    const third = await prompt(threadId, { text: 'three', agent: 'concierge' });
    expect(third.status).toBe(201);
    expect(third.body.runStarted).toBe(true);
    expect(third.body.runId).not.toBe(first.body.runId);
    const [started] = await events(third.body.runId);
    expect(started.data).toMatchObject({ agent: 'concierge', source: 'api' });
    expect(started.data.title).toBeUndefined();
  });

  it('of racing prompts on an idle thread exactly one starts a turn; the others are refused', async () => {
    const threadId = (await t.http().put('/v1/bindings').set(t.auth()).send(telegram())).body
      .threadId;
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => prompt(threadId, { text: `p${i}` })),
    );
    const won = answers.filter((a) => a.status === 201);
    expect(won).toHaveLength(1);
    const refused = answers.filter((a) => a.status === 409);
    expect(refused).toHaveLength(5);
    for (const r of refused)
      expect(r.body).toMatchObject({ error: 'turn_active', activeTurnId: won[0].body.turnId });
    const recorded = await events(won[0].body.runId);
    expect(recorded.filter((e) => e.type === 'turn.started')).toHaveLength(1);
    expect(recorded.filter((e) => e.type === 'message.added')).toHaveLength(1);
  });

  it('of racing prompts on an open run with no turn exactly one starts a turn in it', async () => {
    const threadId = (await t.http().put('/v1/bindings').set(t.auth()).send(telegram())).body
      .threadId;
    const first = await prompt(threadId, { text: 'opening' });
    await append(first.body.runId, [
      { type: 'turn.finished', data: { turnId: first.body.turnId, status: 'completed' } },
    ]);
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => prompt(threadId, { text: `q${i}` })),
    );
    const won = answers.filter((a) => a.status === 201);
    expect(won).toHaveLength(1);
    expect(won[0].body).toMatchObject({ runId: first.body.runId, runStarted: false });
    expect(answers.filter((a) => a.status === 409)).toHaveLength(5);
    const turns = (await events(first.body.runId)).filter((e) => e.type === 'turn.started');
    expect(turns).toHaveLength(2);
  });

  it('answers 404 for a thread the tenant does not have, and refuses bad bodies, writing nothing', async () => {
    expect((await prompt(`t-${randomUUID()}`, { text: 'hi' })).status).toBe(404);
    const key = telegram();
    const threadId = (await t.http().put('/v1/bindings').set(t.auth()).send(key)).body.threadId;
    expect((await prompt(threadId, { text: 'hi' }, t, {}).set(t.auth(KEYS.tenantB))).status).toBe(
      404,
    );
    const bad: [object, string][] = [
      [{}, 'text'],
      [{ text: '   ' }, 'text'],
      [{ text: 'x', source: 'fax' }, 'source'],
      [{ text: 'x', agent: '' }, 'agent'],
      [{ text: 'x', turnId: ' ' }, 'turnId'],
      // The event it starts would refuse it; refused here, it is a 400, not the server's 500.
      [{ text: 'x', turnId: 'turn-\ud800' }, 'turnId'],
      [{ text: 'x', extra: 1 }, 'extra'],
      [{ text: 'x', binding: { channel: 'telegram' } }, 'binding.account'],
    ];
    for (const [body, field] of bad) {
      const res = await prompt(threadId, body);
      expect(res.status).toBe(400);
      expect(res.body.details).toEqual(
        expect.arrayContaining([expect.objectContaining({ field })]),
      );
    }
    const elsewhere = await prompt(threadId, { text: 'x', binding: telegram() });
    expect(elsewhere.status).toBe(404);
    expect(elsewhere.body.error).toBe('binding_not_found');
    const other = (await t.http().put('/v1/bindings').set(t.auth()).send(telegram())).body;
    const wrongThread = await prompt(threadId, {
      text: 'x',
      binding: { channel: other.channel, account: other.account, chat: other.chat },
    });
    expect(wrongThread.status).toBe(409);
    expect(wrongThread.body).toMatchObject({ error: 'binding_mismatch', threadId: other.threadId });
    // Nothing of the above started a run: the first prompt still starts one.
    const ok = await prompt(threadId, { text: 'now' });
    expect(ok.body.runStarted).toBe(true);
    expect((await events(ok.body.runId)).map((e) => e.type)).toEqual([
      'run.started',
      'message.added',
      'turn.started',
    ]);
  });
});

describe('prompt and the rate limit', () => {
  it('is a costly call: past the costly budget the next prompt is refused 429 with Retry-After', async () => {
    // The key acts as itself, so the service budgets apply.
    const limited = await startTestApp({
      RATE_LIMIT_SERVICE_CALLS: '30',
      RATE_LIMIT_SERVICE_COSTLY: '2',
    });
    try {
      const threadId = (
        await limited.http().put('/v1/bindings').set(limited.auth()).send(telegram())
      ).body.threadId;
      expect((await prompt(threadId, { text: 'a' }, limited)).status).toBe(201);
      expect((await prompt(threadId, { text: 'b' }, limited)).status).toBe(409);
      const third = await prompt(threadId, { text: 'c' }, limited);
      expect(third.status).toBe(429);
      expect(third.headers['retry-after']).toBeDefined();
    } finally {
      await limited.close();
    }
  });
});
