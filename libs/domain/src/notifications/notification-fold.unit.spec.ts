/**
 * The notification fold: exactly one item per transition into blocked or finished, agreeing
 * with the thread view's own status for every sequence the write path could record.
 */
import fc from 'fast-check';
import { applyToThread, emptyThread, PENDING_DETAIL_MAX_CHARS } from '../projections/thread-fold';
import type { EventType } from '../event-types';
import type { ProjectedEvent } from '../projections/thread-state';
import { TENANT, THREAD, ThreadLog } from '../projections/testing/thread-events';
import { threadSequences } from '../projections/testing/thread-sequences';
import {
  emptyNotificationThread,
  foldNotification,
  threadUserOf,
  MAX_ENDED_RUNS,
  NOTIFICATION_DATA_TYPES,
  SUMMARY_MAX,
  type Notification,
} from './notification-fold';

let log: ThreadLog;
beforeEach(() => {
  log = new ThreadLog();
});

function notify(...events: ProjectedEvent[]): Notification[] {
  const state = emptyNotificationThread(TENANT, THREAD);
  return events.flatMap((event) => foldNotification(state, event) ?? []);
}

describe('foldNotification', () => {
  it('a thread that blocks then finishes gives exactly two items, in order', () => {
    const started = log.runStarted('r1', { title: 'Refund order 1042' });
    const asked = log.approvalRequested('r1', 'ap1', 'tc1');
    const resolved = log.event('r1', 'approval.resolved', {
      approvalId: 'ap1',
      decision: 'allow',
      receipt: 'rcpt',
    });
    const done = log.runFinished('r1', 'completed');
    expect(notify(started, asked, resolved, done)).toEqual([
      {
        threadId: THREAD,
        runId: 'r1',
        kind: 'blocked',
        state: 'blocked',
        title: 'Refund order 1042',
        summary: 'approval requested: Using refund | Refund 19.99 EUR?',
        position: asked.position,
        event: 'approval.requested',
        eventId: asked.id,
        recordedAt: asked.recordedAt,
        approvalId: 'ap1',
        toolName: 'refund',
        question: 'Refund 19.99 EUR?',
      },
      {
        threadId: THREAD,
        runId: 'r1',
        kind: 'finished',
        state: 'completed',
        title: 'Refund order 1042',
        summary: 'run completed',
        position: done.position,
        event: 'run.finished',
        eventId: done.id,
        recordedAt: done.recordedAt,
      },
    ]);
  });

  it('a tool that finishes while its approval waits unblocks the thread: nothing is left to decide', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    for (const event of [
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.approvalRequested('r1', 'ap2', 'tc2'),
      log.toolFinished('r1', 'tc1', { failed: true, errorText: 'approval timed out' }),
    ]) {
      foldNotification(state, event);
    }
    expect([state.status, state.pending.map((p) => p.approvalId)]).toEqual(['blocked', ['ap2']]);
    foldNotification(state, log.toolFinished('r1', 'tc2'));
    expect(state.status).toBe('open');
  });

  it('a second approval while already blocked is not a second item', () => {
    const items = notify(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      log.approvalRequested('r1', 'ap2', 'tc2'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
    );
    expect(items.map((i) => i.approvalId)).toEqual(['ap1']);
  });

  it('blocks again after the first approval was answered', () => {
    const resolve = (approvalId: string) =>
      log.event('r1', 'approval.resolved', { approvalId, decision: 'deny', receipt: 'r' });
    const items = notify(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
      resolve('ap1'),
      log.approvalRequested('r1', 'ap2', 'tc2'),
    );
    expect(items.map((i) => [i.kind, i.approvalId])).toEqual([
      ['blocked', 'ap1'],
      ['blocked', 'ap2'],
    ]);
  });

  it('says how a run finished, with its reason and error, and a blocked run that is stopped finishes', () => {
    const items = notify(
      log.runStarted('r1'),
      log.approvalRequested('r1', 'ap1', 'tc1', 'deploy', { env: 'prod' }),
      log.event('r1', 'run.finished', {
        status: 'failed',
        reason: 'tool crashed',
        errorText: 'exit 1',
      }),
    );
    expect(items.map((i) => [i.kind, i.state, i.summary])).toEqual([
      ['blocked', 'blocked', 'approval requested: Deploying: prod | Refund 19.99 EUR?'],
      ['finished', 'failed', 'run failed | tool crashed | exit 1'],
    ]);
  });

  it('a thread finishes once its last running run ends, not before', () => {
    const items = notify(
      log.runStarted('r1'),
      log.runStarted('r2'),
      log.runFinished('r1', 'completed'),
      log.runFinished('r2', 'cancelled'),
      log.runStarted('r3'),
      log.runFinished('r3', 'completed'),
    );
    expect(items.map((i) => [i.runId, i.state])).toEqual([
      ['r2', 'cancelled'],
      ['r3', 'completed'],
    ]);
  });

  it('folds nothing twice: a redelivered event causes no second item', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1'));
    const asked = log.approvalRequested('r1', 'ap1', 'tc1');
    expect(foldNotification(state, asked)).not.toBeNull();
    expect(foldNotification(state, asked)).toBeNull();
  });

  it('names who the thread is for from its run and turn starts, and from nothing else', () => {
    const started = log.runStarted('r1');
    started.metadata.user = 'u:ana';
    const turn = log.turnStarted('r1', 't1');
    turn.metadata.user = 'k:0123abcd';
    const asked = log.approvalRequested('r1', 'ap1', 'tc1');
    asked.metadata.user = 'u:eve';
    expect([started, turn, asked].map(threadUserOf)).toEqual(['u:ana', 'k:0123abcd', null]);
  });

  it(`keeps a summary within ${SUMMARY_MAX} characters`, () => {
    const [item] = notify(
      log.runStarted('r1'),
      log.event('r1', 'run.finished', { status: 'failed', errorText: 'x'.repeat(5000) }),
    );
    expect(item.summary).toHaveLength(SUMMARY_MAX);
    expect(item.summary.endsWith('…')).toBe(true);
  });

  it(`cuts a summary of a few hundred characters to ${SUMMARY_MAX}`, () => {
    const [item] = notify(
      log.runStarted('r1'),
      log.event('r1', 'run.finished', { status: 'failed', errorText: 'x'.repeat(600) }),
    );
    expect(item.summary).toBe(`run failed | ${'x'.repeat(SUMMARY_MAX - 14)}…`);
  });

  it('gives one item per transition of the thread view into blocked or finished, for any sequence', () => {
    fc.assert(
      fc.property(threadSequences, (events) => {
        const view = emptyThread(TENANT, THREAD);
        const state = emptyNotificationThread(TENANT, THREAD);
        const expected: [number, string][] = [];
        const items: [number, string][] = [];
        for (const event of events) {
          const before = view.status;
          applyToThread(view, event);
          if (view.status !== before && (view.status === 'blocked' || view.status === 'finished'))
            expected.push([event.position, view.status]);
          const item = foldNotification(state, event);
          if (item) items.push([item.position, item.kind]);
        }
        expect(items).toEqual(expected);
      }),
      { numRuns: 300 },
    );
  });

  it("reads the data of NOTIFICATION_DATA_TYPES' events alone: without any other's, the same items and state", () => {
    fc.assert(
      fc.property(threadSequences, (events) => {
        const fold = (from: readonly ProjectedEvent[]) => {
          const state = emptyNotificationThread(TENANT, THREAD);
          const items = from.map((event) => foldNotification(state, event));
          return { state, items };
        };
        const withoutData = events.map((event) =>
          NOTIFICATION_DATA_TYPES.includes(event.type as EventType)
            ? event
            : { ...event, data: null as unknown as ProjectedEvent['data'] },
        );
        expect(fold(withoutData)).toEqual(fold(events));
      }),
    );
  });
});

