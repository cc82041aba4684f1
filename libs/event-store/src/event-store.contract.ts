/**
 * The one contract every EventStore adapter passes (as emmett's `features.ts` and
 * Eventuous' store specs do). An adapter's spec calls `describeEventStoreContract` once.
 * Streams are named uniquely per test so the suite can run against a shared live server.
 */
import { randomUUID } from 'node:crypto';
import { runStream } from '@runledger/domain';
import {
  EventIdConflictError,
  WrongExpectedRevisionError,
  type EventStore,
  type EventToAppend,
  type RecordedEvent,
} from './event-store.port';

export interface ContractOptions {
  /** Time allowed for the subscription tests against a remote server. */
  timeoutMs?: number;
}

function event(n: number, extra: Partial<EventToAppend> = {}): EventToAppend {
  return {
    id: randomUUID(),
    type: 'test.happened',
    data: { n },
    metadata: { by: 'contract' },
    ...extra,
  };
}

function events(count: number, from = 0): EventToAppend[] {
  return Array.from({ length: count }, (_, i) => event(from + i));
}

export function describeEventStoreContract(
  adapter: string,
  open: () => Promise<EventStore>,
  options: ContractOptions = {},
): void {
  const timeout = options.timeoutMs ?? 20_000;

  describe(`EventStore contract: ${adapter}`, () => {
    let store: EventStore;
    let prefix: string;
    const stream = (name: string) => `${prefix}${name}`;

    beforeAll(async () => {
      store = await open();
    });
    afterAll(async () => {
      await store.close();
    });
    beforeEach(() => {
      prefix = `c${randomUUID().replace(/-/g, '').slice(0, 12)}-`;
    });

    describe('expected revision', () => {
      it('no_stream creates a stream and refuses an existing one with its actual revision', async () => {
        const first = await store.append(stream('a'), events(3), { expectedRevision: 'no_stream' });
        expect([first.firstRevision, first.lastRevision]).toEqual([0, 2]);
        await expect(
          store.append(stream('a'), events(1), { expectedRevision: 'no_stream' }),
        ).rejects.toMatchObject({ name: 'WrongExpectedRevisionError', actual: 2 });
        expect(await store.readStream(stream('a'))).toHaveLength(3);
      });

      it('a number must be the revision of the last event', async () => {
        await store.append(stream('a'), events(2), { expectedRevision: 'no_stream' });
        const ok = await store.append(stream('a'), events(1), { expectedRevision: 1 });
        expect(ok.firstRevision).toBe(2);
        const error = await store
          .append(stream('a'), events(1), { expectedRevision: 1 })
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(WrongExpectedRevisionError);
        expect(error).toMatchObject({ expected: 1, actual: 2 });
        await expect(
          store.append(stream('missing'), events(1), { expectedRevision: 0 }),
        ).rejects.toMatchObject({ actual: 'no_stream' });
      });

      it('stream_exists refuses a missing stream and accepts an existing one', async () => {
        await expect(
          store.append(stream('a'), events(1), { expectedRevision: 'stream_exists' }),
        ).rejects.toMatchObject({ name: 'WrongExpectedRevisionError', actual: 'no_stream' });
        expect(await store.readStream(stream('a'))).toEqual([]);
        await store.append(stream('a'), events(1));
        const ok = await store.append(stream('a'), events(1), {
          expectedRevision: 'stream_exists',
        });
        expect(ok.firstRevision).toBe(1);
      });

      it('any appends at the end, whatever the stream holds', async () => {
        const a = await store.append(stream('a'), events(1), { expectedRevision: 'any' });
        const b = await store.append(stream('a'), events(2), { expectedRevision: 'any' });
        expect([a.firstRevision, b.firstRevision, b.lastRevision]).toEqual([0, 1, 2]);
      });
    });

    describe('idempotency', () => {
      it('re-appending the same ids answers the original revisions and writes nothing', async () => {
        const batch = events(3);
        const first = await store.append(stream('a'), batch, { expectedRevision: 'no_stream' });
        await store.append(stream('a'), events(1));
        const again = await store.append(stream('a'), batch, { expectedRevision: 'no_stream' });
        expect(again.events).toEqual(first.events);
        expect(again.idempotent).toBe(true);
        expect(first.idempotent).toBe(false);
        const againAny = await store.append(stream('a'), batch);
        expect(againAny.events).toEqual(first.events);
        expect(await store.readStream(stream('a'))).toHaveLength(4);
      });

      it('re-appending the same ids in another order answers their revisions, lowest first', async () => {
        const batch = events(3);
        const first = await store.append(stream('a'), batch, { expectedRevision: 'no_stream' });
        const again = await store.append(stream('a'), [...batch].reverse());
        expect(again.idempotent).toBe(true);
        expect(again.events).toEqual([...first.events].reverse());
        expect([again.firstRevision, again.lastRevision, again.position]).toEqual([
          first.firstRevision,
          first.lastRevision,
          first.position,
        ]);
        expect(await store.readStream(stream('a'))).toHaveLength(3);
      });

      it('the same id with different content is a conflict and writes nothing', async () => {
        const original = event(1);
        await store.append(stream('a'), [original]);
        const error = await store
          .append(stream('a'), [{ ...original, data: { n: 2 } }])
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(EventIdConflictError);
        expect(error).toMatchObject({ eventId: original.id });
        const recorded = await store.readStream(stream('a'));
        expect(recorded.map((e) => e.data)).toEqual([{ n: 1 }]);
      });
    });

    describe('ids per tenant', () => {
      it('two tenants may record the same event id in their own runs of the same id', async () => {
        const shared = event(1);
        const a = runStream(`${prefix}a`, 'r1');
        const b = runStream(`${prefix}b`, 'r1');
        const first = await store.append(a, [shared], { expectedRevision: 'no_stream' });
        const second = await store.append(b, [{ ...shared, data: { n: 2 } }], {
          expectedRevision: 'no_stream',
        });
        expect(first.idempotent).toBe(false);
        expect(second.idempotent).toBe(false);
        expect((await store.readStream(a)).map((e) => e.data)).toEqual([{ n: 1 }]);
        expect((await store.readStream(b)).map((e) => e.data)).toEqual([{ n: 2 }]);
      });
    });

    describe('readByIds', () => {
      it("answers the stream's events with those ids, in the order asked, leaving out the rest", async () => {
        const batch = events(3);
        await store.append(stream('a'), batch);
        await store.append(stream('b'), [event(9, { id: 'x' + randomUUID() })]);
        const found = await store.readByIds(stream('a'), [batch[2].id, randomUUID(), batch[0].id]);
        expect(found.map((e) => [e.id, e.revision, e.data])).toEqual([
          [batch[2].id, 2, { n: 2 }],
          [batch[0].id, 0, { n: 0 }],
        ]);
        expect(await store.readByIds(stream('b'), [batch[0].id])).toEqual([]);
        expect(await store.readByIds(stream('none'), [batch[0].id])).toEqual([]);
      });
    });

    describe('atomicity', () => {
      it('a refused batch writes none of its events', async () => {
        await store.append(stream('a'), events(1));
        await expect(
          store.append(stream('a'), events(5), { expectedRevision: 7 }),
        ).rejects.toBeInstanceOf(WrongExpectedRevisionError);
        const recordedOnce = event(9);
        await store.append(stream('a'), [recordedOnce]);
        await expect(
          store.append(stream('a'), [event(10), { ...recordedOnce, data: { n: 11 } }, event(12)]),
        ).rejects.toBeInstanceOf(EventIdConflictError);
        const recorded = await store.readStream(stream('a'));
        expect(recorded.map((e) => (e.data as { n: number }).n)).toEqual([0, 9]);
      });

      it('records a batch whole, contiguous, with its metadata', async () => {
        const batch = events(4);
        const result = await store.append(stream('a'), batch);
        const recorded = await store.readStream(stream('a'));
        expect(recorded.map((e) => e.id)).toEqual(batch.map((e) => e.id));
        expect(recorded.map((e) => e.revision)).toEqual([0, 1, 2, 3]);
        expect(recorded[0]).toMatchObject({
          stream: stream('a'),
          type: 'test.happened',
          data: { n: 0 },
          metadata: { by: 'contract' },
        });
        expect(Date.parse(recorded[0].recordedAt)).not.toBeNaN();
        expect(result.events.map((e) => e.position)).toEqual(recorded.map((e) => e.position));
        expect(result.position).toBe(recorded[3].position);
      });
    });

    describe('reads', () => {
      it('reads forwards and backwards from a revision with a limit', async () => {
        await store.append(stream('a'), events(10));
        const forwards = await store.readStream(stream('a'), { fromRevision: 3, maxCount: 4 });
        expect(forwards.map((e) => e.revision)).toEqual([3, 4, 5, 6]);
        const backwards = await store.readStream(stream('a'), {
          fromRevision: 6,
          direction: 'backwards',
          maxCount: 3,
        });
        expect(backwards.map((e) => e.revision)).toEqual([6, 5, 4]);
        const last = await store.readStream(stream('a'), { direction: 'backwards', maxCount: 1 });
        expect(last.map((e) => e.revision)).toEqual([9]);
        expect(await store.readStream(stream('missing'))).toEqual([]);
      });

      it("reads only the data of the types asked for: the others' is null, the rest of each event as ever", async () => {
        const kinds = ['test.kept', 'test.large', 'test.kept', 'test.other', 'test.large'];
        await store.append(
          stream('a'),
          kinds.map((type, n) => event(n, { type, data: { n, text: 'x'.repeat(n * 1000) } })),
        );
        const whole = await store.readStream(stream('a'));
        // An event's size (where the store knows it) no longer counts the data it comes without.
        const unsized = (e: RecordedEvent) => ({ ...e, size: undefined });
        const forwards = await store.readStream(stream('a'), {
          fromRevision: 1,
          dataTypes: ['test.kept', 'test.missing'],
        });
        expect(forwards.map(unsized)).toEqual(
          whole
            .slice(1)
            .map((e) => unsized({ ...e, data: e.type === 'test.kept' ? e.data : null })),
        );
        forwards.forEach((e, i) => {
          const size = whole[i + 1].size;
          if (size === undefined || e.data !== null) expect(e.size).toBe(size);
          else expect(e.size).toBeLessThan(size);
        });
        const backwards = await store.readStream(stream('a'), {
          direction: 'backwards',
          maxCount: 2,
          dataTypes: ['test.large'],
        });
        expect(backwards.map((e) => [e.revision, e.data])).toEqual([
          [4, { n: 4, text: 'x'.repeat(4000) }],
          [3, null],
        ]);
        expect((await store.readStream(stream('a'), { dataTypes: [] })).map(unsized)).toEqual(
          whole.map((e) => unsized({ ...e, data: null })),
        );
      });

      it('readAll reads from a position, in position order, filtered by stream prefix', async () => {
        await store.append(stream('a-1'), events(2));
        await store.append(stream('b-1'), events(2));
        const mid = await store.append(stream('a-2'), events(2));
        await store.append(stream('b-2'), events(1));
        await store.append(stream('a-1'), events(1, 2));
        const all = await store.readAll({ fromPosition: 0, streamPrefix: stream('a-') });
        expect(all.map((e) => e.stream)).toEqual([
          stream('a-1'),
          stream('a-1'),
          stream('a-2'),
          stream('a-2'),
          stream('a-1'),
        ]);
        assertStrictlyIncreasing(all);
        const fromMid = await store.readAll({
          fromPosition: mid.events[1].position,
          streamPrefix: stream('a-'),
          maxCount: 10,
        });
        expect(fromMid.map((e) => e.position)).toEqual(all.slice(3).map((e) => e.position));
        const limited = await store.readAll({
          fromPosition: 0,
          streamPrefix: stream('a-'),
          maxCount: 2,
        });
        expect(limited).toHaveLength(2);
        expect(await store.headPosition()).toBeGreaterThanOrEqual(all[4].position);
      });

      it('readAll of one stream reads only that stream, named exactly, from a position', async () => {
        const first = await store.append(stream('s-1'), events(2));
        await store.append(stream('s-10'), events(2));
        await store.append(stream('s-1'), events(2, 2));
        const read = await store.readAll({ stream: stream('s-1') });
        expect(read.map((e) => [e.stream, e.revision])).toEqual([
          [stream('s-1'), 0],
          [stream('s-1'), 1],
          [stream('s-1'), 2],
          [stream('s-1'), 3],
        ]);
        assertStrictlyIncreasing(read);
        const later = await store.readAll({
          stream: stream('s-1'),
          fromPosition: first.events[1].position,
          maxCount: 2,
        });
        expect(later.map((e) => e.revision)).toEqual([1, 2]);
      });

      it('readAll with a thread answers only the events stamped with that tenant and thread, in order', async () => {
        const thread = { tenantId: `tenant-${randomUUID()}`, threadId: 'th-1' };
        const stamped = (n: number, threadId: string, tenantId = thread.tenantId) =>
          event(n, { metadata: { tenantId, threadId } });
        const first = await store.append(stream('t-run-1'), [
          stamped(0, 'th-1'),
          stamped(1, 'th-2'),
        ]);
        await store.append(stream('t-run-2'), [stamped(2, 'th-1', 'another-tenant')]);
        await store.append(stream('t-run-3'), [stamped(3, 'th-1'), stamped(4, 'th-1')]);
        const read = await store.readAll({ thread });
        expect(read.map((e) => (e.data as { n: number }).n)).toEqual([0, 3, 4]);
        assertStrictlyIncreasing(read);
        const after = await store.readAll({
          thread,
          fromPosition: first.events[0].position + 1,
          maxCount: 1,
        });
        expect(after.map((e) => (e.data as { n: number }).n)).toEqual([3]);
        const prefixed = await store.readAll({ thread, streamPrefix: stream('t-run-3') });
        expect(prefixed.map((e) => (e.data as { n: number }).n)).toEqual([3, 4]);
      });

      it('readAll with a thread and a prefix counts maxCount among the prefixed streams only', async () => {
        // A thread's receipts are stamped with it too: many of them in a row must not hide the
        // run event after them from a page of run events.
        const thread = { tenantId: `tenant-${randomUUID()}`, threadId: 'th-many' };
        const stamped = (n: number) => event(n, { metadata: { ...thread } });
        const started = await store.append(stream('tp-run-1'), [stamped(0)]);
        for (let n = 1; n <= 6; n += 1) await store.append(stream(`tp-other-${n}`), [stamped(n)]);
        await store.append(stream('tp-run-1'), [stamped(7)]);
        const page = await store.readAll({
          thread,
          streamPrefix: stream('tp-run-'),
          fromPosition: started.position + 1,
          maxCount: 3,
        });
        expect(page.map((e) => (e.data as { n: number }).n)).toEqual([7]);
      });

      it('a page budget ends a read once the events after its first hold maxChars, never before its second', async () => {
        const thread = { tenantId: `tenant-${randomUUID()}`, threadId: 'th-big' };
        // About 1,040 characters of JSON each: the second of a page stays under 1,500, the third passes it.
        const big = (n: number) =>
          event(n, { data: { n, text: 'x'.repeat(1000) }, metadata: { ...thread } });
        const appended = await store.append(stream('big'), [0, 1, 2, 3, 4, 5].map(big));
        const revisions = (read: RecordedEvent[]) => read.map((e) => e.revision);

        expect(revisions(await store.readStream(stream('big'), { maxChars: 1500 }))).toEqual([
          0, 1, 2,
        ]);
        expect(
          revisions(await store.readStream(stream('big'), { fromRevision: 3, maxChars: 1500 })),
        ).toEqual([3, 4, 5]);
        // However small the budget, a page holds the event after its first.
        expect(revisions(await store.readStream(stream('big'), { maxChars: 1 }))).toEqual([0, 1]);
        expect(
          revisions(await store.readStream(stream('big'), { direction: 'backwards', maxChars: 1 })),
        ).toEqual([5, 4]);
        const from = appended.events[2].position;
        expect(
          revisions(
            await store.readAll({ fromPosition: from, streamPrefix: stream('big'), maxChars: 1 }),
          ),
        ).toEqual([2, 3]);
        expect(revisions(await store.readAll({ thread, fromPosition: from, maxChars: 1 }))).toEqual(
          [2, 3],
        );
        expect(revisions(await store.readStream(stream('big')))).toEqual([0, 1, 2, 3, 4, 5]);
      });

      it('headPosition with a prefix is the newest event of those streams, not of the log', async () => {
        const prefix = stream('h-');
        expect(await store.headPosition({ streamPrefix: prefix })).toBe(0);
        const kept = await store.append(`${prefix}1`, [event(0)], {
          expectedRevision: 'no_stream',
        });
        const other = await store.append(stream('other-'), [event(1)], {
          expectedRevision: 'no_stream',
        });
        expect(await store.headPosition({ streamPrefix: prefix })).toBe(kept.position);
        expect(await store.headPosition()).toBeGreaterThanOrEqual(other.position);
      });
    });

    describe('subscribeToAll', () => {
      it(
        'catches up, then goes live, with no gap and no duplicate while appends race the switch',
        async () => {
          const before = 40;
          const during = 60;
          for (let i = 0; i < before; i += 4)
            await store.append(stream(`s-${i % 3}`), events(4, i));
          const subscription = store.subscribeToAll({
            fromPosition: 'start',
            streamPrefix: stream('s-'),
          });
          const seen: RecordedEvent[] = [];
          const collecting = (async () => {
            for await (const page of subscription) {
              expect(page.length).toBeGreaterThan(0);
              seen.push(...page);
              if (seen.length >= before + during) break;
            }
          })();
          await Promise.all(
            Array.from({ length: during }, (_, i) =>
              store.append(stream(`s-${i % 5}`), [event(before + i)]),
            ),
          );
          await collecting;
          await subscription.close();
          const numbers = seen.map((e) => (e.data as { n: number }).n).sort((a, b) => a - b);
          expect(numbers).toEqual(Array.from({ length: before + during }, (_, i) => i));
          assertStrictlyIncreasing(seen);
        },
        timeout,
      );

      it(
        "answers only the data of the types asked for, the others' null, live as in catch-up",
        async () => {
          const typed = (type: string, n: number) => event(n, { type, data: { n } });
          await store.append(stream('d'), [typed('test.kept', 0), typed('test.other', 1)]);
          const subscription = store.subscribeToAll({
            fromPosition: 'start',
            streamPrefix: stream('d'),
            dataTypes: ['test.kept'],
          });
          const seen: RecordedEvent[] = [];
          const collecting = (async () => {
            for await (const page of subscription) {
              seen.push(...page);
              if (seen.length >= 4) break;
            }
          })();
          await store.append(stream('d'), [typed('test.other', 2), typed('test.kept', 3)]);
          await collecting;
          await subscription.close();
          expect(seen.map((e) => [e.type, e.data])).toEqual([
            ['test.kept', { n: 0 }],
            ['test.other', null],
            ['test.other', null],
            ['test.kept', { n: 3 }],
          ]);
          expect(seen.map((e) => e.metadata)).toEqual(seen.map(() => ({ by: 'contract' })));
        },
        timeout,
      );

      it(
        'resumes after a checkpoint position without repeating it',
        async () => {
          const first = await store.append(stream('r'), events(3));
          const checkpoint = first.events[1].position;
          const subscription = store.subscribeToAll({
            fromPosition: checkpoint,
            streamPrefix: stream('r'),
          });
          const seen: RecordedEvent[] = [];
          const collecting = (async () => {
            for await (const page of subscription) {
              seen.push(...page);
              if (seen.length >= 2) break;
            }
          })();
          await store.append(stream('r'), events(1, 3));
          await collecting;
          await subscription.close();
          expect(seen.map((e) => (e.data as { n: number }).n)).toEqual([2, 3]);
        },
        timeout,
      );
    });

    describe('concurrency', () => {
      it('of N concurrent appenders with the same expected revision exactly one wins', async () => {
        await store.append(stream('race'), events(1));
        const contenders = 20;
        const outcomes = await Promise.allSettled(
          Array.from({ length: contenders }, (_, i) =>
            store.append(stream('race'), [event(100 + i)], { expectedRevision: 0 }),
          ),
        );
        const won = outcomes.filter((o) => o.status === 'fulfilled');
        const lost = outcomes.filter((o) => o.status === 'rejected');
        expect(won).toHaveLength(1);
        expect(lost).toHaveLength(contenders - 1);
        for (const o of lost) {
          expect((o as PromiseRejectedResult).reason).toBeInstanceOf(WrongExpectedRevisionError);
        }
        expect(await store.readStream(stream('race'))).toHaveLength(2);
      });

      it('positions are strictly increasing across streams appended concurrently', async () => {
        await Promise.all(
          Array.from({ length: 30 }, (_, i) =>
            store.append(stream(`p-${i % 6}`), events(2, i * 2)),
          ),
        );
        const all = await store.readAll({ streamPrefix: stream('p-') });
        expect(all).toHaveLength(60);
        assertStrictlyIncreasing(all);
        for (let s = 0; s < 6; s += 1) {
          const revisions = all.filter((e) => e.stream === stream(`p-${s}`)).map((e) => e.revision);
          expect(revisions).toEqual(revisions.map((_, i) => i));
        }
      });
    });
  });
}

function assertStrictlyIncreasing(recorded: RecordedEvent[]): void {
  for (let i = 1; i < recorded.length; i += 1) {
    expect(recorded[i].position).toBeGreaterThan(recorded[i - 1].position);
  }
}
