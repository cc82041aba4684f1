/**
 * The thread view's fold, rule by rule (docs/api.md, "Threads"; docs/architecture.md, "Why it exists"):
 * messages, two-phase tool parts in any order, approvals, run ends, what runs now, status.
 * Every thread these examples build must also pass the AI SDK's validateUIMessages.
 */
import { EVENT_TYPES } from '../event-types';
import { EVENT_DATA_EXAMPLES } from '../testing/event-fixtures';
import {
  given,
  recordedAt,
  takeFolded,
  TENANT,
  THREAD,
  ThreadLog,
  toolPart,
  toolParts,
} from './testing/thread-events';
import { uiMessageProblems } from './testing/ui-messages';
import {
  applyToThread,
  DOWNGRADED_REASON,
  emptyThread,
  evolveThread,
  FINISHED_RUNS_KEPT,
  MAX_PARTS_PER_MESSAGE,
  MAX_PENDING_DETAILS,
  PENDING_BRIEF_CHARS,
  PENDING_DETAIL_MAX_CHARS,
  THREAD_EVENT_HANDLING,
  threadKey,
  threadOf,
  threadSummary,
  threadView,
} from './thread-fold';
import type { ProjectedEvent, ThreadState } from './thread-state';

let log: ThreadLog;

beforeEach(() => {
  log = new ThreadLog();
});

afterEach(async () => {
  for (const state of takeFolded()) {
    expect(await uiMessageProblems(state.messages)).toBeNull();
  }
});

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

describe('the AI SDK check every example goes through', () => {
  it('is real: it rejects what validateUIMessages rejects', async () => {
    const unanswered = {
      id: 'x',
      role: 'assistant' as const,
      parts: [
        {
          type: 'tool-refund' as const,
          toolCallId: 'tc1',
          state: 'output-available' as const,
          input: {},
          output: 1,
          approval: { id: 'ap1' },
        },
      ],
    };
    expect(await uiMessageProblems([unanswered])).toMatch(/Type validation failed/);
    const noInput = {
      ...unanswered,
      parts: [{ ...unanswered.parts[0], approval: undefined, input: undefined }],
    };
    expect(await uiMessageProblems([noInput])).toMatch(/Type validation failed/);
  });
});

describe('threadKey', () => {
  it('tells apart every tenant and thread, even where their ids run into each other', () => {
    const keys = [
      threadKey('acme', 'th-1'),
      threadKey('acme', 'th-2'),
      threadKey('globex', 'th-1'),
      threadKey('acme-th', '1'),
      threadKey('acme', '-th-1'),
    ];
    expect(new Set(keys).size).toBe(keys.length);
    expect(threadKey('acme', 'th-1')).toBe(threadKey('acme', 'th-1'));
  });
});

describe('emptyThread', () => {
  it('is idle at position 0 with nothing in it', () => {
    expect(emptyThread(TENANT, THREAD)).toEqual({
      tenantId: TENANT,
      threadId: THREAD,
      title: null,
      status: 'idle',
      runs: [],
      messages: [],
      pendingApprovals: [],
      activeTools: [],
      lastActivityAt: '',
      position: 0,
    });
  });
});

describe('messages', () => {
  it('given a run, when a message is added, then it is a UIMessage with one text part', () => {
    const state = given(log.runStarted('r1')).when(log.message('r1', 'm1', 'user', 'Hi'));
    expect(state.messages).toEqual([
      {
        id: 'm1',
        role: 'user',
        parts: [{ type: 'text', text: 'Hi' }],
        metadata: { runId: 'r1', source: 'message', position: 2 },
      },
    ]);
  });

  it('given a message, when the same messageId is added again, then it is replaced in place, not duplicated', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'm1', 'user', 'first'),
      log.message('r1', 'm2', 'assistant', 'reply'),
    ).when(log.message('r1', 'm1', 'user', 'edited'));
    expect(state.messages.map((m) => [m.id, m.parts])).toEqual([
      ['m1', [{ type: 'text', text: 'edited' }]],
      ['m2', [{ type: 'text', text: 'reply' }]],
    ]);
  });

  it('given a run, when a transcript is added, then it is a message keyed by its utteranceId', () => {
    const state = given(log.runStarted('r1')).when(
      log.transcript('r1', 'u1', 'assistant', 'Let me check.'),
    );
    expect(state.messages).toEqual([
      {
        id: 'u1',
        role: 'assistant',
        parts: [{ type: 'text', text: 'Let me check.' }],
        metadata: { runId: 'r1', source: 'transcript', position: 2 },
      },
    ]);
  });

  it('given a typed message, when an utterance has the same id, then each is a message of its own and keeps its speaker', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'x1', 'user', 'Refund order 42.'),
      log.transcript('r1', 'x1', 'assistant', 'Looking it up.'),
    ).when(log.transcript('r1', 'x1', 'assistant', 'Looking it up now.'));
    expect(state.messages.map((m) => [m.id, m.role, m.parts, m.metadata?.source])).toEqual([
      ['x1', 'user', [{ type: 'text', text: 'Refund order 42.' }], 'message'],
      ['transcript:x1', 'assistant', [{ type: 'text', text: 'Looking it up now.' }], 'transcript'],
    ]);
  });

  it('given a tool message, when a typed message takes its id, then the tool message keeps its parts and the text is a message of its own', () => {
    const state = given(log.runStarted('r1'), log.toolStarted('r1', 'c1')).when(
      log.message('r1', 'tool-msg-c1', 'user', 'What did it find?'),
      log.message('r1', 'tool-msg-c1', 'user', 'What did it find, then?'),
    );
    expect(state.messages.map((m) => [m.id, m.role, m.parts.map((p) => p.type)])).toEqual([
      ['tool-msg-c1', 'assistant', ['tool-lookup']],
      ['message:tool-msg-c1', 'user', ['text']],
    ]);
    expect(state.messages[1].parts).toEqual([{ type: 'text', text: 'What did it find, then?' }]);
  });

  it('given a qualified id is itself taken by the other source, then the id is qualified again', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'x1', 'user', 'typed'),
      log.message('r1', 'transcript:x1', 'user', 'typed, named like an utterance'),
    ).when(log.transcript('r1', 'x1', 'user', 'spoken'));
    expect(state.messages.map((m) => [m.id, m.metadata?.source])).toEqual([
      ['x1', 'message'],
      ['transcript:x1', 'message'],
      ['transcript:transcript:x1', 'transcript'],
    ]);
  });

  it("given a typed message was given a prefixed id, when another's client id is that prefixed id, then both keep their words", () => {
    const state = given(
      log.runStarted('r1'),
      log.transcript('r1', 'y', 'user', 'spoken'),
      log.message('r1', 'y', 'user', 'typed first'),
    ).when(log.message('r1', 'message:y', 'user', 'typed second'));
    expect(state.messages.map((m) => [m.id, m.parts, m.metadata?.clientId])).toEqual([
      ['y', [{ type: 'text', text: 'spoken' }], undefined],
      ['message:y', [{ type: 'text', text: 'typed first' }], 'y'],
      ['message:message:y', [{ type: 'text', text: 'typed second' }], 'message:y'],
    ]);
    // Each client id again is its own message again.
    const again = given(
      log.runStarted('r1'),
      log.transcript('r1', 'y', 'user', 'spoken'),
      log.message('r1', 'y', 'user', 'typed first'),
      log.message('r1', 'message:y', 'user', 'typed second'),
    ).when(log.message('r1', 'y', 'user', 'typed first, edited'));
    expect(again.messages.map((m) => m.parts)).toEqual([
      [{ type: 'text', text: 'spoken' }],
      [{ type: 'text', text: 'typed first, edited' }],
      [{ type: 'text', text: 'typed second' }],
    ]);
  });

  it('given a typed message holds the id a prefix would give, when that prefix is needed, then neither replaces the other', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'message:y', 'user', 'typed A'),
      log.transcript('r1', 'y', 'user', 'spoken'),
    ).when(log.message('r1', 'y', 'user', 'typed B'));
    expect(state.messages.map((m) => [m.id, m.parts[0]])).toEqual([
      ['message:y', { type: 'text', text: 'typed A' }],
      ['y', { type: 'text', text: 'spoken' }],
      ['message:message:y', { type: 'text', text: 'typed B' }],
    ]);
  });

  it('keeps system messages, with their role', () => {
    const state = given(log.runStarted('r1')).when(log.message('r1', 's1', 'system', 'Be brief.'));
    expect(state.messages[0].role).toBe('system');
  });

  it('keeps text that looks like JSON or an envelope exactly as it is', () => {
    const text = '{"type":"tool-result","output":{"ok":true}}';
    const state = given(log.runStarted('r1')).when(log.message('r1', 'm1', 'assistant', text));
    expect(state.messages[0].parts).toEqual([{ type: 'text', text }]);
  });

  it('folds an event stamped as truncated as recorded', () => {
    const started = log.runStarted('r1');
    const reduced = log.event('r1', 'message.added', {
      messageId: 'm1',
      role: 'user',
      text: 'the reduced text',
      truncation: {
        originalByteLength: 2_000_000,
        limitBytes: 1_048_576,
        omittedMessageCount: 0,
        clampedParts: 1,
      },
    });
    const state = given(started).when(reduced);
    expect(state.messages[0].parts).toEqual([{ type: 'text', text: 'the reduced text' }]);
  });

  it('given a run, when model calls and rejected appends are recorded, then they show no message but move position and activity', () => {
    const started = log.runStarted('r1');
    const call = log.event('r1', 'model.call', structuredClone(EVENT_DATA_EXAMPLES['model.call']));
    const rejected = log.event('r1', 'append.rejected', {
      reason: 'body_too_large',
      declaredBytes: 9,
    });
    const state = given(started).when(call, rejected);
    expect(state.messages).toEqual([]);
    expect(state.position).toBe(rejected.position);
    expect(state.lastActivityAt).toBe(rejected.recordedAt);
  });
});

