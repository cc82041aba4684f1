/**
 * A run's lifecycle rules for an append, decided from the run's head (its last recorded
 * event) and the batch's types: given a head, when a batch of types arrives, then a verdict.
 */
import fc from 'fast-check';
import type { EventType } from './event-types';
import { foldRunState } from './run-decider';
import {
  checkRunAppend,
  runHeadOf,
  stampActiveTurns,
  type RuleEvent,
  type RunHead,
} from './run-rules';

const TENANT = 'tenant-a';
const OTHER_TENANT = 'tenant-b';
const RUN = 'run-1';

const openRun: RunHead = {
  revision: 3,
  hash: 'a'.repeat(64),
  tenantId: TENANT,
  threadId: 'thread-1',
  finished: false,
  activeTurnId: null,
};
const finishedRun: RunHead = { ...openRun, finished: true };

const ofTypes = (types: EventType[]): RuleEvent[] => types.map((type) => ({ type, data: {} }));
const turn = (type: 'turn.started' | 'turn.finished', turnId: string): RuleEvent => ({
  type,
  data: type === 'turn.started' ? { turnId, source: 'typed' } : { turnId, status: 'completed' },
});

/** given(head).when(tenant, ...types) → the verdict of checkRunAppend. */
const given = (head: RunHead | null) => ({
  whenAppending: (...types: EventType[]) => checkRunAppend(head, TENANT, RUN, ofTypes(types)),
  whenTenantAppends: (tenantId: string, ...types: EventType[]) =>
    checkRunAppend(head, tenantId, RUN, ofTypes(types)),
  whenAppendingEvents: (...events: RuleEvent[]) => checkRunAppend(head, TENANT, RUN, events),
});

describe('checkRunAppend', () => {
  describe('a new run', () => {
    it('accepts a batch that starts with run.started', () => {
      expect(given(null).whenAppending('run.started', 'turn.started', 'message.added')).toBeNull();
    });

    it('accepts a whole run in one batch, ending with run.finished', () => {
      expect(given(null).whenAppending('run.started', 'message.added', 'run.finished')).toBeNull();
    });

    it.each<[EventType[]]>([
      [['message.added']],
      [['turn.started', 'run.started']],
      [['run.finished']],
    ])('refuses a first batch that does not start with run.started: %j', (types) => {
      const verdict = given(null).whenAppending(...types);

      expect(verdict).not.toBeNull();
      expect(verdict?.message).toContain('run.started');
      expect(verdict?.message).toContain(RUN);
    });

    it('refuses an empty first batch', () => {
      expect(given(null).whenAppending()).toEqual({
        code: 'run_not_found',
        message: `run ${RUN} not found: a run's first event must be run.started`,
      });
    });

    it('accepts a turn in the first batch, and refuses a second one there', () => {
      expect(
        given(null).whenAppendingEvents(
          { type: 'run.started', data: {} },
          turn('turn.started', 't1'),
          turn('turn.started', 't2'),
        ),
      ).toMatchObject({ code: 'turn_already_active', index: 2, activeTurnId: 't1' });
    });
  });

  describe('a second run.started', () => {
    it('is refused in the same batch, naming its index', () => {
      expect(given(null).whenAppending('run.started', 'message.added', 'run.started')).toEqual({
        code: 'run_already_started',
        message: `run ${RUN} is already started`,
        index: 2,
      });
    });

    it('is refused after the head, at index 0', () => {
      expect(given(openRun).whenAppending('run.started')).toEqual({
        code: 'run_already_started',
        message: `run ${RUN} is already started`,
        index: 0,
      });
    });

    it('is refused later in a batch after the head, naming its index', () => {
      expect(given(openRun).whenAppending('message.added', 'run.started')).toMatchObject({
        code: 'run_already_started',
        index: 1,
      });
    });
  });

  describe('an open run', () => {
    it('accepts any non-starting events', () => {
      expect(
        given(openRun).whenAppending(
          'turn.started',
          'tool.started',
          'tool.finished',
          'turn.finished',
        ),
      ).toBeNull();
    });

    it('accepts a batch that ends with run.finished', () => {
      expect(given(openRun).whenAppending('message.added', 'run.finished')).toBeNull();
    });

    it('accepts an empty batch', () => {
      expect(given(openRun).whenAppending()).toBeNull();
    });
  });

  describe('events after run.finished', () => {
    it('are refused in the same batch, naming the first one that follows', () => {
      expect(
        given(openRun).whenAppending(
          'message.added',
          'run.finished',
          'message.added',
          'turn.started',
        ),
      ).toEqual({
        code: 'run_finished',
        message: `run ${RUN} finishes at event 1 of the batch: nothing may follow`,
        index: 2,
      });
    });

    it('are refused in a new run’s first batch too', () => {
      expect(
        given(null).whenAppending('run.started', 'run.finished', 'message.added'),
      ).toMatchObject({ code: 'run_finished', index: 2 });
    });

    it('include a second run.finished', () => {
      expect(given(openRun).whenAppending('run.finished', 'run.finished')).toMatchObject({
        code: 'run_finished',
        index: 1,
      });
    });

    it.each<[EventType[]]>([[['message.added']], [['run.finished']], [['run.started']], [[]]])(
      'are refused after a finished head: %j',
      (types) => {
        expect(given(finishedRun).whenAppending(...types)).toEqual({
          code: 'run_finished',
          message: `run ${RUN} is finished: nothing can be appended`,
        });
      },
    );
  });

  describe('another tenant’s run', () => {
    it.each<[EventType[]]>([[['message.added']], [['run.started']], [['run.finished']]])(
      'is reported as run_not_found: %j',
      (types) => {
        const verdict = given(openRun).whenTenantAppends(OTHER_TENANT, ...types);

        expect(verdict).toEqual({ code: 'run_not_found', message: expect.any(String) });
        expect(verdict?.message.startsWith(`run ${RUN} not found`)).toBe(true);
        expect(verdict?.message).not.toContain(TENANT);
      },
    );

    it('is reported as run_not_found even when finished', () => {
      expect(given(finishedRun).whenTenantAppends(OTHER_TENANT, 'message.added')).toMatchObject({
        code: 'run_not_found',
      });
    });

    /**
     * The function's contract: "a foreign tenant's run is reported exactly like a missing
     * one". A batch that does not start with run.started must get the same answer whether
     * the run is missing or another tenant's, or the answer tells the tenant the run exists.
     */
    it.each<[EventType[]]>([
      [['message.added']],
      [['turn.started', 'tool.started']],
      [['run.finished']],
    ])('is answered exactly like a missing run: %j', (types) => {
      const missing = given(null).whenTenantAppends(OTHER_TENANT, ...types);
      const foreign = given(openRun).whenTenantAppends(OTHER_TENANT, ...types);

      expect(foreign).toEqual(missing);
    });
  });
});

