/**
 * Properties of the thread fold over random valid event sequences (docs/architecture.md, "The read side"):
 * folding in one go equals folding in chunks with the state stored as JSON between them (a
 * rebuild equals the live projection), the messages always pass the AI SDK's
 * validateUIMessages, the view's invariants hold after every event, and the order in which
 * a tool's start and finish arrive never changes its final part.
 */
import fc from 'fast-check';
import { propertyRuns } from '../testing/property-runs';
import { fold, TENANT, THREAD, ThreadLog, toolParts } from './testing/thread-events';
import { callId, threadSequences as sequences, toolName } from './testing/thread-sequences';
import { uiMessageProblems } from './testing/ui-messages';
import { isToolPart } from './message-text';
import type { EventType } from '../event-types';
import { applyToThread, emptyThread, evolveThread, THREAD_DATA_TYPES } from './thread-fold';
import type { ProjectedEvent, ThreadState, ToolPart } from './thread-state';

// ---------------------------------------------------------------------------------------

function foldInChunks(events: readonly ProjectedEvent[], cuts: readonly number[]): ThreadState {
  const boundaries = [...new Set(cuts.map((cut) => cut % (events.length + 1)))].sort(
    (a, b) => a - b,
  );
  let state = emptyThread(TENANT, THREAD);
  let from = 0;
  for (const to of [...boundaries, events.length]) {
    // The projector stores the state as JSON between batches and reads it back.
    state = JSON.parse(JSON.stringify(state)) as ThreadState;
    for (const event of events.slice(from, to)) applyToThread(state, event);
    from = Math.max(from, to);
  }
  return JSON.parse(JSON.stringify(state)) as ThreadState;
}

const TERMINAL = new Set(['output-available', 'output-error', 'output-denied']);

/** The view's invariants, checked by scanning (the fold keeps them without scanning). */
function invariantProblems(state: ThreadState): string[] {
  const problems: string[] = [];
  const ids = state.messages.map((m) => m.id);
  if (new Set(ids).size !== ids.length) problems.push(`duplicate message ids: ${ids.join(',')}`);
  const runStatus = new Map(state.runs.map((r) => [r.runId, r.status]));
  const partByKey = new Map<string, ToolPart>();
  for (const message of state.messages) {
    for (const part of message.parts) {
      if (!isToolPart(part)) continue;
      if (message.role !== 'assistant')
        problems.push(`tool part ${part.toolCallId} outside an assistant message`);
      const runId = message.metadata?.runId ?? '';
      const key = `${runId}/${part.toolCallId}`;
      if (partByKey.has(key)) problems.push(`duplicate part ${key}`);
      partByKey.set(key, part);
      if (runStatus.get(runId) !== 'running' && !TERMINAL.has(part.state)) {
        problems.push(`part ${key} is ${part.state} in a run that is over`);
      }
    }
  }
  const activeKeys = state.activeTools.map((t) => `${t.runId}/${t.toolCallId}`);
  if (new Set(activeKeys).size !== activeKeys.length) problems.push('duplicate active tools');
  for (const key of activeKeys) {
    const part = partByKey.get(key);
    if (part === undefined || TERMINAL.has(part.state))
      problems.push(`active tool ${key} is not running`);
  }
  for (const approval of state.pendingApprovals) {
    if (runStatus.get(approval.runId) !== 'running')
      problems.push(`approval ${approval.approvalId} pending in a run that is over`);
  }
  const active = state.runs.filter((r) => r.status === 'running');
  const expected =
    state.pendingApprovals.length > 0
      ? 'blocked'
      : state.runs.length === 0
        ? 'idle'
        : active.length === 0
          ? 'finished'
          : active.some((r) => r.activeTurnId !== null) || state.activeTools.length > 0
            ? 'running'
            : 'idle';
  if (state.status !== expected) problems.push(`status ${state.status}, expected ${expected}`);
  return problems;
}

