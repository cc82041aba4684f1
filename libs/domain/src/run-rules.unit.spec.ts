/**
 * A run's lifecycle rules for an append, decided from the run's head (its last recorded
 * event) and the batch's types: given a head, when a batch of types arrives, then a verdict.
 */
import type { EventType } from './event-types';
import { checkRunAppend, runHeadOf, runStream, type RunHead } from './run-rules';

const TENANT = 'tenant-a';
const OTHER_TENANT = 'tenant-b';
const RUN = 'run-1';

const openRun: RunHead = {
  revision: 3,
  hash: 'a'.repeat(64),
  tenantId: TENANT,
  threadId: 'thread-1',
  finished: false,
};
const finishedRun: RunHead = { ...openRun, finished: true };

/** given(head).when(tenant, ...types) → the verdict of checkRunAppend. */
const given = (head: RunHead | null) => ({
  whenAppending: (...types: EventType[]) => checkRunAppend(head, TENANT, RUN, types),
  whenTenantAppends: (tenantId: string, ...types: EventType[]) =>
    checkRunAppend(head, tenantId, RUN, types),
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
      expect(given(null).whenAppending()).not.toBeNull();
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
    });
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

    expect(checkRunAppend(finished, TENANT, RUN, ['message.added'])?.code).toBe('run_finished');
    expect(checkRunAppend(open, TENANT, RUN, ['message.added'])).toBeNull();
  });
});

describe('runStream', () => {
  it('names a run’s stream run-<runId>', () => {
    expect(runStream('abc-1')).toBe('run-abc-1');
  });
});
