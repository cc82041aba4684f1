import { Logger } from '@nestjs/common';
import Database from 'better-sqlite3';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RUN_STATE_DATA_TYPES } from '@runledger/domain';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';
import { PROMPT_TEXT_MAX } from '../prompt/prompt-body';

const policyDir = mkdtempSync(join(tmpdir(), 'runledger-policy-'));
const policyFile = join(policyDir, 'policy.yaml');
writeFileSync(policyFile, 'default:\n  deny: ["format_disk"]\n');

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ POLICY_FILE: policyFile });
});
afterAll(async () => {
  await t.close();
  rmSync(policyDir, { recursive: true, force: true });
});

function post(path: string, body: object, key = KEYS.tenantA, app = t) {
  return app.http().post(path).set(app.auth(key)).send(body);
}

async function newRun(events: object[] = [], threadId = `t-${randomUUID()}`) {
  const runId = `run-${randomUUID()}`;
  const res = await post(`/v1/runs/${runId}/events`, {
    events: [
      { type: 'run.started', data: { threadId, agent: 'voice', source: 'voice' } },
      ...events,
    ],
  });
  expect(res.status).toBe(201);
  return { runId, threadId, position: res.body.position as number };
}

const turn = (turnId: string) => ({ type: 'turn.started', data: { turnId, source: 'voice' } });
const approval = (approvalId: string, toolName = 'deploy', input: unknown = { env: 'prod' }) => ({
  type: 'approval.requested',
  data: {
    approvalId,
    toolCallId: `call-${approvalId}`,
    toolName,
    input,
    question: `Run ${toolName}?`,
  },
});

async function types(runId: string, app = t) {
  const res = await app.http().get(`/v1/runs/${runId}/events?limit=1000`).set(app.auth());
  return (res.body.events as { type: string; data: Record<string, unknown> }[]).map((e) => e.type);
}

describe('steer', () => {
  it('lets exactly one of two concurrent steers of the same turn win', async () => {
    const { runId } = await newRun([turn('turn-1')]);
    const body = { expectedTurnId: 'turn-1', instruction: 'use the staging database' };
    const results = await Promise.all([
      post(`/v1/runs/${runId}/steer`, body),
      post(`/v1/runs/${runId}/steer`, { ...body, instruction: 'no, production' }),
    ]);
    expect(results.map((r) => r.status).sort()).toEqual([201, 409]);
    const loser = results.find((r) => r.status === 409)!;
    expect(loser.body).toMatchObject({ error: 'steer_conflict', activeTurnId: 'turn-1' });
    expect((await types(runId)).filter((type) => type === 'turn.steered')).toHaveLength(1);
  });

  it("succeeds on a busy run: the agent's own appends in flight never make a command fail", async () => {
    const { runId } = await newRun([turn('turn-1'), approval('ap-busy')]);
    const say = (n: number) => ({
      type: 'message.added',
      data: { messageId: `progress-${n}`, role: 'assistant', text: `step ${n}` },
    });
    // An agent streaming progress: its appends queue ahead of the commands in this process.
    const progress = (from: number) =>
      Array.from({ length: 8 }, (_, n) =>
        post(`/v1/runs/${runId}/events`, { events: [say(from + n)] }),
      );
    const [steered, resolved] = await Promise.all([
      post(`/v1/runs/${runId}/steer`, { expectedTurnId: 'turn-1', instruction: 'hurry' }),
      post(`/v1/runs/${runId}/approvals/ap-busy/resolve`, { decision: 'allow' }),
      ...progress(0),
      ...progress(8),
    ]);
    expect([steered.status, steered.body.error]).toEqual([201, undefined]);
    expect([resolved.status, resolved.body.error]).toEqual([201, undefined]);
    const recorded = await types(runId);
    expect(recorded.filter((type) => type === 'message.added')).toHaveLength(16);
    expect(recorded.filter((type) => type === 'turn.steered')).toHaveLength(1);
    expect(recorded.filter((type) => type === 'approval.resolved')).toHaveLength(1);
  });

  it('answers 409 turn_not_active with the active turn, or null when there is none', async () => {
    const { runId } = await newRun([turn('turn-1')]);
    const stale = await post(`/v1/runs/${runId}/steer`, {
      expectedTurnId: 'turn-0',
      instruction: 'x',
    });
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({ error: 'turn_not_active', activeTurnId: 'turn-1' });
    await post(`/v1/runs/${runId}/events`, {
      events: [{ type: 'turn.finished', data: { turnId: 'turn-1', status: 'completed' } }],
    });
    const none = await post(`/v1/runs/${runId}/steer`, {
      expectedTurnId: 'turn-1',
      instruction: 'x',
    });
    expect(none.body).toMatchObject({ error: 'turn_not_active', activeTurnId: null });
    expect(await types(runId)).not.toContain('turn.steered');
    const bad = await post(`/v1/runs/${runId}/steer`, {
      expectedTurnId: '',
      instruction: 'x',
      extra: 1,
    });
    expect(bad.status).toBe(400);
  });

  it('refuses an instruction longer than a prompt may be, naming it, and appends nothing', async () => {
    const { runId } = await newRun([turn('turn-1')]);
    const long = await post(`/v1/runs/${runId}/steer`, {
      expectedTurnId: 'turn-1',
      instruction: 'x'.repeat(PROMPT_TEXT_MAX + 1),
    });
    expect(long.status).toBe(400);
    expect(long.body.details).toEqual([expect.objectContaining({ field: 'instruction' })]);
    expect(await types(runId)).not.toContain('turn.steered');
    const longest = await post(`/v1/runs/${runId}/steer`, {
      expectedTurnId: 'turn-1',
      instruction: 'x'.repeat(PROMPT_TEXT_MAX),
    });
    expect(longest.status).toBe(201);
  });
});