describe('tool parts', () => {
  it('given a run, when a tool starts, then a running part appears in a new assistant message named after the call', () => {
    const state = given(log.runStarted('r1')).when(
      log.toolStarted('r1', 'tc1', 'lookup', { q: 1 }),
    );
    expect(state.messages).toEqual([
      {
        id: 'tool-msg-tc1',
        role: 'assistant',
        parts: [
          { type: 'tool-lookup', toolCallId: 'tc1', state: 'input-available', input: { q: 1 } },
        ],
        metadata: { runId: 'r1', source: 'tool', position: 2 },
      },
    ]);
  });

  it('given an assistant message of the same run last, when a tool starts, then its part joins that message', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'a1', 'assistant', 'Let me look.'),
    ).when(log.toolStarted('r1', 'tc1'), log.toolStarted('r1', 'tc2'));
    expect(state.messages).toHaveLength(1);
    expect(state.messages[0].parts.map((p) => p.type)).toEqual([
      'text',
      'tool-lookup',
      'tool-lookup',
    ]);
  });

  it("given a user message or another run's assistant message last, when a tool starts, then it gets a message of its own", () => {
    const afterUser = given(log.runStarted('r1'), log.message('r1', 'u1', 'user', 'Go')).when(
      log.toolStarted('r1', 'tc1'),
    );
    expect(afterUser.messages.map((m) => m.id)).toEqual(['u1', 'tool-msg-tc1']);

    const other = new ThreadLog();
    const afterOtherRun = given(
      other.runStarted('r1'),
      other.runStarted('r2'),
      other.message('r1', 'a1', 'assistant', 'Run one speaking'),
    ).when(other.toolStarted('r2', 'tc9'));
    expect(afterOtherRun.messages.map((m) => m.id)).toEqual(['a1', 'tool-msg-tc9']);
  });

  it('given a running tool, when it finishes, then the same part holds the output', () => {
    const state = given(log.runStarted('r1'), log.toolStarted('r1', 'tc1')).when(
      log.toolFinished('r1', 'tc1', { output: { status: 'shipped' } }),
    );
    expect(toolParts(state)).toEqual([
      {
        type: 'tool-lookup',
        toolCallId: 'tc1',
        state: 'output-available',
        input: { orderId: 1042 },
        output: { status: 'shipped' },
      },
    ]);
  });

  it('given a running tool, when it finishes failed, then it is output-error with its errorText, never green', () => {
    const state = given(log.runStarted('r1'), log.toolStarted('r1', 'tc1')).when(
      log.toolFinished('r1', 'tc1', {
        failed: true,
        errorText: 'unknown tool',
        output: 'dispatcher said ok',
      }),
    );
    expect(toolPart(state, 'tc1')).toEqual({
      type: 'tool-lookup',
      toolCallId: 'tc1',
      state: 'output-error',
      input: { orderId: 1042 },
      errorText: 'unknown tool',
    });
  });

  it('given a finish that landed first, when the start arrives, then it fills in the input and the part stays finished', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolFinished('r1', 'tc1', { toolName: 'lookup', output: 'done' }),
    ).when(log.toolStarted('r1', 'tc1', 'lookup', { orderId: 7 }));
    expect(toolPart(state, 'tc1')).toEqual({
      type: 'tool-lookup',
      toolCallId: 'tc1',
      state: 'output-available',
      input: { orderId: 7 },
      output: 'done',
    });
    expect(state.activeTools).toEqual([]);
    expect(state.status).toBe('idle');
  });

  it('given a finished tool, when its start is delivered again, then it is not running again', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1'),
      log.toolFinished('r1', 'tc1'),
    ).when(log.toolStarted('r1', 'tc1'));
    expect(toolPart(state, 'tc1').state).toBe('output-available');
    expect(state.activeTools).toEqual([]);
  });

  it('given a tool, when its start and finish are each delivered twice, then there is one part', () => {
    const state = given(log.runStarted('r1')).when(
      log.toolStarted('r1', 'tc1'),
      log.toolStarted('r1', 'tc1'),
      log.toolFinished('r1', 'tc1'),
      log.toolFinished('r1', 'tc1', { failed: true, errorText: 'late duplicate' }),
    );
    expect(toolParts(state)).toHaveLength(1);
    expect(toolPart(state, 'tc1').state).toBe('output-available');
  });

  it('given no start, when a finish arrives, then the part is created with its call and output', () => {
    const state = given(log.runStarted('r1')).when(
      log.toolFinished('r1', 'tc1', { toolName: 'search', output: [1, 2] }),
    );
    expect(toolPart(state, 'tc1')).toEqual({
      type: 'tool-search',
      toolCallId: 'tc1',
      state: 'output-available',
      input: {},
      output: [1, 2],
    });
  });

  it('given no start, when a finish without a name arrives, then the part is tool-unknown until a start names it', () => {
    const started = log.runStarted('r1');
    const finish = log.toolFinished('r1', 'tc1', { toolName: undefined, output: 'x' });
    delete (finish.data as { toolName?: string }).toolName;
    const unnamed = given(started).when(finish);
    expect(toolPart(unnamed, 'tc1').type).toBe('tool-unknown');

    const named = given(started, finish).when(log.toolStarted('r1', 'tc1', 'search'));
    expect(toolPart(named, 'tc1').type).toBe('tool-search');
  });

  it('given a finished call, when it is started again, then the part keeps the input its output came from', () => {
    const history = [
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1', 'search', { q: 'first' }),
      log.toolFinished('r1', 'tc1', { output: 'found' }),
    ];
    const state = given(...history).when(log.toolStarted('r1', 'tc1', 'search', { q: 'again' }));
    expect(toolPart(state, 'tc1')).toMatchObject({
      state: 'output-available',
      input: { q: 'first' },
      output: 'found',
    });
  });

  it('given a finished call, when a start names another tool, then the part keeps the name and input its output came from', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1', 'read_file', { path: 'a' }),
      log.toolFinished('r1', 'tc1', { output: 'x' }),
    ).when(log.toolStarted('r1', 'tc1', 'rm_rf', { path: '/' }));
    expect(toolPart(state, 'tc1')).toMatchObject({
      type: 'tool-read_file',
      state: 'output-available',
      input: { path: 'a' },
    });
  });

  it('given an approval asked for, when a start names another tool, then the part and its active tool keep the name asked about', () => {
    const state = given(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'deploy', { env: 'staging' }),
    ).when(log.toolStarted('r1', 'tc1', 'drop_database', { env: 'prod' }));
    expect(toolPart(state, 'tc1')).toMatchObject({
      type: 'tool-deploy',
      state: 'approval-requested',
      input: { env: 'staging' },
    });
    expect(state.activeTools.map((tool) => tool.toolName)).toEqual(['deploy']);
  });

  it('given an approval granted, when the start names another tool and input, then the part shows the tool and input that were approved', () => {
    const state = given(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'deploy', { env: 'staging' }),
      log.approvalResolved('r1', 'ap1', 'allow'),
    ).when(
      log.toolStarted('r1', 'tc1', 'drop_database', { env: 'prod' }),
      log.toolFinished('r1', 'tc1', { toolName: 'drop_database', output: 'done' }),
    );
    expect(toolPart(state, 'tc1')).toEqual({
      type: 'tool-deploy',
      toolCallId: 'tc1',
      state: 'output-available',
      input: { env: 'staging' },
      output: 'done',
      approval: { id: 'ap1', approved: true },
    });
  });

  it('given a finish that came alone, when its start arrives late, then the start fills in the input', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolFinished('r1', 'tc1', { toolName: 'search', output: 'found' }),
    ).when(log.toolStarted('r1', 'tc1', 'search', { q: 'late' }));
    expect(toolPart(state, 'tc1')).toMatchObject({
      state: 'output-available',
      input: { q: 'late' },
      output: 'found',
    });
  });

  it('given a finish with no output, then the output is null (the AI SDK requires one)', () => {
    const history = [log.runStarted('r1'), log.toolStarted('r1', 'tc1')];
    const finish = log.toolFinished('r1', 'tc1');
    delete (finish.data as { output?: unknown }).output;
    const state = given(...history).when(finish);
    expect(toolPart(state, 'tc1')).toMatchObject({ state: 'output-available', output: null });
  });

  it('keeps a start whose input is not an object under { raw }', () => {
    const started = log.runStarted('r1');
    const start = log.event('r1', 'tool.started', {
      toolCallId: 'tc1',
      toolName: 'lookup',
      input: [1, 2] as unknown as Record<string, unknown>,
    });
    const state = given(started).when(start);
    expect(toolPart(state, 'tc1').input).toEqual({ raw: [1, 2] });
  });

  it('given an approval waits, when its tool finishes anyway, then it is no longer pending and the thread is not blocked', () => {
    const history = [
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.approvalRequested('r1', 'ap2', 'tc2'),
    ];
    const timedOut = log.toolFinished('r1', 'tc1', {
      failed: true,
      errorText: 'approval timed out',
    });
    const state = given(...history).when(timedOut);
    expect([state.status, state.pendingApprovals.map((p) => p.approvalId)]).toEqual([
      'blocked',
      ['ap2'],
    ]);
    expect(toolPart(state, 'tc1')).toMatchObject({ state: 'output-error' });
    const after = given(...history, timedOut).when(log.toolFinished('r1', 'tc2'));
    expect(after.pendingApprovals).toEqual([]);
    expect(after.status).not.toBe('blocked');
  });

  it('given the same toolCallId in two runs, then each run has its own part', () => {
    const state = given(log.runStarted('r1'), log.runStarted('r2')).when(
      log.toolStarted('r1', 'call_0'),
      log.toolStarted('r2', 'call_0'),
      log.toolFinished('r2', 'call_0', { output: 'second' }),
    );
    const parts = toolParts(state);
    expect(parts.map((p) => p.state)).toEqual(['input-available', 'output-available']);
    expect(new Set(state.messages.map((m) => m.id)).size).toBe(state.messages.length);
  });

  it('given a message already using the derived id, when a tool needs a message, then a distinct id is derived', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'tool-msg-tc1', 'user', 'I chose this id'),
    ).when(log.toolStarted('r1', 'tc1'));
    expect(state.messages.map((m) => m.id)).toEqual(['tool-msg-tc1', 'tool-msg-r1-tc1']);
  });
});

