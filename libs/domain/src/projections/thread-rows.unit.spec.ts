/**
 * The thread fold over its rows port (thread-rows.ts): memoryRows keeps lookup tables in step
 * with the state event by event; here a second storage answers every question by scanning the
 * state, with no table at all. Folding the same events one by one into either must give the
 * same thread, so the tables never answer anything a scan of the view would not.
 */
import fc from 'fast-check';
import { propertyRuns } from '../testing/property-runs';
import { isToolPart } from './message-text';
import { fold, TENANT, THREAD, ThreadLog } from './testing/thread-events';
import { threadSequences } from './testing/thread-sequences';
import { applyToRows, emptyThread } from './thread-fold';
import {
  countRuns,
  isOpenToolPart,
  isTerminal,
  memoryRows,
  toolKey,
  type ThreadRows,
  type ToolLocation,
} from './thread-rows';
import type { ProjectedEvent, ThreadState, ToolPart } from './thread-state';

/** Every tool part of the thread, first one per run and call, as the scan finds them. */
function toolLocations(state: ThreadState): ToolLocation[] {
  const seen = new Set<string>();
  const locations: ToolLocation[] = [];
  state.messages.forEach((message, m) => {
    const runId = message.metadata?.runId ?? '';
    message.parts.forEach((part, p) => {
      if (!isToolPart(part) || seen.has(toolKey(runId, part.toolCallId))) return;
      seen.add(toolKey(runId, part.toolCallId));
      locations.push({ message: m, part: p, runId, toolCallId: part.toolCallId });
    });
  });
  return locations;
}

/** Rows that scan the state for every answer: the definition the tables must agree with. */
function scanningRows(state: ThreadState): ThreadRows {
  const partOf = (location: { message: number; part: number }) =>
    state.messages[location.message].parts[location.part];
  const tool = (runId: string, toolCallId: string) =>
    toolLocations(state).find((t) => t.runId === runId && t.toolCallId === toolCallId);
  return {
    header: state,
    counts: countRuns(state.runs),
    run: (runId) => state.runs.find((run) => run.runId === runId),
    addRun: (run) => {
      state.runs.push(run);
      return run;
    },
    dropRun: (runId) => {
      state.runs = state.runs.filter((run) => run.runId !== runId);
    },
    messageAt: (id) => {
      const at = state.messages.findIndex((message) => message.id === id);
      return at === -1 ? undefined : at;
    },
    sourceOf: (m) => state.messages[m].metadata?.source,
    clientIdOf: (m) => state.messages[m].metadata?.clientId ?? state.messages[m].id,
    lastMessage: () => {
      const last = state.messages.at(-1);
      if (last === undefined) return undefined;
      return {
        message: state.messages.length - 1,
        role: last.role,
        runId: last.metadata?.runId,
        partCount: last.parts.length,
      };
    },
    addMessage: (message) => state.messages.push(message) - 1,
    part: partOf,
    textPartOf: (m) => state.messages[m].parts.findIndex((part) => part.type === 'text'),
    addPart: (m, part) => state.messages[m].parts.push(part) - 1,
    setPart: (location, part) => {
      state.messages[location.message].parts[location.part] = part;
    },
    tool,
    openTools: (runId) =>
      toolLocations(state).filter((t) => t.runId === runId && isOpenToolPart(partOf(t))),
    approvalTool: (runId, approvalId) => {
      const pending = state.pendingApprovals.find(
        (p) => p.runId === runId && p.approvalId === approvalId,
      );
      if (pending !== undefined) return tool(pending.runId, pending.toolCallId);
      return toolLocations(state).find(
        (t) => t.runId === runId && (partOf(t) as ToolPart).approval?.id === approvalId,
      );
    },
    linkApproval: () => undefined,
  };
}