describe('stop', () => {
  it('finishes the run as cancelled once; stopping it again answers 409 with its status', async () => {
    const { runId } = await newRun();
    const first = await post(`/v1/runs/${runId}/stop`, { reason: 'the caller hung up' });
    expect(first.status).toBe(201);
    const again = await post(`/v1/runs/${runId}/stop`, { reason: 'again' });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ error: 'run_finished', status: 'cancelled' });
    const events = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
    expect(events.body.events[1].data).toEqual({
      status: 'cancelled',
      reason: 'the caller hung up',
    });
  });

  it('needs no reason, nor any body', async () => {
    const { runId } = await newRun();
    const bare = await t.http().post(`/v1/runs/${runId}/stop`).set(t.auth());
    expect(`${bare.status} ${bare.text}`).toMatch(/^201 /);
    const events = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
    expect(events.body.events[1].data).toEqual({ status: 'cancelled' });
    const other = await newRun();
    expect((await post(`/v1/runs/${other.runId}/stop`, { reason: '' })).status).toBe(400);
    expect((await post(`/v1/runs/${other.runId}/stop`, { reason: null })).status).toBe(400);
    expect((await post(`/v1/runs/${other.runId}/stop`, {})).status).toBe(201);
  });
});

describe('resolve', () => {
  it('resolves once among fifty concurrent calls; every other reports the first resolution', async () => {
    const { runId } = await newRun([approval('ap-1')]);
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        post(`/v1/runs/${runId}/approvals/ap-1/resolve`, {
          decision: i % 2 === 0 ? 'allow' : 'deny',
        }),
      ),
    );
    const won = results.filter((r) => r.status === 201);
    const lost = results.filter((r) => r.status === 409);
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(49);
    for (const r of lost) {
      expect(r.body).toMatchObject({
        error: 'already_resolved',
        resolution: { approvalId: 'ap-1', decision: won[0].body.decision },
      });
      // The bearer receipt went to the one resolver; a loser learns only the decision.
      expect(r.body.resolution).not.toHaveProperty('receipt');
      expect(JSON.stringify(r.body)).not.toContain(won[0].body.receipt);
    }
    expect((await types(runId)).filter((type) => type === 'approval.resolved')).toHaveLength(1);
  });

  it('downgrades an allow that the policy forbids now, and records the policy revision', async () => {
    const { runId } = await newRun([approval('ap-2', 'drop_table')]);
    const stricter = 'default:\n  deny: ["format_disk", "drop_*"]\n';
    writeFileSync(policyFile, stricter);
    try {
      const res = await post(`/v1/runs/${runId}/approvals/ap-2/resolve`, { decision: 'allow' });
      expect(res.status).toBe(201);
      const revision = createHash('sha256').update(stricter).digest('hex');
      expect(res.body).toMatchObject({
        requested: 'allow',
        decision: 'deny',
        downgraded: true,
        policyRevision: revision,
      });
      const recorded = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
      expect(recorded.body.events[2]).toMatchObject({
        type: 'approval.resolved',
        data: { approvalId: 'ap-2', decision: 'deny', downgraded: true, policyRevision: revision },
      });
    } finally {
      writeFileSync(policyFile, 'default:\n  deny: ["format_disk"]\n');
    }
  });

  it('refuses to decide while the policy file cannot be read or parsed: 503, nothing written', async () => {
    const { runId } = await newRun([approval('ap-9')]);
    const errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    // Another tenant's thread, named in the broken file, is not the caller's to learn.
    const secret = 'tenants:\n  tenant-b:\n    threads:\n      secret-merger: {deny: [x\n';
    try {
      for (const broken of [secret, null]) {
        if (broken === null) rmSync(policyFile);
        else writeFileSync(policyFile, broken);
        const res = await post(`/v1/runs/${runId}/approvals/ap-9/resolve`, { decision: 'deny' });
        expect(res.status).toBe(503);
        expect(res.headers['retry-after']).toBe('1');
        expect(res.body).toEqual({
          error: 'policy_unavailable',
          message:
            'the tool policy cannot be read now; no decision is taken without it, and nothing was written: retry once the operator has mended it',
        });
        expect(await types(runId)).not.toContain('approval.resolved');
        // The operator is told what is wrong, and where.
        expect(errors).toHaveBeenLastCalledWith(
          expect.objectContaining({
            msg: 'the tool policy cannot be read; decisions are refused until it is mended',
            tenantId: 'tenant-a',
            problem: expect.stringContaining(`POLICY_FILE ${policyFile}`),
          }),
        );
      }
    } finally {
      errors.mockRestore();
      writeFileSync(policyFile, 'default:\n  deny: ["format_disk"]\n');
    }
    const mended = await post(`/v1/runs/${runId}/approvals/ap-9/resolve`, { decision: 'deny' });
    expect(mended.status).toBe(201);
  });

  it('does not start with a policy file it cannot read or parse, naming the variable', async () => {
    const broken = join(policyDir, 'broken.yaml');
    writeFileSync(broken, 'default: [unclosed');
    for (const file of [broken, join(policyDir, 'missing.yaml')]) {
      await expect(startTestApp({ POLICY_FILE: file })).rejects.toMatchObject({
        name: 'ConfigError',
        message: expect.stringContaining(`POLICY_FILE ${file}`),
      });
    }
  });

  it('answers 404 for an unknown approval', async () => {
    const { runId } = await newRun();
    expect(
      (await post(`/v1/runs/${runId}/approvals/nope/resolve`, { decision: 'allow' })).status,
    ).toBe(404);
  });
});