describe('approvals', () => {
  it('given a running tool, when approval is requested, then the part waits for it, showing what is to be approved, and the thread is blocked', () => {
    const history = [log.runStarted('r1'), log.toolStarted('r1', 'tc1', 'refund', { amount: 5 })];
    const request = log.approvalRequested('r1', 'ap1', 'tc1', 'refund');
    const state = given(...history).when(request);
    // The receipt of this approval is bound to the request's input: the part shows that one.
    expect(toolPart(state, 'tc1')).toEqual({
      type: 'tool-refund',
      toolCallId: 'tc1',
      state: 'approval-requested',
      input: { orderId: 1042, amount: 19.99 },
      approval: { id: 'ap1' },
    });
    expect(state.pendingApprovals).toEqual([
      {
        approvalId: 'ap1',
        runId: 'r1',
        toolCallId: 'tc1',
        toolName: 'refund',
        input: { orderId: 1042, amount: 19.99 },
        question: 'Refund 19.99 EUR?',
        requestedAt: request.recordedAt,
      },
    ]);
    expect(state.status).toBe('blocked');
  });

  it('given a pending approval, when another is requested for the same call, then the part shows the newer one and its input', () => {
    const state = given(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'transfer', { amount: 10 }),
    ).when(log.approvalRequested('r1', 'ap2', 'tc1', 'transfer', { amount: 10000 }));
    expect(toolPart(state, 'tc1')).toMatchObject({
      state: 'approval-requested',
      input: { amount: 10000 },
      approval: { id: 'ap2' },
    });
    // The first is no longer asked: one call waits, on one approval.
    expect(state.pendingApprovals.map((p) => [p.approvalId, p.input])).toEqual([
      ['ap2', { amount: 10000 }],
    ]);
  });

  it('given two runs asking about calls of one id, then both wait: call ids are unique within a run only', () => {
    const state = given(
      log.runStarted('r1'),
      log.runStarted('r2'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'transfer', { amount: 1 }),
    ).when(log.approvalRequested('r2', 'ap2', 'tc1', 'transfer', { amount: 2 }));
    expect(state.pendingApprovals.map((p) => [p.runId, p.approvalId])).toEqual([
      ['r1', 'ap1'],
      ['r2', 'ap2'],
    ]);
  });

  it('given two runs asking with one approval id, then both wait, and resolving one leaves the other', () => {
    const asked = given(
      log.runStarted('r1'),
      log.runStarted('r2'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'search', { q: 1 }),
    ).when(log.approvalRequested('r2', 'ap1', 'tc2', 'deploy', { env: 'prod' }));
    expect(asked.pendingApprovals.map((p) => [p.runId, p.approvalId, p.toolName])).toEqual([
      ['r1', 'ap1', 'search'],
      ['r2', 'ap1', 'deploy'],
    ]);
    const state = given(
      log.runStarted('r1'),
      log.runStarted('r2'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'search', { q: 1 }),
      log.approvalRequested('r2', 'ap1', 'tc2', 'deploy', { env: 'prod' }),
    ).when(log.approvalResolved('r2', 'ap1', 'allow'));
    expect(state.status).toBe('blocked');
    expect(state.pendingApprovals.map((p) => [p.runId, p.toolName])).toEqual([['r1', 'search']]);
    expect(toolPart(state, 'tc1')).toMatchObject({ state: 'approval-requested' });
    expect(toolPart(state, 'tc2')).toMatchObject({ state: 'approval-responded' });
  });

  it('given an approval id asked again for another call, then it is pending once, for that call', () => {
    const state = given(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'transfer', { amount: 1 }),
    ).when(log.approvalRequested('r1', 'ap1', 'tc2', 'transfer', { amount: 2 }));
    expect(state.pendingApprovals.map((p) => [p.approvalId, p.toolCallId])).toEqual([
      ['ap1', 'tc2'],
    ]);
  });

  it('given a pending approval, when the tool is started again, then the part still shows what is to be approved', () => {
    const state = given(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'transfer', { amount: 10000 }),
    ).when(log.toolStarted('r1', 'tc1', 'transfer', { amount: 10 }));
    expect(toolPart(state, 'tc1')).toMatchObject({
      state: 'approval-requested',
      input: { amount: 10000 },
      approval: { id: 'ap1' },
    });
  });

  it('given no part for the call, when approval is requested, then the part is created from the request', () => {
    const state = given(log.runStarted('r1')).when(
      log.approvalRequested('r1', 'ap1', 'tc1', 'refund', { amount: 3 }),
    );
    expect(toolPart(state, 'tc1')).toEqual({
      type: 'tool-refund',
      toolCallId: 'tc1',
      state: 'approval-requested',
      input: { amount: 3 },
      approval: { id: 'ap1' },
    });
  });

  it('given a pending approval, when it is allowed and the tool finishes, then the part is answered, then completed with the approval kept', () => {
    const history = [log.runStarted('r1'), log.approvalRequested('r1', 'ap1', 'tc1')];
    const allowed = given(...history).when(log.approvalResolved('r1', 'ap1', 'allow'));
    expect(toolPart(allowed, 'tc1')).toMatchObject({
      state: 'approval-responded',
      approval: { id: 'ap1', approved: true },
    });
    expect(allowed.pendingApprovals).toEqual([]);
    expect(allowed.status).toBe('idle');

    const done = given(...history, log.approvalResolved('r1', 'ap1', 'allow')).when(
      log.toolStarted('r1', 'tc1', 'refund', { orderId: 1042, amount: 19.99 }),
      log.toolFinished('r1', 'tc1', { toolName: 'refund', output: { refunded: true } }),
    );
    expect(toolPart(done, 'tc1')).toEqual({
      type: 'tool-refund',
      toolCallId: 'tc1',
      state: 'output-available',
      input: { orderId: 1042, amount: 19.99 },
      output: { refunded: true },
      approval: { id: 'ap1', approved: true },
    });
  });

  it('given an allowed call, when it fails, then it is output-error and keeps the granted approval', () => {
    const state = given(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.approvalResolved('r1', 'ap1', 'allow'),
    ).when(log.toolFinished('r1', 'tc1', { failed: true, errorText: 'payments API answered 503' }));
    expect(toolPart(state, 'tc1')).toMatchObject({
      state: 'output-error',
      errorText: 'payments API answered 503',
      approval: { id: 'ap1', approved: true },
    });
  });

  it('given a pending approval, when it is denied, then the part is output-denied and a later finish does not change it', () => {
    const denied = given(log.runStarted('r1'), log.approvalRequested('r1', 'ap1', 'tc1')).when(
      log.approvalResolved('r1', 'ap1', 'deny'),
      log.toolFinished('r1', 'tc1', { failed: true, errorText: 'denied' }),
    );
    expect(toolPart(denied, 'tc1')).toEqual({
      type: 'tool-refund',
      toolCallId: 'tc1',
      state: 'output-denied',
      input: { orderId: 1042, amount: 19.99 },
      approval: { id: 'ap1', approved: false },
    });
    expect(denied.pendingApprovals).toEqual([]);
    expect(denied.status).toBe('idle');
  });

  it('given a pending approval, when the policy downgrades an allow to a deny, then the denial says why', () => {
    const state = given(log.runStarted('r1'), log.approvalRequested('r1', 'ap1', 'tc1')).when(
      log.approvalResolved('r1', 'ap1', 'deny', { downgraded: true }),
    );
    expect(toolPart(state, 'tc1').approval).toEqual({
      id: 'ap1',
      approved: false,
      reason: DOWNGRADED_REASON,
    });
  });

  it('given a running tool waiting for approval, when it is denied, then it no longer runs', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1', 'refund'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
    ).when(log.approvalResolved('r1', 'ap1', 'deny'));
    expect(state.activeTools).toEqual([]);
  });

  it('given a pending approval, when the tool finishes anyway, then the part completes without it and a late answer changes nothing', () => {
    const history = [
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.toolFinished('r1', 'tc1', { output: 'ran' }),
    ];
    const finished = {
      type: 'tool-refund',
      toolCallId: 'tc1',
      state: 'output-available',
      input: { orderId: 1042, amount: 19.99 },
      output: 'ran',
    };
    const state = given(...history.slice(0, 2)).when(history[2]);
    expect(toolPart(state, 'tc1')).toEqual(finished);
    expect([state.status, state.pendingApprovals]).toEqual(['idle', []]);
    const late = given(...history).when(log.approvalResolved('r1', 'ap1', 'deny'));
    expect(toolPart(late, 'tc1')).toEqual(finished);
    expect(late.status).toBe('idle');
  });

  it('given a call asked about after it finished, when the approval is resolved, then the part stays as the call ended', () => {
    const history = [
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1', 'refund'),
      log.toolFinished('r1', 'tc1', { output: 'ran' }),
      log.approvalRequested('r1', 'ap1', 'tc1'),
    ];
    const before = toolPart(given(...history.slice(0, 3)).when(history[3]), 'tc1');
    expect(before).toMatchObject({ state: 'output-available', output: 'ran' });
    for (const decision of ['allow', 'deny'] as const) {
      const state = given(...history).when(log.approvalResolved('r1', 'ap1', decision));
      expect(toolPart(state, 'tc1')).toEqual(before);
      expect([state.status, state.pendingApprovals]).toEqual(['idle', []]);
    }
  });

  it('given two pending approvals, when one is resolved, then the thread stays blocked until the other is', () => {
    const history = [
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.approvalRequested('r1', 'ap2', 'tc2'),
    ];
    const one = given(...history).when(log.approvalResolved('r1', 'ap1', 'allow'));
    expect(one.status).toBe('blocked');
    const both = given(...history, log.approvalResolved('r1', 'ap1', 'allow')).when(
      log.approvalResolved('r1', 'ap2', 'deny'),
    );
    expect(both.status).toBe('idle');
    expect(both.pendingApprovals).toEqual([]);
  });
});

