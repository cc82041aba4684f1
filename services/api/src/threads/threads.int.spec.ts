import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { validateUIMessages } from 'ai';
import Database from 'better-sqlite3';
import { ReadModelStore } from '@runledger/projections';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';
import { READ_MODELS_FILE } from './projections.service';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ READ_WAIT_MS: '300' });
});
afterAll(async () => {
  await t.close();
});

function append(runId: string, events: object[], app = t) {
  return app.http().post(`/v1/runs/${runId}/events`).set(app.auth()).send({ events });
}

async function startRun(threadId: string, app = t, title = `Thread ${threadId}`) {
  const runId = `run-${randomUUID()}`;
  const res = await append(
    runId,
    [{ type: 'run.started', data: { threadId, agent: 'coder', source: 'typed', title } }],
    app,
  );
  expect(res.status).toBe(201);
  return { runId, position: res.body.position as number };
}

const say = (role: 'user' | 'assistant', text: string) => ({
  type: 'message.added',
  data: { messageId: randomUUID(), role, text },
});

describe('GET /v1/threads/:threadId', () => {
  it('sees an append at once with ?minPosition, as AI SDK UIMessages', async () => {
    const threadId = `t-${randomUUID()}`;
    const { runId } = await startRun(threadId);
    const res = await append(runId, [
      say('user', 'list the files'),
      { type: 'tool.started', data: { toolCallId: 'c1', toolName: 'ls', input: { path: '.' } } },
      { type: 'tool.finished', data: { toolCallId: 'c1', failed: false, output: ['a.ts'] } },
      say('assistant', 'There is one file: a.ts'),
    ]);
    const view = await t
      .http()
      .get(`/v1/threads/${threadId}?minPosition=${res.body.position}`)
      .set(t.auth());
    expect(view.status).toBe(200);
    expect(view.body).toMatchObject({
      threadId,
      title: `Thread ${threadId}`,
      position: res.body.position,
      pendingApprovals: [],
      activeTools: [],
    });
    expect(view.body.runs).toEqual([expect.objectContaining({ runId })]);
    const parts = (view.body.messages as { parts: { type: string; state?: string }[] }[]).flatMap(
      (m) => m.parts,
    );
    expect(parts).toContainEqual(
      expect.objectContaining({
        type: 'tool-ls',
        toolCallId: 'c1',
        state: 'output-available',
        output: ['a.ts'],
      }),
    );
    await expect(validateUIMessages({ messages: view.body.messages })).resolves.toBeDefined();
  });

  it("answers another tenant's thread with 404", async () => {
    const threadId = `t-${randomUUID()}`;
    const { position } = await startRun(threadId);
    const res = await t
      .http()
      .get(`/v1/threads/${threadId}?minPosition=${position}`)
      .set(t.auth(KEYS.tenantB));
    expect(res.status).toBe(404);
    expect(res.body.error).toBe('thread_not_found');
    for (const path of ['voice-seed', 'tool-results/c1?for=voice']) {
      const other = await t.http().get(`/v1/threads/${threadId}/${path}`).set(t.auth(KEYS.tenantB));
      expect(other.status).toBe(404);
    }
  });

  it('answers 503 with the projection position when it cannot reach minPosition in time', async () => {
    const { position } = await startRun(`t-${randomUUID()}`);
    const res = await t
      .http()
      .get(`/v1/threads?minPosition=${position + 1_000_000}`)
      .set(t.auth());
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({
      error: 'projection_behind',
      minPosition: position + 1_000_000,
    });
    expect(res.body.position).toBeGreaterThanOrEqual(position);
  });
});

