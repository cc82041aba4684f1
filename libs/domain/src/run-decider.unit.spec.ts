import type { PolicyVerdict } from './policy';
import { inputDigest, receiptDigest, verifyReceipt } from './receipts';
import { ChainVerifier } from './hash-chain';
import type { RunHead } from './run-rules';
import fc from 'fast-check';
import type { EventType } from './event-types';
import { threadSequences } from './projections/testing/thread-sequences';
import {
  decideAnswer,
  decideAppend,
  decideConsume,
  decideResolve,
  decideSteer,
  decideStop,
  foldRunState,
  RefusedError,
  RUN_STATE_DATA_TYPES,
  violationRefusal,
  type NewEvent,
  type Outcome,
  type Refusal,
  type RunState,
} from './run-decider';

let revision = 0;
const e = (type: string, data: Record<string, unknown>) => ({
  type,
  revision: revision++,
  data,
  metadata: { threadId: 'thread-1' },
});

describe('the command state of a run', () => {
  beforeEach(() => {
    revision = 0;
  });

  it('tracks the active turn, and whether it was already steered', () => {
    const state = foldRunState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('turn.steered', { turnId: 't1', instruction: 'x' }),
    ]);
    expect(state).toMatchObject({
      activeTurnId: 't1',
      activeTurnSteeredAt: 2,
      revision: 2,
      threadId: 'thread-1',
    });
    const next = foldRunState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('turn.steered', { turnId: 't1', instruction: 'x' }),
      e('turn.finished', { turnId: 't1', status: 'completed' }),
      e('turn.started', { turnId: 't2' }),
    ]);
    expect(next).toMatchObject({ activeTurnId: 't2', activeTurnSteeredAt: null });
  });

  it('has no active turn once the run finished', () => {
    const state = foldRunState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('run.finished', { status: 'cancelled' }),
    ]);
    expect(state).toMatchObject({ activeTurnId: null, finished: { status: 'cancelled' } });
  });

  it('starts before the first event: revision -1, no thread, nothing active or finished', () => {
    expect(foldRunState([])).toEqual({
      revision: -1,
      threadId: '',
      finished: null,
      activeTurnId: null,
      activeTurnSteeredAt: null,
      approvals: new Map(),
      latestApprovalByToolCall: new Map(),
    });
  });

  it("keeps the run's thread when a later event's metadata does not name one", () => {
    const state = foldRunState([
      e('run.started', {}),
      { type: 'message.added', revision: revision++, data: {}, metadata: {} },
    ]);
    expect(state).toMatchObject({ threadId: 'thread-1', revision: 1 });
  });

  it('remembers the first steer of the active turn across the events that follow it', () => {
    const state = foldRunState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('turn.steered', { turnId: 't1', instruction: 'x' }),
      e('message.added', { turnId: 't1' }),
      e('turn.steered', { turnId: 't1', instruction: 'y' }),
    ]);
    expect(state).toMatchObject({ activeTurnId: 't1', activeTurnSteeredAt: 2, revision: 4 });
  });

  it('does not count a steer of a turn that is not the active one', () => {
    const state = foldRunState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('turn.steered', { turnId: 't0', instruction: 'x' }),
    ]);
    expect(state).toMatchObject({ activeTurnId: 't1', activeTurnSteeredAt: null });
  });

  it('takes an approval id asked again as the new request, as the thread view shows it: the earlier resolution no longer holds', () => {
    const state = foldRunState([
      e('run.started', {}),
      e('approval.requested', { approvalId: 'a', toolCallId: 'c', toolName: 'deploy', input: 1 }),
      e('approval.resolved', { approvalId: 'a', decision: 'allow', receipt: 'r1' }),
      e('approval.requested', { approvalId: 'a', toolCallId: 'd', toolName: 'drop', input: 2 }),
    ]);
    expect(state.approvals.get('a')).toEqual({
      approvalId: 'a',
      toolCallId: 'd',
      toolName: 'drop',
      input: 2,
      question: undefined,
    });
    expect(state.latestApprovalByToolCall.get('d')).toBe('a');
  });

  it('keeps the first resolution of an approval', () => {
    const state = foldRunState([
      e('run.started', {}),
      e('approval.requested', { approvalId: 'a', toolCallId: 'c', toolName: 'deploy', input: {} }),
      e('approval.resolved', {
        approvalId: 'a',
        decision: 'deny',
        receipt: 'r1',
        downgraded: true,
      }),
      e('approval.resolved', { approvalId: 'a', decision: 'allow', receipt: 'r2' }),
    ]);
    expect(state.approvals.get('a')?.resolution).toMatchObject({
      decision: 'deny',
      receipt: 'r1',
      downgraded: true,
      revision: 2,
    });
  });
});