describe('run end', () => {
  it('given tools still running, when the run ends, then each is output-error saying the run ended first, and nothing runs', () => {
    const state = given(
      log.runStarted('r1'),
      log.turnStarted('r1', 't1'),
      log.toolStarted('r1', 'tc1'),
      log.toolStarted('r1', 'tc2'),
      log.toolFinished('r1', 'tc2'),
    ).when(log.runFinished('r1', 'cancelled'));
    expect(toolPart(state, 'tc1')).toEqual({
      type: 'tool-lookup',
      toolCallId: 'tc1',
      state: 'output-error',
      input: { orderId: 1042 },
      errorText: 'the run ended first (cancelled): this tool never finished.',
    });
    expect(toolPart(state, 'tc2').state).toBe('output-available');
    expect(state.activeTools).toEqual([]);
    expect(state.runs[0]).toMatchObject({ status: 'cancelled', activeTurnId: null });
    expect(state.status).toBe('finished');
  });

  it('given a pending approval, when the run ends, then the approval is removed and its part ends unanswered', () => {
    const history = [log.runStarted('r1'), log.approvalRequested('r1', 'ap1', 'tc1')];
    const end = log.runFinished('r1', 'failed');
    const state = given(...history).when(end);
    expect(state.pendingApprovals).toEqual([]);
    expect(toolPart(state, 'tc1')).toEqual({
      type: 'tool-refund',
      toolCallId: 'tc1',
      state: 'output-error',
      input: { orderId: 1042, amount: 19.99 },
      errorText: "the run ended first (failed): this tool's approval was never answered.",
    });
    expect(state.runs[0]).toMatchObject({ status: 'failed', finishedAt: end.recordedAt });
  });

  it('given an allowed call not yet finished, when the run ends, then it is output-error keeping the granted approval', () => {
    const state = given(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.approvalResolved('r1', 'ap1', 'allow'),
    ).when(log.runFinished('r1', 'completed'));
    expect(toolPart(state, 'tc1')).toMatchObject({
      state: 'output-error',
      errorText: 'the run ended first (completed): this tool never finished.',
      approval: { id: 'ap1', approved: true },
    });
  });

  it('given two runs, when one ends, then only its tools and approvals are closed', () => {
    const state = given(
      log.runStarted('r1'),
      log.runStarted('r2'),
      log.toolStarted('r1', 'tc1'),
      log.toolStarted('r2', 'tc2'),
      log.approvalRequested('r2', 'ap2', 'tc3'),
    ).when(log.runFinished('r1', 'completed'));
    expect(toolPart(state, 'tc1').state).toBe('output-error');
    expect(toolPart(state, 'tc2').state).toBe('input-available');
    expect(state.activeTools.map((t) => t.toolCallId)).toEqual(['tc2']);
    expect(state.pendingApprovals.map((p) => p.approvalId)).toEqual(['ap2']);
    expect(state.status).toBe('blocked');
  });
});