describe('answer "yes"', () => {
  it('resolves the only pending approval, and asks which one when several are pending', async () => {
    const single = await newRun([approval('only')]);
    const yes = await post(
      `/v1/threads/${single.threadId}/approvals/answer?minPosition=${single.position}`,
      {
        decision: 'allow',
      },
    );
    expect(yes.status).toBe(201);
    expect(yes.body).toMatchObject({ approvalId: 'only', decision: 'allow' });

    const many = await newRun([1, 2, 3, 4, 5].map((n) => approval(`ap-${n}`, `tool_${n}`)));
    const ambiguous = await post(
      `/v1/threads/${many.threadId}/approvals/answer?minPosition=${many.position}`,
      {
        decision: 'allow',
      },
    );
    expect(ambiguous.status).toBe(409);
    expect(ambiguous.body).toMatchObject({ error: 'ambiguous', pendingCount: 5 });
    expect(ambiguous.body.pending).toHaveLength(4);
    expect(await types(many.runId)).not.toContain('approval.resolved');

    const none = await newRun();
    const nothing = await post(
      `/v1/threads/${none.threadId}/approvals/answer?minPosition=${none.position}`,
      {
        decision: 'allow',
      },
    );
    expect(nothing.status).toBe(409);
    expect(nothing.body.error).toBe('no_pending_approval');
  });
});