describe('at most one active turn per run', () => {
  const inTurn: RunHead = { ...openRun, activeTurnId: 't1' };

  it('refuses a turn.started while another turn is active, naming it and the index', () => {
    expect(given(inTurn).whenAppendingEvents(turn('turn.started', 't2'))).toEqual({
      code: 'turn_already_active',
      message: `run ${RUN} has turn t1 in progress: finish it before starting another (at most one active turn per run)`,
      index: 0,
      activeTurnId: 't1',
    });
  });

  it('refuses a second turn.started within one batch', () => {
    expect(
      given(openRun).whenAppendingEvents(turn('turn.started', 't1'), turn('turn.started', 't2')),
    ).toMatchObject({ code: 'turn_already_active', index: 1, activeTurnId: 't1' });
  });

  it('accepts the next turn once the active one finished, in the same batch or before it', () => {
    expect(
      given(inTurn).whenAppendingEvents(turn('turn.finished', 't1'), turn('turn.started', 't2')),
    ).toBeNull();
    expect(given(openRun).whenAppendingEvents(turn('turn.started', 't2'))).toBeNull();
  });

  it('keeps the active turn when a turn.finished names another turn', () => {
    expect(
      given(inTurn).whenAppendingEvents(turn('turn.finished', 't9'), turn('turn.started', 't2')),
    ).toMatchObject({ code: 'turn_already_active', index: 1, activeTurnId: 't1' });
  });
});