describe('active tools', () => {
  it('given a run, when a tool starts, then it is listed as running; when it finishes, it is not', () => {
    const started = log.runStarted('r1');
    const start = log.toolStarted('r1', 'tc1');
    const running = given(started).when(start);
    expect(running.activeTools).toEqual([
      {
        toolCallId: 'tc1',
        toolName: 'lookup',
        label: 'Looking up',
        runId: 'r1',
        startedAt: start.recordedAt,
      },
    ]);
    expect(running.status).toBe('running');
    const done = given(started, start).when(log.toolFinished('r1', 'tc1'));
    expect(done.activeTools).toEqual([]);
  });

  it('given a running tool, when its start is delivered again, then it is listed once', () => {
    const state = given(log.runStarted('r1'), log.toolStarted('r1', 'tc1')).when(
      log.toolStarted('r1', 'tc1'),
    );
    expect(state.activeTools).toHaveLength(1);
  });

  it.each([
    ['an assistant message', (l: ThreadLog) => l.message('r1', 'a1', 'assistant', 'Here it is')],
    [
      'an assistant transcript',
      (l: ThreadLog) => l.transcript('r1', 'u9', 'assistant', 'Found it'),
    ],
    ['a turn end', (l: ThreadLog) => l.turnFinished('r1', 't1')],
    ['a turn end naming another turn', (l: ThreadLog) => l.turnFinished('r1', 't-other')],
    ['the run end', (l: ThreadLog) => l.runFinished('r1', 'completed')],
  ])('given running tools, when %s arrives, then they are cleared', (_what, next) => {
    const state = given(
      log.runStarted('r1'),
      log.turnStarted('r1', 't1'),
      log.toolStarted('r1', 'tc1'),
    ).when(next(log));
    expect(state.activeTools).toEqual([]);
  });

  it.each([
    [
      'a user transcript (a caller talking over a slow tool)',
      (l: ThreadLog) => l.transcript('r1', 'u1', 'user', 'Hello?'),
    ],
    ['a user message', (l: ThreadLog) => l.message('r1', 'm1', 'user', 'Still there?')],
    [
      'a steer',
      (l: ThreadLog) => l.event('r1', 'turn.steered', { turnId: 't1', instruction: 'hurry' }),
    ],
  ])('given a running tool, when %s arrives, then it is still listed', (_what, next) => {
    const state = given(log.runStarted('r1'), log.toolStarted('r1', 'tc1')).when(next(log));
    expect(state.activeTools.map((t) => t.toolCallId)).toEqual(['tc1']);
  });

  it("given tools running in two runs, when the assistant of one speaks, then only that run's are cleared", () => {
    const state = given(
      log.runStarted('r1'),
      log.runStarted('r2'),
      log.toolStarted('r1', 'tc1'),
      log.toolStarted('r2', 'tc2'),
    ).when(log.transcript('r1', 'u1', 'assistant', 'Done'));
    expect(state.activeTools.map((t) => t.toolCallId)).toEqual(['tc2']);
  });

  it('given a cleared tool, when it finishes later, then the part completes as usual', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1'),
      log.message('r1', 'a1', 'assistant', 'Meanwhile…'),
    ).when(log.toolFinished('r1', 'tc1'));
    expect(toolPart(state, 'tc1').state).toBe('output-available');
    expect(state.activeTools).toEqual([]);
  });
});

describe('status, title and runs', () => {
  it(`given more than ${FINISHED_RUNS_KEPT} finished runs, then the header keeps the newest ${FINISHED_RUNS_KEPT} and every run still going`, () => {
    const history = [log.runStarted('open')];
    for (let i = 0; i < FINISHED_RUNS_KEPT + 3; i += 1) {
      history.push(log.runStarted(`r${i}`), log.runFinished(`r${i}`));
    }
    const state = given(...history).when(log.turnStarted('open', 't1'));
    expect(state.runs.map((run) => run.runId)).toEqual([
      'open',
      ...Array.from({ length: FINISHED_RUNS_KEPT }, (_, i) => `r${i + 3}`),
    ]);
    expect(state.status).toBe('running');
  });

  it(`given ${FINISHED_RUNS_KEPT} finished runs, when a run started before them finishes, then the header keeps it and lets go of the one that finished first`, () => {
    const history = [log.runStarted('long')];
    for (let i = 0; i < FINISHED_RUNS_KEPT; i += 1) {
      history.push(log.runStarted(`r${i}`), log.runFinished(`r${i}`));
    }
    const state = given(...history).when(log.runFinished('long'));
    expect(state.runs.map((run) => run.runId)).toEqual([
      'long',
      ...Array.from({ length: FINISHED_RUNS_KEPT - 1 }, (_, i) => `r${i + 1}`),
    ]);
    expect(state.status).toBe('finished');
  });

  it(`given ${FINISHED_RUNS_KEPT} finished runs, when a run finishes in the same millisecond as the first of them, then the header keeps the run finishing`, () => {
    const history = [log.runStarted('long')];
    for (let i = 0; i < FINISHED_RUNS_KEPT; i += 1) {
      history.push(log.runStarted(`r${i}`), log.runFinished(`r${i}`));
    }
    // Two replicas' clocks, or one batch: finish times alone do not order these two.
    const finishing = { ...log.runFinished('long'), recordedAt: history[2].recordedAt };
    const state = given(...history).when(finishing);
    expect(state.runs.map((run) => run.runId)).toEqual([
      'long',
      ...Array.from({ length: FINISHED_RUNS_KEPT - 1 }, (_, i) => `r${i + 1}`),
    ]);
  });

  it('given a started run with nothing in progress, then the thread is idle', () => {
    expect(given().when(log.runStarted('r1')).status).toBe('idle');
  });

  it('given a run, when a turn starts, then the thread runs; when the turn finishes, it is idle', () => {
    const running = given(log.runStarted('r1')).when(log.turnStarted('r1', 't1'));
    expect(running.status).toBe('running');
    expect(running.runs[0].activeTurnId).toBe('t1');
    const idle = given(log.runStarted('r1'), log.turnStarted('r1', 't1')).when(
      log.turnFinished('r1', 't1'),
    );
    expect(idle.status).toBe('idle');
    expect(idle.runs[0].activeTurnId).toBeNull();
  });

  it('given an active turn, when another turn id finishes, then the active turn stays', () => {
    const state = given(log.runStarted('r1'), log.turnStarted('r1', 't2')).when(
      log.turnFinished('r1', 't1'),
    );
    expect(state.runs[0].activeTurnId).toBe('t2');
    expect(state.status).toBe('running');
  });

  it('given an active turn, when a pending approval arrives, then blocked wins over running', () => {
    const state = given(log.runStarted('r1'), log.turnStarted('r1', 't1')).when(
      log.approvalRequested('r1', 'ap1', 'tc1'),
    );
    expect(state.status).toBe('blocked');
  });

  it('given two runs, when one ends, then the thread is not finished; when both end, it is', () => {
    const history = [log.runStarted('r1'), log.runStarted('r2'), log.runFinished('r1')];
    expect(given(...history).when().status).toBe('idle');
    expect(given(...history).when(log.runFinished('r2', 'failed')).status).toBe('finished');
  });

  it('takes the title from the first run.started with a title', () => {
    const state = given(
      log.runStarted('r0'),
      log.runStarted('r1', { title: '   ' }),
      log.runStarted('r2', { title: 'Refund for order 1042' }),
    ).when(log.runStarted('r3', { title: 'Something later' }));
    expect(state.title).toBe('Refund for order 1042');
  });

  it('summarises each run', () => {
    const start = log.runStarted('r1', { agent: 'voice-bot', source: 'voice' });
    const end = log.runFinished('r1', 'completed');
    const state = given(start).when(end);
    expect(state.runs).toEqual([
      {
        runId: 'r1',
        status: 'completed',
        agent: 'voice-bot',
        source: 'voice',
        startedAt: start.recordedAt,
        activeTurnId: null,
        finishedAt: end.recordedAt,
      },
    ]);
  });

  it('given an active turn, when it is steered, then only the activity and position move', () => {
    const history = [log.runStarted('r1'), log.turnStarted('r1', 't1')];
    const before = given(...history).when();
    const steer = log.event('r1', 'turn.steered', {
      turnId: 't1',
      instruction: 'Ask for the order number',
    });
    const after = given(...history).when(steer);
    expect(after).toEqual({
      ...before,
      position: steer.position,
      lastActivityAt: steer.recordedAt,
    });
  });

  it('takes position and lastActivityAt from the last event', () => {
    const started = log.runStarted('r1');
    const last = log.message('r1', 'm1', 'user', 'hi');
    const state = given(started).when(last);
    expect([state.position, state.lastActivityAt]).toEqual([
      last.position,
      recordedAt(last.position),
    ]);
  });
});