describe('approval ids', () => {
  const view = (threadId: string, position: number) =>
    t.http().get(`/v1/threads/${threadId}?minPosition=${position}`).set(t.auth());

  it('are a run\'s own: two runs of a thread asking under one id both wait, and "yes" asks which', async () => {
    const a = await newRun([approval('ap-1', 'search', { q: 1 })]);
    const b = await newRun([approval('ap-1', 'deploy', { env: 'prod' })], a.threadId);
    const both = await view(a.threadId, b.position);
    expect(both.body.status).toBe('blocked');
    expect(
      (both.body.pendingApprovals as { runId: string; toolName: string }[]).map((p) => [
        p.runId,
        p.toolName,
      ]),
    ).toEqual([
      [a.runId, 'search'],
      [b.runId, 'deploy'],
    ]);
    const yes = await post(`/v1/threads/${a.threadId}/approvals/answer?minPosition=${b.position}`, {
      decision: 'allow',
    });
    expect(yes.status).toBe(409);
    expect(yes.body).toMatchObject({ error: 'ambiguous', pendingCount: 2 });

    const resolved = await post(`/v1/runs/${b.runId}/approvals/ap-1/resolve`, {
      decision: 'allow',
    });
    expect(resolved.status).toBe(201);
    const left = await view(a.threadId, resolved.body.position);
    expect(left.body.status).toBe('blocked');
    expect(left.body.pendingApprovals).toEqual([
      expect.objectContaining({ runId: a.runId, approvalId: 'ap-1', toolName: 'search' }),
    ]);
  });

  it('asked again in a run, name the newest request: the one shown is the one resolved', async () => {
    const first = approval('b1', 'search', { q: 1 });
    const again = {
      ...approval('b1', 'deploy', { env: 'prod' }),
      data: { ...approval('b1', 'deploy', { env: 'prod' }).data, toolCallId: 'call-deploy' },
    };
    const { runId, threadId, position } = await newRun([first, again]);
    const shown = await view(threadId, position);
    expect(shown.body.pendingApprovals).toEqual([
      expect.objectContaining({ approvalId: 'b1', toolName: 'deploy', input: { env: 'prod' } }),
    ]);
    const resolved = await post(`/v1/runs/${runId}/approvals/b1/resolve`, { decision: 'allow' });
    expect(resolved.status).toBe(201);
    expect(resolved.body).toMatchObject({ toolName: 'deploy' });

    // Asked again once resolved, it waits again rather than blocking the thread for good.
    const reasked = await post(`/v1/runs/${runId}/events`, {
      events: [approval('b1', 'drop', { table: 'users' })],
    });
    const blocked = await view(threadId, reasked.body.position);
    expect(blocked.body.status).toBe('blocked');
    const stale = await post('/v1/receipts/consume', {
      receipt: resolved.body.receipt,
      toolName: 'deploy',
      input: { env: 'prod' },
    });
    expect(stale.status).toBe(403);
    const denied = await post(`/v1/runs/${runId}/approvals/b1/resolve`, { decision: 'deny' });
    expect(denied.status).toBe(201);
    expect(denied.body).toMatchObject({ toolName: 'drop' });
    expect((await view(threadId, denied.body.position)).body.status).not.toBe('blocked');
  });

  it('overtaken by its tool finishing, no longer waits: the thread unblocks and resolving it answers 409', async () => {
    const { runId, threadId } = await newRun([approval('t1')]);
    const finished = await post(`/v1/runs/${runId}/events`, {
      events: [
        {
          type: 'tool.finished',
          data: { toolCallId: 'call-t1', failed: true, errorText: 'approval timed out' },
        },
      ],
    });
    const shown = await view(threadId, finished.body.position);
    expect([shown.body.status, shown.body.pendingApprovals]).toEqual(['idle', []]);
    const late = await post(`/v1/runs/${runId}/approvals/t1/resolve`, { decision: 'allow' });
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({ error: 'tool_finished', toolCallId: 'call-t1' });
    expect(await types(runId)).not.toContain('approval.resolved');
  });

  it('resolved, then overtaken by its tool finishing: its receipt is refused, unspent', async () => {
    const { runId } = await newRun([approval('t2')]);
    const resolved = await post(`/v1/runs/${runId}/approvals/t2/resolve`, { decision: 'allow' });
    expect(resolved.status).toBe(201);
    await post(`/v1/runs/${runId}/events`, {
      events: [
        {
          type: 'tool.finished',
          data: { toolCallId: 'call-t2', failed: true, errorText: 'gave up waiting' },
        },
      ],
    });
    const consumed = await post('/v1/receipts/consume', {
      receipt: resolved.body.receipt,
      toolName: 'deploy',
      input: { env: 'prod' },
    });
    expect(consumed.status).toBe(403);
    expect(consumed.body).toMatchObject({ error: 'receipt_refused', reason: 'tool_finished' });
    expect(await types(runId)).not.toContain('receipt.consumed');
  });
});

describe('answering "yes" on a thread', () => {
  it('refuses a malformed thread id 400 invalid_thread_id, as every thread route does', async () => {
    for (const threadId of ['..%2Fx', '-a', 'a'.repeat(129), '%C3%A9t%C3%A9']) {
      const res = await post(`/v1/threads/${threadId}/approvals/answer`, { decision: 'deny' });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('invalid_thread_id');
    }
  });
});