describe('foldNotification: long threads', () => {
  it(`remembers at most ${MAX_ENDED_RUNS} ended runs, and still finishes once per ending`, () => {
    const events: ProjectedEvent[] = [];
    for (let i = 0; i < MAX_ENDED_RUNS + 10; i += 1) {
      events.push(log.runStarted(`r${i}`), log.runFinished(`r${i}`, 'completed'));
    }
    const state = emptyNotificationThread(TENANT, THREAD);
    const items = events.flatMap((event) => foldNotification(state, event) ?? []);
    expect(items).toHaveLength(MAX_ENDED_RUNS + 10);
    expect(state.endedRuns).toHaveLength(MAX_ENDED_RUNS);
    expect(state.endedCount).toBe(MAX_ENDED_RUNS + 10);
    expect(state.activeRuns).toEqual([]);
  });
});

describe('foldNotification: edges', () => {
  const withUser = (event: ProjectedEvent, user: unknown): ProjectedEvent => ({
    ...event,
    metadata: { ...event.metadata, user },
  });

  it('folds an event once: a redelivery at or below the position is ignored', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    const started = log.runStarted('r1');
    const asked = log.approvalRequested('r1', 'ap1', 'tc1');
    foldNotification(state, started);
    expect(foldNotification(state, asked)).toMatchObject({ kind: 'blocked' });
    expect(foldNotification(state, asked)).toBeNull();
    expect(foldNotification(state, { ...started, type: 'run.paused' })).toBeNull();
    expect(state.position).toBe(asked.position);
  });

  it('takes the first title that is not blank', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1', { title: '   ' }));
    expect(state.title).toBeNull();
    foldNotification(state, log.runStarted('r2', { title: 'Refunds' }));
    foldNotification(state, log.runStarted('r3', { title: 'Other' }));
    expect(state.title).toBe('Refunds');
  });

  it('names no user for a missing, empty or non-text one', () => {
    expect(threadUserOf(log.turnStarted('r1', 't1'))).toBeNull();
    expect(threadUserOf(withUser(log.turnStarted('r1', 't2'), ''))).toBeNull();
    expect(threadUserOf(withUser(log.turnStarted('r1', 't3'), 7))).toBeNull();
  });

  it('asks the approval’s question trimmed, and leaves a blank one out', () => {
    const asked = (question: string) => {
      const state = emptyNotificationThread(TENANT, THREAD);
      foldNotification(state, log.runStarted('r1'));
      const event = log.approvalRequested('r1', 'ap1', 'tc1', 'deploy', { env: 'prod' });
      return foldNotification(state, { ...event, data: { ...event.data, question } });
    };
    expect(asked('  Ship it?  ')).toMatchObject({
      question: 'Ship it?',
      summary: 'approval requested: Deploying: prod | Ship it?',
    });
    const blank = asked('   ');
    expect(blank).not.toHaveProperty('question');
    expect(blank?.summary).toBe('approval requested: Deploying: prod');
  });

  it('collapses whitespace in a finished run’s summary, and leaves out blank details', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1'));
    const done = log.runFinished('r1', 'failed');
    const item = foldNotification(state, {
      ...done,
      data: { ...done.data, reason: '  ', errorText: ' payments  API\n down ' },
    });
    expect(item?.summary).toBe('run failed | payments API down');
  });
});