describe('the fold contract', () => {
  it('evolveThread leaves its input untouched and answers what applyToThread makes', () => {
    const history = [log.runStarted('r1'), log.toolStarted('r1', 'tc1')];
    const before = given(...history).when();
    const event = log.toolFinished('r1', 'tc1');
    const frozen = deepFreeze(structuredClone(before));
    const next = evolveThread(frozen, deepFreeze(structuredClone(event)));
    expect(frozen).toEqual(before);
    applyToThread(before, event);
    expect(next).toEqual(before);
  });

  it('leaves out an event of a type it does not know, position included', () => {
    const state = given(log.runStarted('r1')).when();
    const unknown: ProjectedEvent = {
      ...log.message('r1', 'm1', 'user', 'x'),
      type: 'something.new',
    };
    const after = evolveThread(state, unknown);
    expect(after).toEqual(state);
    const prototypeKey: ProjectedEvent = { ...unknown, type: 'constructor' };
    expect(evolveThread(state, prototypeKey)).toEqual(state);
  });

  it('skips an event below the position already folded (a redelivery)', () => {
    const old = log.message('r1', 'm1', 'user', 'old');
    const state = given(log.runStarted('r1'), log.message('r1', 'm2', 'user', 'new')).when();
    expect(evolveThread(state, old)).toEqual(state);
  });

  it('refuses, loudly, an event stamped for another thread or tenant', () => {
    const state = emptyThread(TENANT, THREAD);
    const foreign = new ThreadLog('tenant-2', THREAD).runStarted('r1');
    expect(() => applyToThread(state, foreign)).toThrow(/thread thread-1 of tenant tenant-2/);
    const otherThread = new ThreadLog(TENANT, 'thread-2').runStarted('r1');
    expect(() => applyToThread(state, otherThread)).toThrow(/not to thread thread-1/);
    expect(state).toEqual(emptyThread(TENANT, THREAD));
  });

  it('given a run of many tool calls, then their parts fill assistant messages of at most MAX_PARTS_PER_MESSAGE, each call once, in order', () => {
    const calls = 2 * MAX_PARTS_PER_MESSAGE + 3;
    const events = [log.runStarted('r1')];
    for (let c = 0; c < calls; c += 1) {
      events.push(log.toolStarted('r1', `tc${c}`), log.toolFinished('r1', `tc${c}`));
    }
    const state = given(...events).when();
    expect(state.messages.map((m) => m.parts.length)).toEqual([
      MAX_PARTS_PER_MESSAGE,
      MAX_PARTS_PER_MESSAGE,
      3,
    ]);
    expect(state.messages.every((m) => m.role === 'assistant')).toBe(true);
    expect(toolParts(state).map((p) => p.toolCallId)).toEqual(
      Array.from({ length: calls }, (_, c) => `tc${c}`),
    );
    expect(toolParts(state).every((p) => p.state === 'output-available')).toBe(true);
  });

  it('threadOf reads tenant and thread from the metadata, and answers null without them', () => {
    const event = log.runStarted('r1');
    expect(threadOf(event)).toEqual({ tenantId: TENANT, threadId: THREAD });
    expect(threadOf({ ...event, metadata: { tenantId: TENANT } })).toBeNull();
    expect(threadOf({ ...event, metadata: { threadId: THREAD, tenantId: 7 } })).toBeNull();
  });

  it('threadSummary and threadView show what the list and the view need', () => {
    const state = given(
      log.runStarted('r1', { title: 'Refund' }),
      log.approvalRequested('r1', 'ap1', 'tc1'),
    ).when();
    expect(threadSummary(state)).toEqual({
      threadId: THREAD,
      title: 'Refund',
      status: 'blocked',
      lastActivityAt: state.lastActivityAt,
      pendingApprovalCount: 1,
      position: state.position,
    });
    const page = { limit: 50, before: null, hasMore: false };
    const view = threadView(state, state.messages.length, page);
    expect(view.page).toBe(page);
    expect(view.messageCount).toBe(state.messages.length);
    expect(Object.keys(view).sort()).toEqual([
      'activeTools',
      'messageCount',
      'page',
      'pendingApprovals',
      'position',
      'runs',
      'status',
      'threadId',
      'title',
    ]);
  });

  it('given a state read back from JSON mid-stream, when folding goes on, then it ends where the live state ends', () => {
    const first = [
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1'),
      log.approvalRequested('r1', 'ap1', 'tc2'),
    ];
    const second = [
      log.toolFinished('r1', 'tc1'),
      log.approvalResolved('r1', 'ap1', 'allow'),
      log.message('r1', 'tool-msg-tc1', 'assistant', 'same id as the tool message'),
      log.runFinished('r1', 'cancelled'),
    ];
    const live = given(...first).when(...second);
    const stored = JSON.parse(JSON.stringify(given(...first).when())) as ThreadState;
    for (const event of second) applyToThread(stored, event);
    expect(JSON.stringify(stored)).toBe(JSON.stringify(live));
  });

  it('given a state whose arrays were replaced by its owner, then the fold rebuilds its lookups', () => {
    const state = given(log.runStarted('r1'), log.toolStarted('r1', 'tc1')).when();
    state.messages = structuredClone(state.messages);
    state.runs = structuredClone(state.runs);
    applyToThread(state, log.toolFinished('r1', 'tc1'));
    expect(toolParts(state)).toHaveLength(1);
    expect(toolPart(state, 'tc1').state).toBe('output-available');
  });
});

describe('drift: every catalogue type is handled or ignored on purpose', () => {
  it('the table names every EventType, and nothing else', () => {
    expect(Object.keys(THREAD_EVENT_HANDLING).sort()).toEqual([...EVENT_TYPES].sort());
    for (const type of EVENT_TYPES) {
      expect(['folded', 'ignored']).toContain(THREAD_EVENT_HANDLING[type]);
    }
    expect(EVENT_TYPES.filter((type) => THREAD_EVENT_HANDLING[type] === 'ignored').sort()).toEqual([
      'append.rejected',
      'model.call',
      'turn.steered',
    ]);
  });

  it.each(EVENT_TYPES.map((type) => [type]))(
    'folds the catalogue example of %s as its table entry says',
    (type) => {
      // A history in which each example has something to change: another active turn, the
      // tool the example approval names running, the example's approval pending on another.
      const history = [
        log.runStarted('r1'),
        log.turnStarted('r1', 'turn-0'),
        log.toolStarted('r1', 'tc-2'),
        log.approvalRequested('r1', 'appr-1', 'tc-3'),
      ];
      const before = given(...history).when();
      const event = log.event('r1', type, structuredClone(EVENT_DATA_EXAMPLES[type]) as never);
      const after = given(...history).when(event);
      expect(after.position).toBe(event.position);
      expect(after.lastActivityAt).toBe(event.recordedAt);
      const moved = { ...before, position: event.position, lastActivityAt: event.recordedAt };
      if (THREAD_EVENT_HANDLING[type] === 'ignored') expect(after).toEqual(moved);
      else expect(after).not.toEqual(moved);
    },
  );
});

/**
 * Sequences the write path never records (a second start or end of a run, a turn after the
 * run ended, a repeated request) and rare shapes of data: the fold still answers a view that
 * keeps its invariants, as a rebuild over any log must.
 */