describe('receipts', () => {
  async function allowed(toolName = 'deploy', input: unknown = { env: 'prod' }) {
    const { runId } = await newRun([approval('ap', toolName, input)]);
    const res = await post(`/v1/runs/${runId}/approvals/ap/resolve`, { decision: 'allow' });
    expect(res.body.decision).toBe('allow');
    return res.body.receipt as string;
  }

  it('is consumed once, even through two instances on the same store', async () => {
    const receipt = await allowed();
    const other = await startTestApp({ DATA_DIR: t.config.dataDir, POLICY_FILE: policyFile });
    try {
      const body = { receipt, toolName: 'deploy', input: { env: 'prod' } };
      const results = await Promise.all([
        post('/v1/receipts/consume', body),
        post('/v1/receipts/consume', body, KEYS.tenantA, other),
        post('/v1/receipts/consume', body),
      ]);
      expect(results.map((r) => r.status).sort()).toEqual([200, 409, 409]);
      expect(results.find((r) => r.status === 409)!.body.error).toBe('receipt_already_used');
    } finally {
      await other.close();
    }
  });

  it('answers any replay of a consumed receipt 409, whatever else the replay gets wrong', async () => {
    const receipt = await allowed('deploy', { env: 'prod' });
    const consumed = await post('/v1/receipts/consume', {
      receipt,
      toolName: 'deploy',
      input: { env: 'prod' },
    });
    expect(consumed.status).toBe(200);
    for (const replay of [
      { receipt, toolName: 'deploy', input: { env: 'staging' } },
      { receipt, toolName: 'destroy', input: { env: 'prod' } },
    ]) {
      const res = await post('/v1/receipts/consume', replay);
      expect([res.status, res.body.error]).toEqual([409, 'receipt_already_used']);
    }
  });

  it('is refused for another tool, another input, a changed signature or a deny', async () => {
    const receipt = await allowed('deploy', { env: 'prod' });
    const consume = (body: object) => post('/v1/receipts/consume', body);
    const tool = await consume({ receipt, toolName: 'destroy', input: { env: 'prod' } });
    expect(tool.body).toMatchObject({ error: 'receipt_refused', reason: 'tool_mismatch' });
    const input = await consume({ receipt, toolName: 'deploy', input: { env: 'staging' } });
    expect(input.body).toMatchObject({ error: 'receipt_refused', reason: 'input_mismatch' });
    const [claims, signature] = receipt.split('.');
    const forged = Buffer.from(
      JSON.stringify({
        ...JSON.parse(Buffer.from(claims, 'base64url').toString()),
        exp: 9_999_999_999,
      }),
    ).toString('base64url');
    const changed = await consume({
      receipt: `${forged}.${signature}`,
      toolName: 'deploy',
      input: { env: 'prod' },
    });
    expect(changed.body).toMatchObject({ error: 'receipt_refused', reason: 'signature' });
    const flipped = `${claims}.${signature.slice(0, -2)}${signature.endsWith('AA') ? 'BB' : 'AA'}`;
    expect(
      (await consume({ receipt: flipped, toolName: 'deploy', input: { env: 'prod' } })).status,
    ).toBe(403);
    for (const r of [tool, input, changed]) expect(r.status).toBe(403);
    expect((await consume({ receipt, toolName: 'deploy', input: { env: 'prod' } })).status).toBe(
      200,
    );
  });

  it('expires, and a receipt spent before it expired still answers a replay as one', async () => {
    const short = await startTestApp({ RECEIPT_TTL_S: '1' });
    try {
      const runId = `run-${randomUUID()}`;
      await post(
        `/v1/runs/${runId}/events`,
        {
          events: [
            { type: 'run.started', data: { threadId: 'x', agent: 'a', source: 'api' } },
            approval('ap'),
            approval('ap-spent'),
          ],
        },
        KEYS.tenantA,
        short,
      );
      const resolve = (approvalId: string) =>
        post(
          `/v1/runs/${runId}/approvals/${approvalId}/resolve`,
          { decision: 'allow' },
          KEYS.tenantA,
          short,
        );
      const consume = (receipt: string, key = KEYS.tenantA) =>
        post(
          '/v1/receipts/consume',
          { receipt, toolName: 'deploy', input: { env: 'prod' } },
          key,
          short,
        );
      const unused = (await resolve('ap')).body.receipt as string;
      const spent = (await resolve('ap-spent')).body.receipt as string;
      expect((await consume(spent)).status).toBe(200);
      await new Promise((done) => setTimeout(done, 2100));
      const late = await consume(unused);
      expect(late.status).toBe(403);
      expect(late.body.reason).toBe('expired');
      // A runtime that lost the answer and retries late learns it was spent, not that it expired.
      expect(await consume(spent)).toMatchObject({
        status: 409,
        body: { error: 'receipt_already_used' },
      });
      // Another tenant learns nothing of it.
      expect((await consume(spent, KEYS.tenantB)).body.reason).toBe('expired');
    } finally {
      await short.close();
    }
  });
});