describe('foldNotification: what the write path never records, and its limits', () => {
  it('starts open, with nothing seen', () => {
    expect(emptyNotificationThread(TENANT, THREAD)).toEqual({
      tenantId: TENANT,
      threadId: THREAD,
      title: null,
      activeRuns: [],
      endedRuns: [],
      endedCount: 0,
      pending: [],
      status: 'open',
      position: 0,
    });
  });

  it('keeps the status it notified: blocked, then finished', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1'));
    foldNotification(state, log.approvalRequested('r1', 'ap1', 'tc1'));
    expect(state.status).toBe('blocked');
    foldNotification(state, log.runFinished('r1', 'completed'));
    expect(state.status).toBe('finished');
  });

  it('notifies nothing for an older approval delivered again after it was answered', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    const asked = log.approvalRequested('r1', 'ap1', 'tc1');
    foldNotification(state, log.runStarted('r1'));
    foldNotification(state, asked);
    foldNotification(state, log.approvalResolved('r1', 'ap1', 'allow'));
    expect(foldNotification(state, asked)).toBeNull();
    expect(state.pending).toEqual([]);
  });

  it.each(['turn.steered', 'model.call', 'append.rejected'] as const)(
    'takes a %s as no run of its own: the thread still finishes when its runs end',
    (type) => {
      const items = notify(
        log.runStarted('r1'),
        { ...log.runStarted('r-other'), type },
        log.runFinished('r1', 'completed'),
      );
      expect(items.map((i) => [i.kind, i.runId])).toEqual([['finished', 'r1']]);
    },
  );

  it('notifies for a run stamped with no run id under the empty id', () => {
    const started = log.runStarted('r1');
    const asked = log.approvalRequested('r1', 'ap1', 'tc1');
    delete started.metadata.runId;
    delete asked.metadata.runId;
    expect(notify(started, asked)).toEqual([expect.objectContaining({ runId: '' })]);
  });

  it('counts a run that ends twice once', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1'));
    foldNotification(state, log.runFinished('r1', 'completed'));
    expect(foldNotification(state, log.runFinished('r1', 'failed'))).toBeNull();
    expect(state).toMatchObject({ endedRuns: ['r1'], endedCount: 1 });
  });

  it('is not blocked by an approval asked in a run that already ended', () => {
    const items = notify(
      log.runStarted('r1'),
      log.runFinished('r1', 'completed'),
      log.approvalRequested('r1', 'ap1', 'tc1'),
    );
    expect(items.map((i) => i.kind)).toEqual(['finished']);
  });

  it.each([
    ['the same request twice: once', ['ap1', 'tc1'], ['ap1', 'tc1']],
    [
      'an approval id asked again for another call: once, for that call',
      ['ap1', 'tc2'],
      ['ap1', 'tc2'],
    ],
    [
      'a call asked about again: its newest request only, as the thread view',
      ['ap2', 'tc1'],
      ['ap2', 'tc1'],
    ],
  ])('keeps pending, after %s', (_, [approvalId, toolCallId], [pendingId, pendingCall]) => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1'));
    foldNotification(state, log.approvalRequested('r1', 'ap1', 'tc1'));
    foldNotification(state, log.approvalRequested('r1', approvalId, toolCallId));
    expect(state.pending).toEqual([
      { approvalId: pendingId, runId: 'r1', toolCallId: pendingCall },
    ]);
    foldNotification(
      state,
      log.event('r1', 'approval.resolved', {
        approvalId: pendingId,
        decision: 'deny',
        receipt: 'r',
      }),
    );
    expect(state.status).not.toBe('blocked');
  });

  it("keeps two runs' requests under one approval id apart: resolving one leaves the other", () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1'));
    foldNotification(state, log.runStarted('r2'));
    foldNotification(state, log.approvalRequested('r1', 'ap1', 'tc1'));
    foldNotification(state, log.approvalRequested('r2', 'ap1', 'tc2'));
    foldNotification(
      state,
      log.event('r2', 'approval.resolved', { approvalId: 'ap1', decision: 'deny', receipt: 'r' }),
    );
    expect(state.pending).toEqual([{ approvalId: 'ap1', runId: 'r1', toolCallId: 'tc1' }]);
    expect(state.status).toBe('blocked');
  });

  it('never revives an ended run: a late event of it does not keep the thread from finishing again', () => {
    const items = notify(
      log.runStarted('r1'),
      log.runFinished('r1', 'completed'),
      log.event('r1', 'approval.resolved', { approvalId: 'ap0', decision: 'deny', receipt: 'r' }),
      log.runStarted('r2'),
      log.runFinished('r2', 'failed'),
    );
    expect(items.map((i) => [i.runId, i.state])).toEqual([
      ['r1', 'completed'],
      ['r2', 'failed'],
    ]);
  });

  it('cuts a long question as the thread view does, and summarizes it from its start', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1'));
    const asked = log.approvalRequested('r1', 'ap1', 'tc1', 'deploy', { env: 'prod' });
    const question = `Apply this patch?${' '.repeat(PENDING_DETAIL_MAX_CHARS)}${'+ line\n'.repeat(PENDING_DETAIL_MAX_CHARS)}end`;
    const item = foldNotification(state, { ...asked, data: { ...asked.data, question } });
    expect(item?.question).toBe(question.slice(0, PENDING_DETAIL_MAX_CHARS));
    expect(item?.questionChars).toBe(question.length);
    expect(item?.summary).toBe(
      `approval requested: Deploying: prod | Apply this patch? ${'+ line '.repeat(40)}`.slice(
        0,
        SUMMARY_MAX - 1,
      ) + '…',
    );
  });

  it('leaves out a question that is not text', () => {
    const state = emptyNotificationThread(TENANT, THREAD);
    foldNotification(state, log.runStarted('r1'));
    const asked = log.approvalRequested('r1', 'ap1', 'tc1', 'deploy', { env: 'prod' });
    const item = foldNotification(state, { ...asked, data: { ...asked.data, question: null } });
    expect(item).not.toHaveProperty('question');
    expect(item?.summary).toBe('approval requested: Deploying: prod');
  });

  it(`keeps a summary of exactly ${SUMMARY_MAX} characters whole`, () => {
    const errorText = 'x'.repeat(SUMMARY_MAX - 'run failed | '.length);
    const [item] = notify(
      log.runStarted('r1'),
      log.event('r1', 'run.finished', { status: 'failed', errorText }),
    );
    expect(item.summary).toBe(`run failed | ${errorText}`);
  });
});
