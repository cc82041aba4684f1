import { runCommandState } from './run-commands';

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
    const state = runCommandState([
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
    const next = runCommandState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('turn.steered', { turnId: 't1', instruction: 'x' }),
      e('turn.finished', { turnId: 't1', status: 'completed' }),
      e('turn.started', { turnId: 't2' }),
    ]);
    expect(next).toMatchObject({ activeTurnId: 't2', activeTurnSteeredAt: null });
  });

  it('has no active turn once the run finished', () => {
    const state = runCommandState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('run.finished', { status: 'cancelled' }),
    ]);
    expect(state).toMatchObject({ activeTurnId: null, finished: { status: 'cancelled' } });
  });

  it('keeps the first resolution of an approval', () => {
    const state = runCommandState([
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

  it('starts from nothing: no revision, no thread, no turn, no approvals', () => {
    expect(runCommandState([])).toEqual({
      revision: -1,
      threadId: '',
      finished: null,
      activeTurnId: null,
      activeTurnSteeredAt: null,
      approvals: new Map(),
    });
  });

  it('takes the thread from the stamped metadata, ignoring a stamp that is not a string', () => {
    const state = runCommandState([
      e('run.started', {}),
      { type: 'message.added', revision: 1, data: {}, metadata: { threadId: 7 } },
    ]);
    expect(state).toMatchObject({ revision: 1, threadId: 'thread-1' });
  });

  it('records only the first steer of the active turn, and none of another turn', () => {
    const state = runCommandState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('turn.steered', { turnId: 't0', instruction: 'x' }),
      e('turn.steered', { turnId: 't1', instruction: 'y' }),
      e('turn.steered', { turnId: 't1', instruction: 'z' }),
    ]);
    expect(state).toMatchObject({ activeTurnId: 't1', activeTurnSteeredAt: 3 });
  });

  it('keeps the active turn, and its steer, when a turn.finished names another turn', () => {
    const state = runCommandState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('turn.steered', { turnId: 't1', instruction: 'x' }),
      e('turn.finished', { turnId: 't0', status: 'completed' }),
    ]);
    expect(state).toMatchObject({ activeTurnId: 't1', activeTurnSteeredAt: 2 });
    const finished = runCommandState([
      e('run.started', {}),
      e('turn.started', { turnId: 't2' }),
      e('turn.steered', { turnId: 't2', instruction: 'x' }),
      e('turn.finished', { turnId: 't2', status: 'completed' }),
    ]);
    expect(finished).toMatchObject({ activeTurnId: null, activeTurnSteeredAt: null });
  });

  it('forgets the steer of a turn the run ended', () => {
    const state = runCommandState([
      e('run.started', {}),
      e('turn.started', { turnId: 't1' }),
      e('turn.steered', { turnId: 't1', instruction: 'x' }),
      e('run.finished', { status: 'completed' }),
    ]);
    expect(state).toMatchObject({ activeTurnSteeredAt: null, finished: { status: 'completed' } });
  });

  it('keeps the first request of an approval id, and resolves only requested approvals', () => {
    const state = runCommandState([
      e('run.started', {}),
      e('approval.requested', {
        approvalId: 'a',
        toolCallId: 'c1',
        toolName: 'deploy',
        input: { env: 'prod' },
        question: 'Ship it?',
      }),
      e('approval.requested', { approvalId: 'a', toolCallId: 'c2', toolName: 'drop', input: {} }),
      e('approval.resolved', { approvalId: 'b', decision: 'allow', receipt: 'rb' }),
      e('approval.resolved', {
        approvalId: 'a',
        decision: 'allow',
        receipt: 'ra',
        decidedBy: 'u:ana',
        policyRevision: 'c0ffee',
      }),
    ]);
    expect([...state.approvals.keys()]).toEqual(['a']);
    expect(state.approvals.get('a')).toEqual({
      approvalId: 'a',
      toolCallId: 'c1',
      toolName: 'deploy',
      input: { env: 'prod' },
      question: 'Ship it?',
      resolution: {
        decision: 'allow',
        downgraded: false,
        receipt: 'ra',
        decidedBy: 'u:ana',
        policyRevision: 'c0ffee',
        revision: 4,
      },
    });
  });
});