describe('a run commands have decided on before', () => {
  it('is folded from where the last command left it, not read again from its start', async () => {
    const messages = Array.from({ length: 600 }, (_, n) => ({
      type: 'message.added',
      data: { messageId: `m${n}`, role: 'assistant', text: `line ${n}` },
    }));
    const { runId } = await newRun([turn('t1'), approval('a1'), approval('a2'), ...messages]);
    expect(
      (await post(`/v1/runs/${runId}/approvals/a1/resolve`, { decision: 'allow' })).status,
    ).toBe(201);
    const store = t.app.get<EventStore>(EVENT_STORE);
    const read = jest.spyOn(store, 'readStream');
    try {
      const second = await post(`/v1/runs/${runId}/approvals/a2/resolve`, { decision: 'deny' });
      expect(second.status).toBe(201);
      const froms = read.mock.calls
        .filter(([stream, options]) => stream.endsWith(runId) && options?.direction !== 'backwards')
        .map(([, options]) => options?.fromRevision ?? 0);
      // Forward reads of the run (its head is read backwards, one event): the 604 events
      // before the first resolve are not read again.
      expect(froms.length).toBeGreaterThan(0);
      expect(Math.min(...froms)).toBeGreaterThan(603);
    } finally {
      read.mockRestore();
    }
  });

  it("is folded without its model calls' data, which no command reads: not even a damaged one stops a decision", async () => {
    const modelCall = (callId: string) => ({
      type: 'model.call',
      data: { callId, model: 'm', messages: [{ role: 'user', content: 'x'.repeat(100_000) }] },
    });
    const { runId } = await newRun([turn('t1'), modelCall('c1'), modelCall('c2'), approval('a1')]);
    // A coding agent's run is mostly megabyte contexts: the first command on it read them all.
    const db = new Database(join(t.config.dataDir, 'runledger.db'));
    db.prepare("UPDATE events SET data = '{broken' WHERE stream LIKE ? AND revision = 3").run(
      `%${runId}`,
    );
    db.close();
    const read = jest.spyOn(t.app.get<EventStore>(EVENT_STORE), 'readStream');
    try {
      const resolved = await post(`/v1/runs/${runId}/approvals/a1/resolve`, { decision: 'deny' });
      expect(resolved.status).toBe(201);
      expect(resolved.body).toMatchObject({ decision: 'deny' });
      // Both folds, before the run's append queue and in it, ask for those types' data only.
      const folds = read.mock.calls.filter(
        ([stream, options]) => stream.endsWith(runId) && options?.direction !== 'backwards',
      );
      expect(folds.length).toBeGreaterThan(1);
      for (const [, options] of folds) expect(options?.dataTypes).toBe(RUN_STATE_DATA_TYPES);
    } finally {
      read.mockRestore();
    }
  });

  it('is decided on with what another instance appended since, as a run never seen', async () => {
    const { runId } = await newRun([turn('t1'), approval('a1'), approval('a2')]);
    expect(
      (await post(`/v1/runs/${runId}/approvals/a1/resolve`, { decision: 'allow' })).status,
    ).toBe(201);
    const other = await startTestApp({ DATA_DIR: t.config.dataDir, POLICY_FILE: policyFile });
    try {
      expect(
        (
          await post(
            `/v1/runs/${runId}/approvals/a2/resolve`,
            { decision: 'deny' },
            KEYS.tenantA,
            other,
          )
        ).status,
      ).toBe(201);
      expect((await post(`/v1/runs/${runId}/stop`, {}, KEYS.tenantA, other)).status).toBe(201);
    } finally {
      await other.close();
    }
    const again = await post(`/v1/runs/${runId}/approvals/a2/resolve`, { decision: 'allow' });
    expect(again.status).toBe(409);
    const steer = await post(`/v1/runs/${runId}/steer`, {
      expectedTurnId: 't1',
      instruction: 'go',
    });
    expect(steer.status).toBe(409);
    expect(steer.body).toMatchObject({ error: 'run_finished', status: 'cancelled' });
  });
});

