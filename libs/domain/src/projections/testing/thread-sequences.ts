/**
 * Random valid sequences of one thread's events, for property tests of the fold (here) and
 * of the projector and read-model store (libs/projections).
 */
import fc from 'fast-check';
import type { EndStatus } from '../../event-types';
import type { ProjectedEvent } from '../thread-state';
import { ThreadLog } from './thread-events';

// Random valid sequences: abstract actions, turned into events by a small model of the
// write path's rules (a run starts first and takes nothing after its end; one active turn
// per run; a steer names the active turn; an approval is resolved once, after its request).

const RUNS = 3;
const CALLS = 4;
const TOOL_NAMES = ['lookup', 'search', 'refund'];

type Action =
  | { kind: 'run.started'; run: number; title: string | null }
  | { kind: 'run.finished'; run: number; status: EndStatus }
  | { kind: 'turn.started'; run: number; turn: number }
  | { kind: 'turn.finished'; run: number; turn: number }
  | { kind: 'turn.steered'; run: number }
  | {
      kind: 'message.added';
      run: number;
      id: string;
      role: 'user' | 'assistant' | 'system';
      text: string;
    }
  | { kind: 'transcript.added'; run: number; id: string; role: 'user' | 'assistant'; text: string }
  | { kind: 'model.call'; run: number }
  | { kind: 'append.rejected'; run: number }
  | { kind: 'tool.started'; run: number; call: number }
  | {
      kind: 'tool.finished';
      run: number;
      call: number;
      failed: boolean;
      named: boolean;
      output: unknown;
    }
  | {
      kind: 'approval.requested';
      run: number;
      approval: number;
      call: number;
      /** null and undefined alike are read as no question. */
      question: string | null | undefined;
    }
  | {
      kind: 'approval.resolved';
      run: number;
      approval: number;
      allow: boolean;
      downgraded: boolean;
    };

const run = fc.integer({ min: 0, max: RUNS - 1 });
const call = fc.integer({ min: 0, max: CALLS - 1 });
const text = fc.oneof(
  fc.string({ maxLength: 30 }),
  fc.constantFrom('{"type":"text","text":"hi"}', '[]', '   ', ''),
  fc.json({ maxDepth: 2 }),
);
const messageId = fc.oneof(
  fc.constantFrom('m0', 'm1', 'm2', 'm3', 'u0', 'u1'),
  fc.constantFrom('tool-msg-call_0', 'tool-msg-call_1', 'transcript:m0', 'message:u0'),
);
const output = fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constant(undefined));

const action: fc.Arbitrary<Action> = fc.oneof(
  {
    arbitrary: fc.record({
      kind: fc.constant('run.started' as const),
      run,
      title: fc.option(fc.constantFrom('Refund', ' ', 'Order')),
    }),
    weight: 3,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant('run.finished' as const),
      run,
      status: fc.constantFrom<EndStatus>('completed', 'failed', 'cancelled'),
    }),
    weight: 1,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant('turn.started' as const),
      run,
      turn: fc.integer({ min: 0, max: 3 }),
    }),
    weight: 2,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant('turn.finished' as const),
      run,
      turn: fc.integer({ min: 0, max: 3 }),
    }),
    weight: 2,
  },
  { arbitrary: fc.record({ kind: fc.constant('turn.steered' as const), run }), weight: 1 },
  {
    arbitrary: fc.record({
      kind: fc.constant('message.added' as const),
      run,
      id: messageId,
      role: fc.constantFrom<'user' | 'assistant' | 'system'>('user', 'assistant', 'system'),
      text,
    }),
    weight: 3,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant('transcript.added' as const),
      run,
      id: messageId,
      role: fc.constantFrom<'user' | 'assistant'>('user', 'assistant'),
      text,
    }),
    weight: 2,
  },
  { arbitrary: fc.record({ kind: fc.constant('model.call' as const), run }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('append.rejected' as const), run }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('tool.started' as const), run, call }), weight: 5 },
  {
    arbitrary: fc.record({
      kind: fc.constant('tool.finished' as const),
      run,
      call,
      failed: fc.boolean(),
      named: fc.boolean(),
      output,
    }),
    weight: 5,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant('approval.requested' as const),
      run,
      approval: fc.integer({ min: 0, max: 1 }),
      call,
      question: fc.constantFrom('Refund 19.99 EUR?', 'Apply it? '.repeat(500), null, undefined),
    }),
    weight: 2,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant('approval.resolved' as const),
      run,
      approval: fc.integer({ min: 0, max: 1 }),
      allow: fc.boolean(),
      downgraded: fc.boolean(),
    }),
    weight: 2,
  },
);