describe('thread rows', () => {
  it('folding events one by one into rows that scan equals the fold over memoryRows', () => {
    fc.assert(
      fc.property(threadSequences, (events) => {
        const scanned = emptyThread(TENANT, THREAD);
        for (const event of events) applyToRows(scanningRows(scanned), event);
        expect(JSON.stringify(scanned)).toBe(JSON.stringify(fold(events)));
      }),
      { numRuns: propertyRuns(150) },
    );
  });

  it.each([
    ['kept in step event by event', (events: ProjectedEvent[]) => fold(events)],
    [
      'rebuilt from a state read back from JSON',
      (events: ProjectedEvent[]) => JSON.parse(JSON.stringify(fold(events))) as ThreadState,
    ],
  ])('answers, after any sequence, what a scan of the state answers: tables %s', (_how, folded) => {
    fc.assert(
      fc.property(threadSequences, (events) => {
        const state = folded(events);
        const rows = memoryRows(state);
        const scan = scanningRows(state);
        expect(rows.counts).toEqual(scan.counts);
        expect(rows.lastMessage()).toEqual(scan.lastMessage());
        for (const [i, message] of state.messages.entries()) {
          expect(rows.messageAt(message.id)).toBe(i);
        }
        for (const run of state.runs) {
          expect(rows.run(run.runId)).toBe(run);
          const byKey = (a: ToolLocation, b: ToolLocation) =>
            toolKey(a.runId, a.toolCallId).localeCompare(toolKey(b.runId, b.toolCallId));
          expect([...rows.openTools(run.runId)].sort(byKey)).toEqual(
            [...scan.openTools(run.runId)].sort(byKey),
          );
        }
        for (const location of toolLocations(state)) {
          expect(rows.tool(location.runId, location.toolCallId)).toEqual(location);
        }
        for (const approval of state.pendingApprovals) {
          expect(rows.approvalTool(approval.runId, approval.approvalId)).toEqual(
            scan.approvalTool(approval.runId, approval.approvalId),
          );
        }
      }),
      { numRuns: propertyRuns(100) },
    );
  });

  describe('when the owner changes the state outside the fold', () => {
    /** Two threads of one run, of one message each, that a stale table would confuse. */
    const threads = () => {
      const log = new ThreadLog();
      const a = fold([log.runStarted('r1'), log.message('r1', 'm-a', 'user', 'a')]);
      const b = fold([log.runStarted('r2'), log.message('r2', 'm-b', 'user', 'b')]);
      return { a, b, log };
    };
    const changes: [string, (a: ThreadState, b: ThreadState) => void][] = [
      ['replaces its messages', (a, b) => (a.messages = b.messages)],
      ['appends a message', (a, b) => a.messages.push(b.messages[0])],
      ['replaces its runs', (a, b) => (a.runs = b.runs)],
      ['appends a run', (a, b) => a.runs.push(b.runs[0])],
    ];

    it.each(changes)('folds on as from a fresh copy when it %s', (_what, change) => {
      const { a, b, log } = threads();
      memoryRows(a);
      change(a, b);
      const fresh = JSON.parse(JSON.stringify(a)) as ThreadState;
      const next = [
        log.message('r2', 'm-b', 'user', 'b again'),
        log.message('r1', 'm-a', 'user', 'a again'),
        log.runFinished('r2', 'completed'),
      ];
      for (const event of next) {
        applyToRows(memoryRows(a), event);
        applyToRows(memoryRows(fresh), event);
      }
      expect(JSON.stringify(a)).toBe(JSON.stringify(fresh));
    });
  });

  it('reads a message with no metadata as one of the run with the empty id', () => {
    const state = emptyThread(TENANT, THREAD);
    const part: ToolPart = { type: 'tool-lookup', toolCallId: 'c1', state: 'input-available' };
    state.messages.push({ id: 'm1', role: 'assistant', parts: [part] });
    const rows = memoryRows(state);
    expect(rows.tool('', 'c1')).toEqual({ message: 0, part: 0, runId: '', toolCallId: 'c1' });
    expect(rows.openTools('')).toEqual([rows.tool('', 'c1')]);
    expect(rows.lastMessage()).toEqual({
      message: 0,
      role: 'assistant',
      runId: undefined,
      partCount: 1,
    });
  });

  it('answers nothing for what the thread does not hold', () => {
    const log = new ThreadLog();
    const rows = memoryRows(fold([log.runStarted('r1'), log.toolStarted('r1', 'c1')]));
    expect(rows.run('r2')).toBeUndefined();
    expect(rows.messageAt('m-none')).toBeUndefined();
    expect(rows.tool('r2', 'c1')).toBeUndefined();
    expect(rows.openTools('r2')).toEqual([]);
    expect(rows.approvalTool('r1', 'ap-none')).toBeUndefined();
    expect(memoryRows(emptyThread(TENANT, THREAD)).lastMessage()).toBeUndefined();
  });

  it('tells a call apart by its run, whatever the ids contain', () => {
    expect(toolKey('a:b', 'c')).not.toBe(toolKey('a', 'b:c'));
    expect(toolKey('r1', 'c1')).toBe(toolKey('r1', 'c1'));
  });

  it('takes an output, an error and a denial as terminal, and nothing before them', () => {
    expect(
      (
        [
          'input-available',
          'approval-requested',
          'approval-responded',
          'output-available',
          'output-error',
          'output-denied',
        ] as const
      ).map(isTerminal),
    ).toEqual([false, false, false, true, true, true]);
    expect(isOpenToolPart({ type: 'text', text: 'tool-x' })).toBe(false);
  });
});