describe('tenant isolation', () => {
  it('answers every command on another tenant’s run, thread or receipt with 404, changing nothing', async () => {
    const { runId, threadId, position } = await newRun([turn('turn-1'), approval('ap-x')]);
    const b = KEYS.tenantB;
    const calls = [
      post(`/v1/runs/${runId}/steer`, { expectedTurnId: 'turn-1', instruction: 'x' }, b),
      post(`/v1/runs/${runId}/stop`, { reason: 'x' }, b),
      post(`/v1/runs/${runId}/approvals/ap-x/resolve`, { decision: 'allow' }, b),
      post(
        `/v1/threads/${threadId}/approvals/answer?minPosition=${position}`,
        { decision: 'allow' },
        b,
      ),
    ];
    for (const res of await Promise.all(calls)) expect(res.status).toBe(404);
    const receipt = (await post(`/v1/runs/${runId}/approvals/ap-x/resolve`, { decision: 'allow' }))
      .body.receipt;
    const foreign = await post(
      '/v1/receipts/consume',
      { receipt, toolName: 'deploy', input: { env: 'prod' } },
      b,
    );
    expect(foreign.status).toBe(404);
    expect(await types(runId)).toEqual([
      'run.started',
      'turn.started',
      'approval.requested',
      'approval.resolved',
    ]);
  });
});

describe('receipts are re-checked when consumed', () => {
  const gateway = (user: string) => ({
    ...t.auth(KEYS.gatewayA),
    'X-Runledger-User': encodeURIComponent(user),
  });
  const consumeBody = (receipt: string) => ({
    receipt,
    toolName: 'deploy',
    input: { env: 'prod' },
  });

  /** A run with a pending approval, resolved allow by `headers`; answers the run and the receipt. */
  async function resolvedBy(headers: Record<string, string>) {
    const { runId } = await newRun([approval('ap')]);
    const res = await t
      .http()
      .post(`/v1/runs/${runId}/approvals/ap/resolve`)
      .set(headers)
      .send({ decision: 'allow' });
    expect(res.status).toBe(201);
    return { runId, receipt: res.body.receipt as string, receiptId: res.body.receiptId as string };
  }

  it('refuses a receipt after the policy stopped allowing the tool', async () => {
    const { receipt } = await resolvedBy(t.auth());
    writeFileSync(policyFile, 'default:\n  deny: ["format_disk", "deploy"]\n');
    try {
      const res = await post('/v1/receipts/consume', consumeBody(receipt));
      expect(res.status).toBe(403);
      expect(res.body).toMatchObject({ error: 'receipt_refused', reason: 'policy_forbids' });
    } finally {
      writeFileSync(policyFile, 'default:\n  deny: ["format_disk"]\n');
    }
    // Refused, not spent: with the tool allowed again, it is consumed once.
    expect((await post('/v1/receipts/consume', consumeBody(receipt))).status).toBe(200);
  });

  it('refuses a receipt after its run was stopped', async () => {
    const { runId, receipt } = await resolvedBy(t.auth());
    expect((await post(`/v1/runs/${runId}/stop`, {})).status).toBe(201);
    const res = await post('/v1/receipts/consume', consumeBody(receipt));
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ error: 'receipt_refused', reason: 'run_finished' });
  });

  it('refuses a receipt after its run ended', async () => {
    const { runId, receipt } = await resolvedBy(t.auth());
    const end = { type: 'run.finished', data: { status: 'completed' } };
    expect((await post(`/v1/runs/${runId}/events`, { events: [end] })).status).toBe(201);
    const res = await post('/v1/receipts/consume', consumeBody(receipt));
    expect(res.status).toBe(403);
    expect(res.body.reason).toBe('run_finished');
  });

  it("is consumed by the runtime's own key, a person having decided: both are recorded", async () => {
    // `approve` and `append` are separate keys: the person decides, the runtime runs the tool.
    const { runId, receipt } = await resolvedBy(gateway('Łukasz'));
    const res = await t
      .http()
      .post('/v1/receipts/consume')
      .set(t.auth(KEYS.runtimeA))
      .send(consumeBody(receipt));
    expect(res.status).toBe(200);
    const events = (await t.http().get(`/v1/runs/${runId}/events`).set(t.auth())).body.events as {
      type: string;
      data: Record<string, unknown>;
    }[];
    expect(events.find((e) => e.type === 'approval.resolved')?.data.decidedBy).toBe('Łukasz');
    // Spent: whoever presents it again, the runtime or the person's gateway.
    const again = await t
      .http()
      .post('/v1/receipts/consume')
      .set(gateway('Łukasz'))
      .send(consumeBody(receipt));
    expect(again.status).toBe(409);
  });

  it('refuses a receipt presented with a read-only key', async () => {
    const { receipt } = await resolvedBy(t.auth());
    const res = await post('/v1/receipts/consume', consumeBody(receipt), KEYS.readerA);
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('forbidden');
    expect((await post('/v1/receipts/consume', consumeBody(receipt))).status).toBe(200);
  });

  it('refuses a receipt whose approval was superseded by a new one for the same tool call', async () => {
    const { runId, receipt } = await resolvedBy(t.auth());
    const again = {
      ...approval('ap-again'),
      data: { ...approval('ap-again').data, toolCallId: 'call-ap' },
    };
    expect((await post(`/v1/runs/${runId}/events`, { events: [again] })).status).toBe(201);
    const res = await post('/v1/receipts/consume', consumeBody(receipt));
    expect(res.status).toBe(403);
    expect(res.body.reason).toBe('superseded');
  });

  it('keeps only the receipt id and digest in the log: no reader can take the bearer token', async () => {
    const { runId, receipt, receiptId } = await resolvedBy(t.auth());
    const res = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth(KEYS.readerA));
    const resolved = (res.body.events as { type: string; data: Record<string, unknown> }[]).find(
      (e) => e.type === 'approval.resolved',
    )!;
    expect(resolved.data.receipt).toBe(receiptId);
    expect(resolved.data.receiptDigest).toBe(createHash('sha256').update(receipt).digest('hex'));
    expect(JSON.stringify(res.body)).not.toContain(receipt);
    const replay = await t.replay(runId, KEYS.readerA);
    expect(JSON.stringify(replay.lines)).not.toContain(receipt);
  });
});