describe('stampActiveTurns', () => {
  const withMeta = (event: RuleEvent, metadata: Record<string, unknown> = {}) => ({
    ...event,
    metadata,
  });

  it('stamps each event with the turn active once it is recorded, and drops a client’s stamp', () => {
    const stamped = stampActiveTurns(openRun, [
      withMeta({ type: 'message.added', data: {} }, { activeTurnId: 'forged', source: 'x' }),
      withMeta(turn('turn.started', 't1')),
      withMeta({ type: 'message.added', data: {} }),
      withMeta(turn('turn.finished', 't1')),
    ]);

    expect(stamped.map((e) => e.metadata)).toEqual([
      { source: 'x' },
      { activeTurnId: 't1' },
      { activeTurnId: 't1' },
      {},
    ]);
  });

  it('ends the active turn with the run, and ignores a turn.started without a string turn id', () => {
    const stamped = stampActiveTurns(openRun, [
      withMeta({ type: 'turn.started', data: { turnId: 5 } }),
      withMeta({ type: 'message.added', data: null }),
      withMeta(turn('turn.started', 't1')),
      withMeta({ type: 'run.finished', data: { status: 'completed' } }),
    ]);

    expect(stamped.map((e) => e.metadata)).toEqual([{}, {}, { activeTurnId: 't1' }, {}]);
  });

  it('continues from the head’s active turn, and returns new events, leaving the given ones as they were', () => {
    const inTurn: RunHead = { ...openRun, activeTurnId: 't0' };
    const given = [withMeta({ type: 'message.added', data: {} }, { activeTurnId: 'x' })];

    const stamped = stampActiveTurns(inTurn, given);

    expect(stamped).toEqual([
      { type: 'message.added', data: {}, metadata: { activeTurnId: 't0' } },
    ]);
    expect(given[0].metadata).toEqual({ activeTurnId: 'x' });
    expect(stampActiveTurns(null, [withMeta(turn('turn.started', 't1'))])[0].metadata).toEqual({
      activeTurnId: 't1',
    });
  });

  it('agrees with the commands’ fold of the whole stream, however the stream is cut into appends', () => {
    const turnEvent = fc.oneof(
      fc.record({
        type: fc.constantFrom('turn.started' as const, 'turn.finished' as const),
        id: fc.constantFrom('t1', 't2', 't3'),
      }),
      fc.constant({ type: 'message.added' as const, id: '' }),
    );
    fc.assert(
      fc.property(
        fc.array(turnEvent, { maxLength: 30 }),
        fc.array(fc.integer({ min: 1, max: 5 })),
        (steps, cuts) => {
          const events = steps.map((s) =>
            s.type === 'message.added' ? { type: s.type, data: {} } : turn(s.type, s.id),
          );
          // Append batch by batch as the service does: refused batches are not recorded.
          const recorded: {
            type: string;
            data: unknown;
            revision: number;
            metadata: Record<string, unknown>;
          }[] = [];
          let head: RunHead = openRun;
          let next = 0;
          for (let c = 0; next < events.length; c += 1) {
            const batch = events.slice(next, next + (cuts[c % Math.max(cuts.length, 1)] ?? 1));
            next += batch.length;
            if (checkRunAppend(head, TENANT, RUN, batch) !== null) continue;
            for (const event of stampActiveTurns(
              head,
              batch.map((e) => withMeta(e)),
            )) {
              recorded.push({ ...event, revision: recorded.length });
              head = runHeadOf(recorded[recorded.length - 1]);
            }
          }
          expect(head.activeTurnId).toBe(foldRunState(recorded).activeTurnId);
        },
      ),
    );
  });
});

describe('runHeadOf', () => {
  it('reads the head from the last event’s server-stamped metadata', () => {
    const head = runHeadOf({
      type: 'message.added',
      revision: 7,
      metadata: { hash: 'h7', tenantId: TENANT, threadId: 'thread-1', runId: RUN },
    });

    expect(head).toEqual({
      revision: 7,
      hash: 'h7',
      tenantId: TENANT,
      threadId: 'thread-1',
      finished: false,
      activeTurnId: null,
    });
  });

  it('reads the active turn from the last event’s stamp', () => {
    expect(
      runHeadOf({ type: 'message.added', revision: 7, metadata: { activeTurnId: 't1' } })
        .activeTurnId,
    ).toBe('t1');
  });

  it('marks a run whose last event is run.finished as finished', () => {
    expect(runHeadOf({ type: 'run.finished', revision: 9, metadata: {} }).finished).toBe(true);
  });

  it('reads missing or non-string metadata as empty strings', () => {
    const head = runHeadOf({
      type: 'message.added',
      revision: 0,
      metadata: { hash: 5, tenantId: null },
    });

    expect(head).toMatchObject({ hash: '', tenantId: '', threadId: '' });
  });

  it('feeds checkRunAppend: a finished head refuses, an open one accepts', () => {
    const metadata = { hash: 'h', tenantId: TENANT, threadId: 't' };
    const finished = runHeadOf({ type: 'run.finished', revision: 2, metadata });
    const open = runHeadOf({ type: 'turn.finished', revision: 2, metadata });

    const message = ofTypes(['message.added']);
    expect(checkRunAppend(finished, TENANT, RUN, message)?.code).toBe('run_finished');
    expect(checkRunAppend(open, TENANT, RUN, message)).toBeNull();
  });
});