/**
 * Given/when/then over a decider, as emmett's DeciderSpecification: the run's recorded
 * events, a decision, and the events it appends or the refusal it answers.
 */
function given(...history: { type: string; data: Record<string, unknown> }[]) {
  const state = foldRunState(
    history.map((event, i) => ({ ...event, revision: i, metadata: { threadId: 'thread-1' } })),
  );
  return {
    when: <R>(decide: (state: RunState) => Outcome<R>) => {
      const outcome = decide(state);
      return {
        then: (events: NewEvent[]) => {
          expect(outcome).toMatchObject({ events });
          return outcome as { events: NewEvent[]; result: R };
        },
        thenRefuses: (code: string, fields?: Record<string, unknown>) => {
          expect(outcome).toMatchObject({ refusal: { code, ...(fields ? { fields } : {}) } });
        },
        refusal: 'refusal' in outcome ? outcome.refusal : undefined,
      };
    },
  };
}

const started = { type: 'run.started', data: { threadId: 'thread-1' } };
const turn = (turnId: string) => ({ type: 'turn.started', data: { turnId } });
const asked = (approvalId: string, toolCallId = 'call-1') => ({
  type: 'approval.requested',
  data: { approvalId, toolCallId, toolName: 'deploy', input: { env: 'prod' } },
});
const SECRET = 'a-secret-of-at-least-thirty-two-characters';
const allowAll = (): PolicyVerdict & { revision: string } => ({
  allowed: true,
  revision: 'rev-1',
});
const resolve =
  (decision: 'allow' | 'deny', policy = allowAll, approvalId = 'ap-1') =>
  (state: RunState) =>
    decideResolve(
      {
        tenantId: 'acme',
        runId: 'r1',
        approvalId,
        decision,
        user: 'Łukasz',
        policy,
        receiptId: 'rid-1',
        expiresAt: 2_000,
        secret: SECRET,
      },
      state,
    );

describe('the data a run state is folded from', () => {
  it("is that of RUN_STATE_DATA_TYPES' events alone: without any other event's data, every run folds to the same state", () => {
    fc.assert(
      fc.property(threadSequences, (events) => {
        for (const runId of new Set(events.map((event) => event.metadata.runId))) {
          const run = events.filter((event) => event.metadata.runId === runId);
          const withoutData = run.map((event) =>
            RUN_STATE_DATA_TYPES.includes(event.type as EventType)
              ? event
              : { ...event, data: null },
          );
          expect(foldRunState(withoutData)).toEqual(foldRunState(run));
        }
      }),
    );
  });
});