describe('edges of the fold', () => {
  const event = (runId: string, type: string, data: Record<string, unknown>) =>
    log.event(runId, type as 'run.started', data as never);

  it('folds an event with no run stamped into the run with the empty id', () => {
    const unstamped = log.message('r1', 'm1', 'user', 'hi');
    delete unstamped.metadata.runId;
    const state = given().when(unstamped);
    expect(state.runs.map((r) => r.runId)).toEqual(['']);
    expect(state.messages[0].metadata?.runId).toBe('');
  });

  it('folds an event that names no tenant or thread into the thread it is given', () => {
    const bare = log.runStarted('r1');
    bare.metadata = { runId: 'r1' };
    expect(
      given()
        .when(bare)
        .runs.map((r) => r.runId),
    ).toEqual(['r1']);
  });

  it('threadOf answers null for an empty tenant or thread', () => {
    const stamped = log.runStarted('r1');
    expect(threadOf({ ...stamped, metadata: { tenantId: '', threadId: THREAD } })).toBeNull();
    expect(threadOf({ ...stamped, metadata: { tenantId: TENANT, threadId: '' } })).toBeNull();
  });

  it('is idle, not finished, when it has seen events but no run', () => {
    const state = given().when(event('r1', 'model.call', { modelId: 'm' }));
    expect(state).toMatchObject({ status: 'idle', runs: [] });
  });

  it('keeps the agent and source of the first run.started of a run', () => {
    const state = given(log.runStarted('r1')).when(
      log.runStarted('r1', { agent: 'other-bot', source: 'voice' }),
    );
    expect(state.runs[0]).toMatchObject({ agent: 'support-bot', source: 'typed' });
  });

  it('keeps the first end of a run, and a turn started after it does not run', () => {
    const started = log.runStarted('r1');
    const first = log.runFinished('r1', 'failed');
    const state = given(started, first).when(
      log.runFinished('r1', 'completed'),
      log.turnStarted('r1', 't1'),
    );
    expect(state.runs[0]).toMatchObject({
      status: 'failed',
      finishedAt: first.recordedAt,
      activeTurnId: null,
    });
    expect(state.status).toBe('finished');
  });

  it('counts one active turn when a turn starts over another, and is idle once it ends', () => {
    const state = given(log.runStarted('r1'), log.turnStarted('r1', 't1')).when(
      log.turnStarted('r1', 't2'),
      log.turnFinished('r1', 't2'),
    );
    expect(state).toMatchObject({ status: 'idle', runs: [{ activeTurnId: null }] });
  });

  it('derives a tool message id from the position when the plain and run-qualified ids are taken', () => {
    const history = [
      log.runStarted('r1'),
      log.message('r1', 'tool-msg-tc1', 'user', 'one'),
      log.message('r1', 'tool-msg-r1-tc1', 'user', 'two'),
    ];
    const start = log.toolStarted('r1', 'tc1');
    const state = given(...history).when(start);
    expect(state.messages.map((m) => m.id)).toEqual([
      'tool-msg-tc1',
      'tool-msg-r1-tc1',
      `tool-msg-r1-tc1-${start.position}`,
    ]);
  });

  it.each([
    ['null', null, { raw: null }],
    ['missing', undefined, { raw: null }],
    ['a string', 'orders since May', { raw: 'orders since May' }],
    ['an array', [1], { raw: [1] }],
  ])('keeps a start whose input is %s under { raw }', (_what, input, expected) => {
    const state = given(log.runStarted('r1')).when(
      event('r1', 'tool.started', { toolCallId: 'tc1', toolName: 'lookup', input }),
    );
    expect(toolPart(state, 'tc1').input).toEqual(expected);
  });

  it('says a failed tool failed when it gives no error text', () => {
    const state = given(log.runStarted('r1')).when(
      log.toolFinished('r1', 'tc1', { failed: true }),
      log.toolFinished('r1', 'tc2', { failed: true, errorText: '' }),
    );
    expect(toolParts(state).map((p) => p.errorText)).toEqual([
      'The tool failed.',
      'The tool failed.',
    ]);
  });

  it('names a call finished without a name, or with an empty one, unknown until a later finish names it', () => {
    const started = log.runStarted('r1');
    const unnamed = log.toolFinished('r1', 'tc1', { output: 'x' });
    delete (unnamed.data as { toolName?: string }).toolName;
    const emptyName = log.toolFinished('r1', 'tc2', { toolName: '' });
    const state = given(started, unnamed).when(emptyName);
    expect(toolParts(state).map((p) => p.type)).toEqual(['tool-unknown', 'tool-unknown']);
    const named = given(started, unnamed).when(
      log.toolFinished('r1', 'tc1', { toolName: 'search', output: 'late' }),
    );
    expect(toolPart(named, 'tc1')).toMatchObject({ type: 'tool-search', output: 'x' });
  });

  it('closes at once a tool started, or an approval asked, after its run ended', () => {
    const state = given(log.runStarted('r1'), log.runFinished('r1', 'cancelled')).when(
      log.toolStarted('r1', 'tc1'),
      log.approvalRequested('r1', 'ap1', 'tc2'),
    );
    expect(toolParts(state).map((p) => p.state)).toEqual(['output-error', 'output-error']);
    expect(state).toMatchObject({ activeTools: [], pendingApprovals: [], status: 'finished' });
  });

  it('keeps the name of a running tool whose start comes again (a call is one tool), relabels it from the new input, and only its own', () => {
    const state = given(
      log.runStarted('r1'),
      log.runStarted('r2'),
      log.toolStarted('r1', 'tc1', 'search', { query: 'shoes' }),
      log.toolStarted('r1', 'tc2', 'search', { query: 'socks' }),
    ).when(
      log.toolStarted('r2', 'tc1', 'search', { query: 'hats' }),
      log.toolStarted('r1', 'tc2', 'lookup', { query: 'boots' }),
    );
    expect(state.activeTools.map((t) => [t.runId, t.toolCallId, t.toolName, t.label])).toEqual([
      ['r1', 'tc1', 'search', 'Searching: shoes'],
      ['r1', 'tc2', 'search', 'Searching: boots'],
      ['r2', 'tc1', 'search', 'Searching: hats'],
    ]);
  });

  it('gives a request for a call that started with no input the input the request names', () => {
    const state = given(log.runStarted('r1'), log.toolStarted('r1', 'tc1', 'refund', {})).when(
      log.approvalRequested('r1', 'ap1', 'tc1', 'refund', { amount: 5 }),
    );
    expect(toolPart(state, 'tc1').input).toEqual({ amount: 5 });
  });

  it('leaves a finished call as it is when an approval is asked for it afterwards', () => {
    const history = [
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1'),
      log.toolFinished('r1', 'tc1'),
    ];
    const before = toolPart(given(...history).when(), 'tc1');
    const state = given(...history).when(log.approvalRequested('r1', 'ap1', 'tc1'));
    expect(toolPart(state, 'tc1')).toEqual(before);
  });

  it('keeps a large input out of the pending approvals, and any input past the first few: the header stays small', () => {
    const history = [log.runStarted('r1')];
    const big = { blob: 'x'.repeat(PENDING_DETAIL_MAX_CHARS) };
    const state = given(...history).when(
      log.approvalRequested('r1', 'ap-big', 'tc-big', 'deploy', big),
      ...Array.from({ length: MAX_PENDING_DETAILS + 2 }, (_, i) =>
        log.approvalRequested('r1', `ap${i}`, `tc${i}`, 'deploy', { n: i }),
      ),
    );
    const [large, ...small] = state.pendingApprovals;
    expect(large).not.toHaveProperty('input');
    expect(large.inputChars).toBe(JSON.stringify(big).length);
    expect(small.slice(0, MAX_PENDING_DETAILS).map((p) => p.input)).toEqual(
      Array.from({ length: MAX_PENDING_DETAILS }, (_, i) => ({ n: i })),
    );
    expect(small.slice(MAX_PENDING_DETAILS).every((p) => !('input' in p))).toBe(true);
    // The part a person decides on keeps the whole input.
    expect(toolPart(state, 'tc-big').input).toEqual(big);
  });

  /** The pending approval a run's one request, with this question and these options, leaves. */
  const pendingAsked = (asked: { question: string | null; options?: string[] | null }) => {
    const started = log.runStarted('r1');
    const request = event('r1', 'approval.requested', {
      approvalId: 'ap1',
      toolCallId: 'tc1',
      toolName: 'patch',
      input: {},
      ...asked,
    });
    return given(started).when(request).pendingApprovals[0];
  };

  it('cuts a long question and leaves long options out of the pending approvals: one request cannot grow the header', () => {
    const question = `Apply this patch?\n${'+ line\n'.repeat(PENDING_DETAIL_MAX_CHARS)}`;
    const options = Array.from({ length: 64 }, (_, i) => `${i}: ${'o'.repeat(200)}`);
    const pending = pendingAsked({ question, options });
    expect(pending.question).toBe(question.slice(0, PENDING_DETAIL_MAX_CHARS));
    expect(pending.questionChars).toBe(question.length);
    expect(pending).not.toHaveProperty('options');
    expect(pending.optionsChars).toBe(JSON.stringify(options).length);
    expect(JSON.stringify(pending).length).toBeLessThan(2 * PENDING_DETAIL_MAX_CHARS);
  });

  it('keeps a question and options that fit whole, with no size beside them', () => {
    const question = 'q'.repeat(PENDING_DETAIL_MAX_CHARS);
    const options = ['o'.repeat(PENDING_DETAIL_MAX_CHARS - 4)];
    const pending = pendingAsked({ question, options });
    expect(pending).toMatchObject({ question, options });
    expect(pending).not.toHaveProperty('questionChars');
    expect(pending).not.toHaveProperty('optionsChars');
  });

  it('keeps an input of exactly the limit, and one asked again under the same id among the kept', () => {
    const exact = { s: 'x'.repeat(PENDING_DETAIL_MAX_CHARS - '{"s":""}'.length) };
    const history = [
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap-exact', 'tc-exact', 'deploy', exact),
      ...Array.from({ length: MAX_PENDING_DETAILS - 1 }, (_, i) =>
        log.approvalRequested('r1', `ap${i}`, `tc${i}`, 'deploy', { n: i }),
      ),
    ];
    const state = given(...history).when(
      log.approvalRequested('r1', 'ap0', 'tc-other', 'deploy', { n: 'again' }),
    );
    expect(JSON.stringify(exact)).toHaveLength(PENDING_DETAIL_MAX_CHARS);
    expect(state.pendingApprovals[0].input).toEqual(exact);
    expect(state.pendingApprovals.find((p) => p.approvalId === 'ap0')?.input).toEqual({
      n: 'again',
    });
  });

  it('reads a question or options sent as null as absent', () => {
    const pending = pendingAsked({ question: null, options: null });
    expect(pending).not.toHaveProperty('question');
    expect(pending).not.toHaveProperty('options');
    expect(pending).not.toHaveProperty('questionChars');
    expect(pending).not.toHaveProperty('optionsChars');
  });

  it(`keeps long questions and options for the first ${MAX_PENDING_DETAILS} pending approvals, brief ones for the rest`, () => {
    const question = 'q'.repeat(PENDING_DETAIL_MAX_CHARS);
    const longOptions = ['o'.repeat(PENDING_BRIEF_CHARS)];
    // JSON of exactly PENDING_BRIEF_CHARS characters: brief.
    const shortOptions = ['s'.repeat(PENDING_BRIEF_CHARS - 4)];
    const history = [log.runStarted('r1')];
    const asked = Array.from({ length: MAX_PENDING_DETAILS + 2 }, (_, i) =>
      event('r1', 'approval.requested', {
        approvalId: `ap${i}`,
        toolCallId: `tc${i}`,
        toolName: 'patch',
        input: {},
        question,
        options: i === MAX_PENDING_DETAILS + 1 ? shortOptions : longOptions,
      }),
    );
    const pending = given(...history).when(...asked).pendingApprovals;
    for (const kept of pending.slice(0, MAX_PENDING_DETAILS)) {
      expect(kept).toMatchObject({ question, options: longOptions });
      expect(kept).not.toHaveProperty('questionChars');
    }
    const [brief, briefShort] = pending.slice(MAX_PENDING_DETAILS);
    expect(brief.question).toBe(question.slice(0, PENDING_BRIEF_CHARS));
    expect(brief.questionChars).toBe(question.length);
    expect(brief).not.toHaveProperty('options');
    expect(brief.optionsChars).toBe(JSON.stringify(longOptions).length);
    // Options that are brief are kept however many approvals wait.
    expect(briefShort.options).toEqual(shortOptions);
  });

  it('counts only the approvals that keep long details toward the first few', () => {
    const brief = {
      question: 'q'.repeat(PENDING_BRIEF_CHARS),
      options: ['o'.repeat(PENDING_BRIEF_CHARS - 4)],
    };
    const history = [
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap-plain', 'tc-plain'),
      ...Array.from({ length: MAX_PENDING_DETAILS }, (_, i) =>
        event('r1', 'approval.requested', {
          approvalId: `ap${i}`,
          toolCallId: `tc${i}`,
          toolName: 'patch',
          input: {},
          ...brief,
        }),
      ),
    ];
    const long = {
      question: 'q'.repeat(PENDING_DETAIL_MAX_CHARS),
      options: ['o'.repeat(PENDING_DETAIL_MAX_CHARS - 4)],
    };
    const state = given(...history).when(
      event('r1', 'approval.requested', {
        approvalId: 'ap-long',
        toolCallId: 'tc-long',
        toolName: 'patch',
        input: {},
        ...long,
      }),
    );
    expect(state.pendingApprovals.at(-1)).toMatchObject(long);
    expect(state.pendingApprovals.at(-1)).not.toHaveProperty('questionChars');
  });

  it('cuts a question between characters, never inside one', () => {
    const question = `${'q'.repeat(PENDING_DETAIL_MAX_CHARS - 1)}😀 and more`;
    const pending = pendingAsked({ question });
    expect(pending.question).toBe('q'.repeat(PENDING_DETAIL_MAX_CHARS - 1));
    expect(pending.questionChars).toBe(question.length);
  });

  it('keeps one pending approval per id, as last asked, with its options, and no question when none', () => {
    const history = [log.runStarted('r1'), log.approvalRequested('r1', 'ap1', 'tc1')];
    const again = event('r1', 'approval.requested', {
      approvalId: 'ap1',
      toolCallId: 'tc1',
      toolName: 'refund',
      input: { amount: 7 },
      options: ['allow', 'deny'],
    });
    const state = given(...history).when(again);
    expect(state.pendingApprovals).toHaveLength(1);
    expect(state.pendingApprovals[0]).toMatchObject({
      input: { amount: 7 },
      options: ['allow', 'deny'],
      requestedAt: again.recordedAt,
    });
    expect(state.pendingApprovals[0]).not.toHaveProperty('question');
    const plain = given(log.runStarted('r1')).when(log.approvalRequested('r1', 'ap1', 'tc1'));
    expect(plain.pendingApprovals[0]).not.toHaveProperty('options');
  });

  it('changes nothing else when an approval it never asked, or no longer waits on, is resolved', () => {
    const history = [
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.approvalResolved('r1', 'ap1', 'allow'),
      log.approvalRequested('r1', 'ap2', 'tc2'),
    ];
    const before = given(...history).when();
    const state = given(...history).when(
      log.approvalResolved('r1', 'ap-never', 'deny'),
      log.approvalResolved('r1', 'ap1', 'deny'),
    );
    expect(state.pendingApprovals).toEqual(before.pendingApprovals);
    expect(toolParts(state)).toEqual(toolParts(before));
  });

  it('answers a part only for the approval last asked for it, not one it superseded', () => {
    const state = given(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.approvalRequested('r1', 'ap2', 'tc1'),
    ).when(log.approvalResolved('r1', 'ap1', 'deny'));
    expect(toolPart(state, 'tc1')).toMatchObject({
      state: 'approval-requested',
      approval: { id: 'ap2' },
    });
  });

  it('keeps other tools running when a call that was not running is denied', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1'),
      log.approvalRequested('r1', 'ap2', 'tc2'),
    ).when(log.approvalResolved('r1', 'ap2', 'deny'));
    expect(state.activeTools.map((t) => t.toolCallId)).toEqual(['tc1']);
  });

  it('explains a downgraded denial by the policy', () => {
    expect(DOWNGRADED_REASON).toMatch(/policy/);
    expect(DOWNGRADED_REASON).toMatch(/downgraded/);
  });
});