describe('thread fold properties', () => {
  it('folding in one go equals folding in chunks with a JSON round trip between them (rebuild == live)', () => {
    fc.assert(
      fc.property(sequences, fc.array(fc.nat(), { maxLength: 6 }), (events, cuts) => {
        const live = fold(events);
        expect(JSON.stringify(foldInChunks(events, cuts))).toBe(JSON.stringify(live));
      }),
      { numRuns: propertyRuns(400) },
    );
  });

  it("reads the data of THREAD_DATA_TYPES' events alone: without any other's, the same view", () => {
    fc.assert(
      fc.property(sequences, (events) => {
        const withoutData = events.map((event) =>
          THREAD_DATA_TYPES.includes(event.type as EventType)
            ? event
            : { ...event, data: null as unknown as ProjectedEvent['data'] },
        );
        expect(fold(withoutData)).toEqual(fold(events));
      }),
      { numRuns: propertyRuns(400) },
    );
  });

  it('evolveThread, event by event, ends where applyToThread ends, leaving each state it was given as it was', () => {
    fc.assert(
      fc.property(sequences, (events) => {
        let state = emptyThread(TENANT, THREAD);
        for (const event of events) {
          const before = JSON.stringify(state);
          const next = evolveThread(state, event);
          expect(JSON.stringify(state)).toBe(before);
          state = next;
        }
        expect(JSON.stringify(state)).toBe(JSON.stringify(fold(events)));
      }),
      { numRuns: propertyRuns(100) },
    );
  });

  it('keeps the view invariants after every event', () => {
    fc.assert(
      fc.property(sequences, (events) => {
        const state = emptyThread(TENANT, THREAD);
        for (const event of events) {
          applyToThread(state, event);
          expect(invariantProblems(state)).toEqual([]);
        }
      }),
      { numRuns: propertyRuns(300) },
    );
  });

  it('answers messages that validateUIMessages accepts', async () => {
    await fc.assert(
      fc.asyncProperty(sequences, async (events) => {
        expect(await uiMessageProblems(fold(events).messages)).toBeNull();
      }),
      { numRuns: propertyRuns(300) },
    );
  });
});

// ---------------------------------------------------------------------------------------

interface ToolCallScript {
  call: number;
  failed: boolean;
  named: boolean;
  startTwice: boolean;
  finishTwice: boolean;
}

const toolScripts = fc.uniqueArray(
  fc.record({
    call: fc.integer({ min: 0, max: 9 }),
    failed: fc.boolean(),
    named: fc.boolean(),
    startTwice: fc.boolean(),
    finishTwice: fc.boolean(),
  }),
  { minLength: 1, maxLength: 5, selector: (script) => script.call },
);

type Step = { call: number; phase: 'start' | 'finish'; script: ToolCallScript };

function stepsOf(scripts: readonly ToolCallScript[]): Step[] {
  return scripts.flatMap((script) => {
    const steps: Step[] = [
      { call: script.call, phase: 'start', script },
      { call: script.call, phase: 'finish', script },
    ];
    if (script.startTwice) steps.push({ call: script.call, phase: 'start', script });
    if (script.finishTwice) steps.push({ call: script.call, phase: 'finish', script });
    return steps;
  });
}

function foldSteps(steps: readonly Step[]): ThreadState {
  const log = new ThreadLog();
  const events = [log.runStarted('r1')];
  for (const { call: c, phase, script } of steps) {
    if (phase === 'start') {
      events.push(log.toolStarted('r1', callId(c), toolName(c), { call: c }));
      continue;
    }
    const finish = log.toolFinished('r1', callId(c), {
      toolName: toolName(c),
      failed: script.failed,
      output: { result: c },
      ...(script.failed ? { errorText: `call ${c} failed` } : {}),
    });
    if (!script.named) delete (finish.data as Record<string, unknown>).toolName;
    events.push(finish);
  }
  return fold(events);
}

function partsByCall(state: ThreadState): ToolPart[] {
  return [...toolParts(state)].sort((a, b) => a.toolCallId.localeCompare(b.toolCallId));
}

describe('tool start/finish interleavings', () => {
  it('whatever order starts and finishes arrive in, duplicates included, the final parts are the same, once each, and nothing runs', () => {
    fc.assert(
      fc.property(
        toolScripts.chain((scripts) => {
          const steps = stepsOf(scripts);
          return fc.tuple(
            fc.constant(scripts),
            fc.array(fc.double({ noNaN: true }), {
              minLength: steps.length,
              maxLength: steps.length,
            }),
          );
        }),
        ([scripts, keys]) => {
          const inOrder = stepsOf(scripts);
          const shuffled = inOrder
            .map((step, i) => ({ step, key: keys[i] }))
            .sort((a, b) => a.key - b.key)
            .map(({ step }) => step);
          const reference = foldSteps(inOrder);
          const state = foldSteps(shuffled);
          expect(partsByCall(state)).toEqual(partsByCall(reference));
          expect(toolParts(state)).toHaveLength(scripts.length);
          expect(state.activeTools).toEqual([]);
          for (const part of toolParts(state)) {
            expect(part.state).toBe(
              scripts.find((s) => callId(s.call) === part.toolCallId)?.failed
                ? 'output-error'
                : 'output-available',
            );
          }
        },
      ),
      { numRuns: propertyRuns(500) },
    );
  });
});