describe('GET /v1/threads', () => {
  it('lists newest activity first with stable cursor pagination and a status filter', async () => {
    const prefix = `page-${randomUUID().slice(0, 8)}`;
    let last = 0;
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) {
      const threadId = `${prefix}-${i}`;
      ids.push(threadId);
      last = (await startRun(threadId)).position;
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const query: string = `limit=2&minPosition=${last}${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await t.http().get(`/v1/threads?${query}`).set(t.auth());
      expect(page.status).toBe(200);
      seen.push(...(page.body.threads as { threadId: string }[]).map((x) => x.threadId));
      cursor = page.body.nextCursor;
    } while (cursor);
    const mine = seen.filter((id) => id.startsWith(prefix));
    expect(mine).toEqual([...ids].reverse());
    expect(new Set(seen).size).toBe(seen.length);

    const idle = await t.http().get('/v1/threads?status=idle&limit=100').set(t.auth());
    expect((idle.body.threads as { status: string }[]).every((x) => x.status === 'idle')).toBe(
      true,
    );
    const other = await t.http().get('/v1/threads?limit=100').set(t.auth(KEYS.tenantB));
    expect(
      (other.body.threads as { threadId: string }[]).some((x) => x.threadId.startsWith(prefix)),
    ).toBe(false);
    expect((await t.http().get('/v1/threads?status=asleep').set(t.auth())).status).toBe(400);
    const badCursor = await t.http().get('/v1/threads?cursor=nonsense').set(t.auth());
    expect(badCursor.status).toBe(400);
    expect(badCursor.body).toMatchObject({
      error: 'invalid_cursor',
      details: [{ field: 'cursor', rule: 'isCursor' }],
    });
  });

  it('lists a title as the thread view shows it, a lone surrogate included', async () => {
    // Given a title that is valid JSON but not valid UTF-8 as it stands
    const threadId = `title-${randomUUID()}`;
    const title = 'draft \ud800 and \udc00 end';
    const { position } = await startRun(threadId, t, title);

    // When the thread is listed and viewed
    const list = await t.http().get(`/v1/threads?limit=1&minPosition=${position}`).set(t.auth());
    const view = await t.http().get(`/v1/threads/${threadId}`).set(t.auth());

    // Then both show the title that was recorded
    expect(view.body.title).toBe(title);
    expect(list.body.threads[0]).toMatchObject({ threadId, title });
  });

  it('refuses a list cursor issued to another tenant, spelt otherwise, or never issued', async () => {
    // Given a cursor the list issued to tenant A
    let last = 0;
    for (let i = 0; i < 3; i += 1) last = (await startRun(`forged-${randomUUID()}`)).position;
    const first = await t.http().get(`/v1/threads?limit=1&minPosition=${last}`).set(t.auth());
    const issued = first.body.nextCursor as string;
    expect(issued).toEqual(expect.any(String));
    const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const decoded: unknown = JSON.parse(Buffer.from(issued, 'base64url').toString('utf8'));

    // When tenant B pages with it, or tenant A with cursors the service never issued
    const refused = [
      await t.http().get(`/v1/threads?cursor=${issued}`).set(t.auth(KEYS.tenantB)),
      await t.http().get(`/v1/threads?cursor=${issued}!!`).set(t.auth()),
      await t.http().get(`/v1/threads?cursor=${issued}==`).set(t.auth()),
      await t
        .http()
        .get(`/v1/threads?cursor=${encode(['', ''])}`)
        .set(t.auth()),
      await t
        .http()
        .get(`/v1/threads?cursor=${encode(['zzzz', 'q'])}`)
        .set(t.auth()),
      await t
        .http()
        .get(`/v1/threads?cursor=${encode({ ...(decoded as object), x: 1 })}`)
        .set(t.auth()),
    ];

    // Then each is 400 invalid_cursor naming the field, and the issued one still reads on
    for (const res of refused) {
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({
        error: 'invalid_cursor',
        details: [{ field: 'cursor', rule: 'isCursor' }],
      });
    }
    const next = await t.http().get(`/v1/threads?limit=1&cursor=${issued}`).set(t.auth());
    expect(next.status).toBe(200);
    expect(next.body.threads).toHaveLength(1);
  });

  it('refuses a malformed thread id with 400 naming it, on views and commands alike', async () => {
    const id = encodeURIComponent('bad id!');
    for (const res of [
      await t.http().get(`/v1/threads/${id}`).set(t.auth()),
      await t.http().get(`/v1/threads/${id}/voice-seed`).set(t.auth()),
      await t.http().post(`/v1/threads/${id}/prompt`).set(t.auth()).send({ text: 'hi' }),
    ]) {
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({
        error: 'invalid_thread_id',
        details: [{ field: 'threadId', rule: 'matches' }],
      });
    }
  });
});

describe('voice', () => {
  it('seeds a call with the last spoken and typed turns, and quotes tool results cut with a hint', async () => {
    const threadId = `t-${randomUUID()}`;
    const { runId } = await startRun(threadId);
    const res = await append(runId, [
      say('user', 'what is in the log?'),
      { type: 'tool.started', data: { toolCallId: 'big', toolName: 'read_log', input: {} } },
      {
        type: 'tool.finished',
        data: { toolCallId: 'big', failed: false, output: 'x'.repeat(20_000) },
      },
      {
        type: 'transcript.added',
        data: { utteranceId: 'u1', role: 'assistant', text: '{"looks":"like json"}' },
      },
    ]);
    const seed = await t
      .http()
      .get(`/v1/threads/${threadId}/voice-seed?minPosition=${res.body.position}`)
      .set(t.auth());
    expect(seed.status).toBe(200);
    expect(seed.body.turns).toEqual([
      { role: 'user', text: 'what is in the log?' },
      { role: 'assistant', text: '{"looks":"like json"}' },
    ]);
    expect(seed.body.tokenEstimate).toBeGreaterThan(0);
    const tool = await t
      .http()
      .get(`/v1/threads/${threadId}/tool-results/big?for=voice`)
      .set(t.auth());
    expect(tool.status).toBe(200);
    expect(tool.body).toMatchObject({ toolCallId: 'big', truncated: true, totalChars: 20_000 });
    expect(tool.body.text).toMatch(/ask again for less/i);
    const rest = await t
      .http()
      .get(`/v1/threads/${threadId}/tool-results/big?for=voice&offset=12000`)
      .set(t.auth());
    expect(rest.body).toMatchObject({ offset: 12_000, truncated: false, totalChars: 20_000 });
    expect(rest.body.text).toHaveLength(8_000);
    const whole = await t.http().get(`/v1/threads/${threadId}/tool-results/big`).set(t.auth());
    expect(whole.body).toMatchObject({ truncated: false, totalChars: 20_000 });
    expect(whole.body.text).toHaveLength(20_000);
    const badOffset = await t
      .http()
      .get(`/v1/threads/${threadId}/tool-results/big?offset=-1`)
      .set(t.auth());
    expect(badOffset.status).toBe(400);
    expect(
      (await t.http().get(`/v1/threads/${threadId}/tool-results/nope`).set(t.auth())).status,
    ).toBe(404);
  });
});

describe('tool results of a call id two runs of a thread both used', () => {
  it("answers each run's own output with ?runId=, and the newest without", async () => {
    const threadId = `t-${randomUUID()}`;
    const call = (runId: string, output: string) =>
      append(runId, [
        { type: 'tool.started', data: { toolCallId: 'call-1', toolName: 'read', input: {} } },
        { type: 'tool.finished', data: { toolCallId: 'call-1', failed: false, output } },
      ]);
    const first = await startRun(threadId);
    await call(first.runId, 'first run');
    const second = await startRun(threadId);
    const { body } = await call(second.runId, 'second run');
    const result = (query: string) =>
      t
        .http()
        .get(`/v1/threads/${threadId}/tool-results/call-1?minPosition=${body.position}${query}`)
        .set(t.auth());
    expect((await result(`&runId=${first.runId}`)).body.text).toBe('first run');
    expect((await result(`&runId=${second.runId}`)).body.text).toBe('second run');
    expect((await result('')).body.text).toBe('second run');
    expect(await result('&runId=run-elsewhere')).toMatchObject({
      status: 404,
      body: { error: 'tool_call_not_found' },
    });
    for (const query of ['&runId=bad%20id', `&runId=${first.runId}&runId=${second.runId}`]) {
      expect(await result(query)).toMatchObject({
        status: 400,
        body: { details: [{ field: 'runId' }] },
      });
    }
  });
});

describe('a projector that stopped', () => {
  it('starts again from its checkpoint by itself once the cause has passed, and catches up', async () => {
    const app = await startTestApp();
    // Another writer holds the read models' file locked: the projector's next commit fails.
    const lock = new Database(join(app.config.dataDir, READ_MODELS_FILE), { timeout: 0 });
    try {
      lock.exec('BEGIN IMMEDIATE');
      const threadId = `t-${randomUUID()}`;
      const { position } = await startRun(threadId, app);
      let ready = await app.http().get('/health/ready');
      for (let i = 0; i < 200 && ready.status === 200; i += 1) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        ready = await app.http().get('/health/ready');
      }
      expect(ready.status).toBe(503);
      expect(ready.body.checks.projector).toMatch(/projector stopped/);

      lock.exec('ROLLBACK');
      const view = await app
        .http()
        .get(`/v1/threads/${threadId}?minPosition=${position}`)
        .set(app.auth());
      for (let i = 0; i < 100 && (await app.http().get('/health/ready')).status !== 200; i += 1) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect((await app.http().get('/health/ready')).status).toBe(200);
      const caughtUp =
        view.status === 200
          ? view
          : await app.http().get(`/v1/threads/${threadId}?minPosition=${position}`).set(app.auth());
      expect(caughtUp.status).toBe(200);
      expect(caughtUp.body.position).toBeGreaterThanOrEqual(position);
    } finally {
      if (lock.inTransaction) lock.exec('ROLLBACK');
      lock.close();
      await app.close();
    }
  }, 30_000);
});

describe('rebuild', () => {
  it('after a restart that finds a rebuild unfinished, answers 503 with its target until the projector passes it', async () => {
    const first = await startTestApp();
    const threadId = `t-${randomUUID()}`;
    const { runId } = await startRun(threadId, first);
    const res = await append(runId, [say('user', 'hi')], first);
    expect(res.status).toBe(201);
    await first
      .http()
      .get(`/v1/threads/${threadId}?minPosition=${res.body.position}`)
      .set(first.auth());
    const dataDir = first.config.dataDir;
    await first.app.close();
    // What a rebuild from empty read models that a crash stopped part way leaves behind:
    // its target, past what it had folded.
    const target = res.body.position + 3;
    const store = new ReadModelStore(join(dataDir, READ_MODELS_FILE));
    store.startRebuild(target);
    store.close();

    const second = await startTestApp({ DATA_DIR: dataDir });
    try {
      const partial = await second.http().get(`/v1/threads/${threadId}`).set(second.auth());
      expect(partial.status).toBe(503);
      expect(partial.body).toMatchObject({ error: 'projection_behind', rebuildTarget: target });
      const list = await second.http().get('/v1/threads').set(second.auth());
      expect(list.status).toBe(503);
      const more = await append(
        runId,
        [say('user', 'a'), say('user', 'b'), say('user', 'c')],
        second,
      );
      const whole = await second
        .http()
        .get(`/v1/threads/${threadId}?minPosition=${more.body.position}`)
        .set(second.auth());
      expect(whole.status).toBe(200);
      expect(whole.body.messageCount).toBe(4);
      expect((await second.http().get('/v1/threads').set(second.auth())).status).toBe(200);
    } finally {
      await second.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('rebuilds an empty read store from the log at start-up, equal to the live view', async () => {
    const first = await startTestApp();
    const threadId = `t-${randomUUID()}`;
    const { runId } = await startRun(threadId, first);
    const res = await append(
      runId,
      [
        say('user', 'deploy it'),
        {
          type: 'tool.started',
          data: { toolCallId: 'd1', toolName: 'deploy', input: { env: 'prod' } },
        },
        {
          type: 'approval.requested',
          data: { approvalId: 'a1', toolCallId: 'd1', toolName: 'deploy', input: { env: 'prod' } },
        },
      ],
      first,
    );
    const live = await first
      .http()
      .get(`/v1/threads/${threadId}?minPosition=${res.body.position}`)
      .set(first.auth());
    expect(live.body.status).toBe('blocked');
    // A consumed receipt is the log's last event: it lives outside the run streams projected.
    const resolved = await first
      .http()
      .post(`/v1/runs/${runId}/approvals/a1/resolve`)
      .set(first.auth())
      .send({ decision: 'allow' });
    expect(resolved.status).toBe(201);
    const consumed = await first
      .http()
      .post('/v1/receipts/consume')
      .set(first.auth())
      .send({ receipt: resolved.body.receipt, toolName: 'deploy', input: { env: 'prod' } });
    expect(consumed.status).toBe(200);
    const afterReceipt = await first
      .http()
      .get(`/v1/threads/${threadId}?minPosition=${consumed.body.position}`)
      .set(first.auth());
    expect(afterReceipt.status).toBe(200);
    expect(afterReceipt.body.status).toBe('running');
    const dataDir = first.config.dataDir;
    await first.app.close();
    for (const suffix of ['', '-wal', '-shm'])
      rmSync(join(dataDir, `${READ_MODELS_FILE}${suffix}`), { force: true });

    const second = await startTestApp({ DATA_DIR: dataDir });
    try {
      const rebuilt = await second
        .http()
        .get(`/v1/threads/${threadId}?minPosition=${consumed.body.position}`)
        .set(second.auth());
      expect(rebuilt.body).toEqual(afterReceipt.body);
      const metrics = await second.http().get('/metrics');
      expect(metrics.text).toMatch(/runledger_projector_position [1-9]/);
      expect(metrics.text).toContain('runledger_projector_lag_events');
      expect(metrics.text).toContain('runledger_rebuild_progress_ratio 1');
      // No mirror runs here: nothing says its publishing fails.
      expect(metrics.text).not.toContain('runledger_mirror_publishing_ok');
    } finally {
      await second.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
