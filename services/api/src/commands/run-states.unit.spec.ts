import type { RecordedEvent } from '@runledger/event-store';
import { FoldedRun, RunStates } from './run-states';

let revision = 0;
function recorded(type: string, data: Record<string, unknown>, size?: number): RecordedEvent {
  return {
    id: `e${revision}`,
    stream: 'run-acme-r',
    type,
    revision: revision++,
    position: revision,
    data,
    metadata: {},
    recordedAt: '2026-12-05T00:00:00.000Z',
    ...(size === undefined ? {} : { size }),
  };
}

/** A run started, with `approvals` approvals whose stored events are `size` bytes each. */
function run(approvals: number, size = 1000): FoldedRun {
  revision = 0;
  const folded = new FoldedRun();
  folded.add(recorded('run.started', { threadId: 't1', agent: 'a', source: 'api' }));
  for (let n = 0; n < approvals; n += 1) {
    const data = { approvalId: `a${n}`, toolCallId: `c${n}`, toolName: 'deploy', input: { n } };
    folded.add(recorded('approval.requested', data, size));
  }
  return folded;
}

describe('RunStates', () => {
  it('answers a copy: folding on it changes neither the kept state nor another copy', () => {
    const states = new RunStates(1024 * 1024);
    states.keep('s', run(1));
    const first = states.take('s');
    first.add(
      recorded('approval.requested', {
        approvalId: 'b',
        toolCallId: 'cb',
        toolName: 'x',
        input: {},
      }),
    );
    const second = states.take('s');
    expect(first.state.approvals.has('b')).toBe(true);
    expect(second.state.approvals.has('b')).toBe(false);
    expect(second.state.revision).toBe(1);
    expect(second.bytes).toBeLessThan(first.bytes);
  });

  it('answers a fresh state for a run it does not hold', () => {
    const folded = new RunStates(1024 * 1024).take('unknown');
    expect(folded.state.revision).toBe(-1);
    expect(folded.state.approvals.size).toBe(0);
  });

  it('keeps the later of two states of a run, whichever is kept last', () => {
    const states = new RunStates(1024 * 1024);
    states.keep('s', run(3));
    states.keep('s', run(1));
    expect(states.take('s').state.revision).toBe(3);
    states.keep('t', run(1));
    states.keep('t', run(3));
    expect(states.take('t').state.revision).toBe(3);
  });

  it('counts the approvals a state holds and lets the least recently used go past its budget', () => {
    // Each state: 512 + (256 + 9,232) = 10,000 bytes, so eight fill 80,000 exactly and a
    // ninth does not fit.
    const states = new RunStates(80_000);
    const streams = Array.from({ length: 8 }, (_, n) => `s${n}`);
    for (const stream of streams) states.keep(stream, run(1, 9_232));
    // s0's later state takes the place of its first, bytes and all, and is the most recent.
    const later = run(1, 9_232);
    later.add(recorded('message.added', { messageId: 'm', role: 'user', text: 'go on' }));
    states.keep('s0', later);
    states.keep('s8', run(1, 9_232));
    expect(states.take('s1').state.revision).toBe(-1);
    expect(states.take('s0').state.revision).toBe(2);
    for (const stream of [...streams.slice(2), 's8']) {
      expect(states.take(stream).state.revision).toBe(1);
    }
  });

  it('does not keep a state larger than an eighth of its budget', () => {
    const states = new RunStates(100_000);
    states.keep('big', run(2, 10_000));
    expect(states.take('big').state.revision).toBe(-1);
    // 512 + 256 + 11,732 = 12,500: an eighth of the budget exactly, which is kept.
    states.keep('small', run(1, 11_732));
    expect(states.take('small').state.revision).toBe(1);
  });
});
