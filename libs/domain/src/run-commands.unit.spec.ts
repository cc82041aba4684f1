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
});