export const toolName = (callIndex: number) => TOOL_NAMES[callIndex % TOOL_NAMES.length];
export const callId = (callIndex: number) => `call_${callIndex}`;

/** The events the write path would have recorded for these actions, in order. */
function eventsOf(actions: readonly Action[]): ProjectedEvent[] {
  const log = new ThreadLog();
  const events: ProjectedEvent[] = [];
  const started = new Set<number>();
  const ended = new Set<number>();
  const activeTurn = new Map<number, string>();
  // By run and approval id (ids are a run's own; another run may reuse one): the call its
  // newest request is for, while unresolved.
  const awaiting = new Map<string, string>();
  // By run and call: the approval asked last for it; the resolve command refuses older ones.
  const latest = new Map<string, string>();
  for (const a of actions) {
    const runId = `run-${a.run}`;
    if (a.kind === 'run.started') {
      if (started.has(a.run)) continue;
      started.add(a.run);
      events.push(log.runStarted(runId, a.title === null ? {} : { title: a.title }));
      continue;
    }
    if (ended.has(a.run)) continue;
    if (!started.has(a.run)) {
      started.add(a.run);
      events.push(log.runStarted(runId));
    }
    switch (a.kind) {
      case 'run.finished':
        ended.add(a.run);
        events.push(log.runFinished(runId, a.status));
        break;
      case 'turn.started':
        if (activeTurn.has(a.run)) break;
        activeTurn.set(a.run, `turn-${a.turn}`);
        events.push(log.turnStarted(runId, `turn-${a.turn}`));
        break;
      case 'turn.finished':
        if (activeTurn.get(a.run) === `turn-${a.turn}`) activeTurn.delete(a.run);
        events.push(log.turnFinished(runId, `turn-${a.turn}`));
        break;
      case 'turn.steered': {
        const turnId = activeTurn.get(a.run);
        if (turnId !== undefined) {
          events.push(log.event(runId, 'turn.steered', { turnId, instruction: 'faster' }));
        }
        break;
      }
      case 'message.added':
        events.push(log.message(runId, a.id, a.role, a.text));
        break;
      case 'transcript.added':
        events.push(
          log.transcript(runId, a.id, a.role, a.text.trim() === '' ? `said ${a.text}` : a.text),
        );
        break;
      case 'model.call':
        events.push(
          log.event(runId, 'model.call', {
            callId: 'mc',
            model: 'm',
            messages: [{ role: 'user', content: 'hi' }],
          }),
        );
        break;
      case 'append.rejected':
        events.push(
          log.event(runId, 'append.rejected', { reason: 'body_too_large', declaredBytes: 1 }),
        );
        break;
      case 'tool.started':
        events.push(log.toolStarted(runId, callId(a.call), toolName(a.call), { call: a.call }));
        break;
      case 'tool.finished': {
        const event = log.toolFinished(runId, callId(a.call), {
          toolName: toolName(a.call),
          failed: a.failed,
          output: a.output,
          ...(a.failed ? { errorText: `call ${a.call} failed` } : {}),
        });
        const data = event.data as Record<string, unknown>;
        if (!a.named) delete data.toolName;
        if (a.output === undefined) delete data.output;
        events.push(event);
        break;
      }
      case 'approval.requested': {
        // Asked again under an id (resolved or not), the newest request is the one that waits.
        const approvalId = `ap-${a.approval}`;
        awaiting.set(`${runId}/${approvalId}`, callId(a.call));
        latest.set(`${runId}/${callId(a.call)}`, approvalId);
        const request = log.approvalRequested(runId, approvalId, callId(a.call), toolName(a.call), {
          call: a.call,
        });
        if (a.question === undefined) delete request.data.question;
        else request.data.question = a.question;
        events.push(request);
        break;
      }
      case 'approval.resolved': {
        // The resolve command answers a request once.
        const approvalId = `ap-${a.approval}`;
        const call = awaiting.get(`${runId}/${approvalId}`);
        if (call === undefined || latest.get(`${runId}/${call}`) !== approvalId) break;
        awaiting.delete(`${runId}/${approvalId}`);
        events.push(
          log.approvalResolved(
            runId,
            approvalId,
            a.allow ? 'allow' : 'deny',
            a.allow ? {} : { downgraded: a.downgraded },
          ),
        );
        break;
      }
    }
  }
  return events;
}

/** Random sequences of one thread's events that the write path could have recorded. */
export const threadSequences = fc
  .array(action, { minLength: 1, maxLength: 80, size: 'large' })
  .map(eventsOf);