describe('who approves', () => {
  it('refuses resolve and answer to a key without the approve scope: recording a call is not deciding it', async () => {
    const { runId, threadId, position } = await newRun([approval('ap')]);
    const resolve = await post(
      `/v1/runs/${runId}/approvals/ap/resolve`,
      { decision: 'allow' },
      KEYS.runtimeA,
    );
    expect(resolve.status).toBe(403);
    expect(resolve.body.message).toMatch(/approve/);
    const answer = await post(
      `/v1/threads/${threadId}/approvals/answer?minPosition=${position}`,
      { decision: 'allow' },
      KEYS.runtimeA,
    );
    expect(answer.status).toBe(403);
    expect(await types(runId)).toEqual(['run.started', 'approval.requested']);
  });

  it.each(['Łukasz', 'Дмитрий', '田中'])(
    'records %s, named by a gateway, exactly as sent in decidedBy',
    async (name) => {
      for (const headers of [
        { 'X-Runledger-User': encodeURIComponent(name) },
        { 'X-Runledger-User*': `UTF-8''${encodeURIComponent(name)}` },
      ]) {
        const { runId } = await newRun([approval('ap')]);
        const res = await t
          .http()
          .post(`/v1/runs/${runId}/approvals/ap/resolve`)
          .set({ ...t.auth(KEYS.gatewayA), ...headers })
          .send({ decision: 'deny' });
        expect(res.status).toBe(201);
        const events = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
        const resolved = events.body.events.find(
          (e: { type: string }) => e.type === 'approval.resolved',
        );
        expect(resolved.data.decidedBy).toBe(name);
        const again = await t
          .http()
          .post(`/v1/runs/${runId}/approvals/ap/resolve`)
          .set({ ...t.auth(KEYS.gatewayA), ...headers })
          .send({ decision: 'allow' });
        expect(again.body.resolution.decidedBy).toBe(name);
      }
    },
  );

  it("records a user key's own user, and a key acting as itself by its id", async () => {
    const { runId } = await newRun([approval('ap'), approval('ap-2')]);
    await post(`/v1/runs/${runId}/approvals/ap/resolve`, { decision: 'deny' }, KEYS.anaA);
    await post(`/v1/runs/${runId}/approvals/ap-2/resolve`, { decision: 'deny' });
    const events = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
    const decidedBy = events.body.events
      .filter((e: { type: string }) => e.type === 'approval.resolved')
      .map((e: { data: { decidedBy: string } }) => e.data.decidedBy);
    expect(decidedBy[0]).toBe('Ana');
    expect(decidedBy[1]).toMatch(/^key:[0-9a-f]{16}$/);
  });

  it('refuses a key without act-as naming the user: 403, nothing resolved', async () => {
    const { runId } = await newRun([approval('ap')]);
    for (const key of [KEYS.tenantA, KEYS.anaA]) {
      const res = await t
        .http()
        .post(`/v1/runs/${runId}/approvals/ap/resolve`)
        .set({ ...t.auth(key), 'X-Runledger-User': 'ceo' })
        .send({ decision: 'allow' });
      expect(res.status).toBe(403);
    }
    expect(await types(runId)).toEqual(['run.started', 'approval.requested']);
  });
});