describe('deciders', () => {
  describe('append', () => {
    const batch = (...types: [string, Record<string, unknown>][]) =>
      types.map(([type, data], i) => ({ id: `e${i}`, type, data, metadata: {} }));
    const append = (events: ReturnType<typeof batch>, head: RunHead | null) => {
      const outcome = decideAppend({ tenantId: 'acme', runId: 'r1', events }, head);
      if ('refusal' in outcome) return outcome;
      return { events: outcome.events.map((event) => outcome.chain.seal(event)) };
    };

    it("starts a run: stamped with the run's context, the active turn and the hash chain", () => {
      const outcome = append(
        batch(['run.started', { threadId: 'thread-1' }], ['turn.started', { turnId: 't1' }]),
        null,
      );
      if ('refusal' in outcome) throw new Error(outcome.refusal.message);
      expect(outcome.events.map((e) => e.metadata)).toEqual([
        expect.objectContaining({ tenantId: 'acme', runId: 'r1', threadId: 'thread-1' }),
        expect.objectContaining({ threadId: 'thread-1', activeTurnId: 't1' }),
      ]);
      expect(outcome.events[1].metadata.prevHash).toBe(outcome.events[0].metadata.hash);
      const verifier = new ChainVerifier('r1');
      outcome.events.forEach((e, revision) => verifier.add({ ...e, revision }));
      expect(verifier.verdict().verified).toBe(true);
    });

    it('refuses by the run rules: a run not started, a second turn, a finished run', () => {
      const head = (over: Partial<RunHead>): RunHead => ({
        revision: 3,
        hash: 'h',
        tenantId: 'acme',
        threadId: 'thread-1',
        finished: false,
        activeTurnId: null,
        ...over,
      });
      expect(append(batch(['message.added', {}]), null)).toMatchObject({
        refusal: { code: 'run_not_found' },
      });
      expect(
        append(batch(['turn.started', { turnId: 't2' }]), head({ activeTurnId: 't1' })),
      ).toMatchObject({
        refusal: {
          code: 'turn_already_active',
          fields: { activeTurnId: 't1' },
          details: { index: 0 },
        },
      });
      expect(append(batch(['message.added', {}]), head({ finished: true }))).toMatchObject({
        refusal: { code: 'run_finished' },
      });
    });
  });

  describe('violations of the run rules', () => {
    it('carry the batch index, and the active turn, only where the rule names them', () => {
      expect(violationRefusal({ code: 'run_not_found', message: 'm' })).toEqual({
        code: 'run_not_found',
        message: 'm',
      });
      expect(violationRefusal({ code: 'run_finished', message: 'm', index: undefined })).toEqual({
        code: 'run_finished',
        message: 'm',
      });
      expect(violationRefusal({ code: 'run_finished', message: 'm', index: 0 })).toEqual({
        code: 'run_finished',
        message: 'm',
        details: { index: 0 },
      });
    });

    it('travel to the edge as a RefusedError carrying the refusal', () => {
      const refusal = { code: 'run_finished' as const, message: 'run r1 is already failed' };
      const error = new RefusedError(refusal);
      expect(error).toBeInstanceOf(Error);
      expect(error).toMatchObject({ name: 'RefusedError', message: refusal.message, refusal });
    });
  });

  describe('steer', () => {
    const steer = (expectedTurnId: string) => (state: RunState) =>
      decideSteer({ runId: 'r1', expectedTurnId, instruction: 'narrower' }, state);

    it('steers the active turn', () => {
      given(started, turn('t1'))
        .when(steer('t1'))
        .then([{ type: 'turn.steered', data: { turnId: 't1', instruction: 'narrower' } }]);
    });

    it('refuses another turn, or none, naming the active one', () => {
      given(started, turn('t1')).when(steer('t0')).thenRefuses('turn_not_active', {
        activeTurnId: 't1',
      });
      given(started).when(steer('t1')).thenRefuses('turn_not_active', { activeTurnId: null });
    });

    it('refuses a finished run as finished, not as a turn a fresh one could replace', () => {
      given(started, turn('t1'), { type: 'run.finished', data: { status: 'completed' } })
        .when(steer('t1'))
        .thenRefuses('run_finished', { status: 'completed' });
    });

    it('steers a turn once: a second steer is a conflict', () => {
      given(started, turn('t1'), { type: 'turn.steered', data: { turnId: 't1' } })
        .when(steer('t1'))
        .thenRefuses('steer_conflict', { activeTurnId: 't1', steeredAtRevision: 2 });
    });

    it('says which turn was steered, and when, in a conflict', () => {
      const outcome = given(started, turn('t1'), {
        type: 'turn.steered',
        data: { turnId: 't1' },
      }).when(steer('t1')).refusal;
      expect(outcome?.message).toMatch(/t1.*already steered.*revision 2/);
    });

    it('refuses another turn as not active even when the active one was steered', () => {
      given(started, turn('t1'), { type: 'turn.steered', data: { turnId: 't1' } })
        .when(steer('t0'))
        .thenRefuses('turn_not_active', { activeTurnId: 't1' });
    });

    it('says in its refusal which turn is active, or that none is', () => {
      expect(given(started, turn('t1')).when(steer('t0')).refusal?.message).toMatch(
        /turn t0 is not active: turn t1 is/,
      );
      expect(given(started).when(steer('t0')).refusal?.message).toMatch(
        /turn t0 is not active: no turn is/,
      );
    });
  });

  describe('stop', () => {
    it('finishes the run as cancelled, with the reason when given', () => {
      given(started)
        .when((s) => decideStop({ runId: 'r1', reason: 'user hung up' }, s))
        .then([{ type: 'run.finished', data: { status: 'cancelled', reason: 'user hung up' } }]);
    });

    it('finishes the run with no reason when none is given', () => {
      const outcome = given(started)
        .when((s) => decideStop({ runId: 'r1' }, s))
        .then([{ type: 'run.finished', data: { status: 'cancelled' } }]);
      expect(outcome.events[0].data).toStrictEqual({ status: 'cancelled' });
    });

    it('refuses a finished run, naming its status', () => {
      given(started, { type: 'run.finished', data: { status: 'completed' } })
        .when((s) => decideStop({ runId: 'r1' }, s))
        .thenRefuses('run_finished', { status: 'completed' });
      expect(
        given(started, { type: 'run.finished', data: { status: 'completed' } }).when((s) =>
          decideStop({ runId: 'r1' }, s),
        ).refusal?.message,
      ).toBe('run r1 is already completed');
    });
  });

  describe('resolve', () => {
    it('records the decision with the receipt id and digest, and answers the token', () => {
      const outcome = given(started, asked('ap-1'))
        .when(resolve('allow'))
        .then([
          {
            type: 'approval.resolved',
            data: { approvalId: 'ap-1', decision: 'allow', receipt: 'rid-1', decidedBy: 'Łukasz' },
          },
        ]);
      const token = outcome.result.receipt;
      expect(outcome.events[0].data.receiptDigest).toBe(receiptDigest(token));
      expect(JSON.stringify(outcome.events)).not.toContain(token);
      expect(verifyReceipt(token, SECRET, 1_000)).toMatchObject({
        ok: true,
        claims: { rid: 'rid-1', toolCallId: 'call-1', user: 'Łukasz', thread: 'thread-1' },
      });
    });

    it('downgrades an allow the policy forbids now to a one-time deny', () => {
      const forbid = () => ({ allowed: false as const, rule: 'default.deny', revision: 'rev-2' });
      given(started, asked('ap-1'))
        .when(resolve('allow', forbid))
        .then([
          {
            type: 'approval.resolved',
            data: { decision: 'deny', downgraded: true, policyRevision: 'rev-2' },
          },
        ]);
    });

    it('refuses a second resolution, reporting the first without its receipt', () => {
      given(started, asked('ap-1'), {
        type: 'approval.resolved',
        data: { approvalId: 'ap-1', decision: 'deny', receipt: 'rid-0', decidedBy: 'Ana' },
      })
        .when(resolve('allow'))
        .thenRefuses('already_resolved', {
          resolution: expect.not.objectContaining({ receipt: expect.anything() }),
        });
    });

    it('refuses an approval asked again for the same call, naming the one that replaced it', () => {
      given(started, asked('ap-1'), asked('ap-2'))
        .when(resolve('allow'))
        .thenRefuses('approval_superseded', { supersededBy: 'ap-2' });
      expect(
        given(started, asked('ap-1'), asked('ap-2')).when(resolve('allow')).refusal?.message,
      ).toBe('approval ap-1 was asked again for tool call call-1 as ap-2: resolve that one');
      given(started, asked('ap-1'), asked('ap-2'))
        .when(resolve('allow', allowAll, 'ap-2'))
        .then([{ type: 'approval.resolved', data: { approvalId: 'ap-2', decision: 'allow' } }]);
    });

    it('refuses an approval whose tool call finished while it waited, until the call is asked about again', () => {
      const finished = { type: 'tool.finished', data: { toolCallId: 'call-1' } };
      const refusal = given(started, asked('ap-1'), finished).when(resolve('allow')).refusal;
      expect(refusal).toEqual({
        code: 'tool_finished',
        message: 'tool call call-1 finished while approval ap-1 waited: nothing is left to decide',
        fields: { toolCallId: 'call-1', finishedAtRevision: 2 },
      });
      given(started, asked('ap-1'), finished, asked('ap-1'))
        .when(resolve('deny'))
        .then([{ type: 'approval.resolved', data: { approvalId: 'ap-1', decision: 'deny' } }]);
      given(started, asked('ap-1'), { type: 'tool.finished', data: { toolCallId: 'call-2' } })
        .when(resolve('allow'))
        .then([{ type: 'approval.resolved', data: { approvalId: 'ap-1', decision: 'allow' } }]);
      given(started, asked('ap-1'), asked('ap-1', 'call-2'), finished)
        .when(resolve('allow'))
        .then([{ type: 'approval.resolved', data: { approvalId: 'ap-1', decision: 'allow' } }]);
    });

    it('keeps a deny a deny, not downgraded, whatever the policy says', () => {
      const forbid = () => ({ allowed: false as const, rule: 'default.deny', revision: 'rev-2' });
      given(started, asked('ap-1'))
        .when(resolve('deny', forbid))
        .then([{ type: 'approval.resolved', data: { decision: 'deny', downgraded: false } }]);
    });

    it('reports every fact of the first resolution, with null for those it did not record', () => {
      const refusal = given(started, asked('ap-1'), {
        type: 'approval.resolved',
        data: { approvalId: 'ap-1', decision: 'deny', receipt: 'rid-0' },
      }).when(resolve('allow')).refusal;
      expect(refusal?.fields).toEqual({
        resolution: {
          approvalId: 'ap-1',
          decision: 'deny',
          downgraded: false,
          decidedBy: null,
          policyRevision: null,
          revision: 2,
        },
      });
      expect(refusal?.message).toBe('approval ap-1 was already resolved: deny');
      const recorded = given(started, asked('ap-1'), {
        type: 'approval.resolved',
        data: {
          approvalId: 'ap-1',
          decision: 'allow',
          receipt: 'rid-0',
          decidedBy: 'Ana',
          policyRevision: 'rev-9',
          downgraded: false,
        },
      }).when(resolve('deny')).refusal;
      expect(recorded?.fields?.resolution).toMatchObject({
        decidedBy: 'Ana',
        policyRevision: 'rev-9',
      });
    });

    it('refuses an unknown approval, and any approval of a finished run', () => {
      given(started).when(resolve('allow')).thenRefuses('approval_not_found');
      const unknown = given(started).when(resolve('allow')).refusal;
      expect(unknown?.message).toBe('approval ap-1 not found in run r1');
      expect(unknown).not.toHaveProperty('fields');
      given(started, asked('ap-1'), { type: 'run.finished', data: { status: 'failed' } })
        .when(resolve('allow'))
        .thenRefuses('run_finished');
    });
  });

  describe('answer', () => {
    const pending = (approvalId: string) => ({ approvalId, runId: 'r1', toolName: 'deploy' });

    it('answers the only pending approval', () => {
      expect(decideAnswer('thread-1', [pending('a')])).toEqual({ target: pending('a') });
    });

    it('refuses none, and lists at most four of several', () => {
      expect(decideAnswer('thread-1', [])).toMatchObject({
        refusal: { code: 'no_pending_approval' },
      });
      const many = decideAnswer('thread-1', ['a', 'b', 'c', 'd', 'e'].map(pending));
      expect(many).toMatchObject({ refusal: { code: 'ambiguous', fields: { pendingCount: 5 } } });
      expect((many as { refusal: Refusal }).refusal.fields?.pending).toHaveLength(4);
    });

    it('names the thread, and lists each pending approval with its question or null', () => {
      const none = decideAnswer('thread-1', []);
      expect((none as { refusal: Refusal }).refusal.message).toBe(
        'thread thread-1 has no pending approval',
      );
      const two = decideAnswer('thread-1', [
        { ...pending('a'), question: 'Deploy to prod?' },
        pending('b'),
      ]);
      expect((two as { refusal: Refusal }).refusal).toEqual({
        code: 'ambiguous',
        message: 'thread thread-1 has 2 pending approvals: name the one to resolve',
        fields: {
          pendingCount: 2,
          pending: [
            { approvalId: 'a', runId: 'r1', toolName: 'deploy', question: 'Deploy to prod?' },
            { approvalId: 'b', runId: 'r1', toolName: 'deploy', question: null },
          ],
        },
      });
    });
  });

  describe('consume', () => {
    function consumeAfter(
      history: { type: string; data: Record<string, unknown> }[],
      overrides: { user?: string; policyAllows?: boolean } = {},
    ) {
      const resolution = given(started, asked('ap-1'))
        .when(resolve('allow'))
        .then([{ type: 'approval.resolved', data: {} }]);
      const token = resolution.result.receipt;
      const check = verifyReceipt(token, SECRET, 1_000);
      if (!check.ok) throw new Error('the receipt does not verify');
      return given(started, asked('ap-1'), resolution.events[0], ...history).when((s) =>
        decideConsume(
          {
            claims: check.claims,
            attempt: {
              toolName: 'deploy',
              inputDigest: inputDigest({ env: 'prod' }),
              user: overrides.user ?? 'Łukasz',
              receipt: token,
            },
            policyAllows: () => overrides.policyAllows ?? true,
          },
          s,
        ),
      );
    }

    it('consumes a receipt while what it is bound to holds', () => {
      consumeAfter([]).then([
        { type: 'receipt.consumed', data: { approvalId: 'ap-1', consumedBy: 'Łukasz' } },
      ]);
    });

    it('refuses once its tool call finished after the resolution; another call finishing is no matter', () => {
      const finish = (toolCallId: string) => ({
        type: 'tool.finished',
        data: { toolCallId, failed: true, errorText: 'gave up' },
      });
      consumeAfter([finish('call-1')]).thenRefuses('receipt_refused', { reason: 'tool_finished' });
      consumeAfter([finish('call-9')]).then([{ type: 'receipt.consumed', data: {} }]);
    });

    it('refuses after the run finished or was stopped', () => {
      consumeAfter([{ type: 'run.finished', data: { status: 'cancelled' } }]).thenRefuses(
        'receipt_refused',
        { reason: 'run_finished' },
      );
    });

    it('records who consumed it, another user than the one who decided', () => {
      consumeAfter([], { user: 'key:runtime' }).then([
        { type: 'receipt.consumed', data: { approvalId: 'ap-1', consumedBy: 'key:runtime' } },
      ]);
    });

    it('refuses a policy that no longer allows the tool, a superseded approval', () => {
      consumeAfter([], { policyAllows: false }).thenRefuses('receipt_refused', {
        reason: 'policy_forbids',
      });
      consumeAfter([asked('ap-2')]).thenRefuses('receipt_refused', { reason: 'superseded' });
    });

    it('names the reason in its refusal', () => {
      expect(consumeAfter([], { policyAllows: false }).refusal?.message).toBe(
        'the receipt is refused: policy_forbids',
      );
    });

    it('refuses as superseded a receipt for an approval this run has not resolved, or not asked', () => {
      const token = given(started, asked('ap-1'))
        .when(resolve('allow'))
        .then([{ type: 'approval.resolved', data: {} }]).result.receipt;
      const check = verifyReceipt(token, SECRET, 1_000);
      if (!check.ok) throw new Error('the receipt does not verify');
      const consume = (s: RunState) =>
        decideConsume(
          {
            claims: check.claims,
            attempt: {
              toolName: 'deploy',
              inputDigest: inputDigest({ env: 'prod' }),
              user: 'Łukasz',
              receipt: token,
            },
            policyAllows: () => true,
          },
          s,
        );
      given(started, asked('ap-1'))
        .when(consume)
        .thenRefuses('receipt_refused', { reason: 'superseded' });
      given(started).when(consume).thenRefuses('receipt_refused', { reason: 'superseded' });
    });
  });
});
