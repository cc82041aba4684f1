/**
 * The EventStoreDB adapter's own translations, against a stubbed client (no server can run
 * where these tests run; the contract suite covers the rest against a real one). Client
 * errors are the client package's real classes, so the `instanceof` mapping is exercised.
 */
import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import {
  ANY,
  AccessDeniedError,
  BACKWARDS,
  END,
  FORWARDS,
  MaxAppendSizeExceededError,
  NO_STREAM,
  START,
  STREAM_EXISTS,
  StreamNotFoundError,
  UnavailableError,
  WrongExpectedVersionError,
  type AllStreamResolvedEvent,
  type AppendResult as EsdbAppendResult,
  type AppendToStreamOptions,
  type EventData,
  type ReadAllOptions as EsdbReadAllOptions,
  type ReadStreamOptions as EsdbReadStreamOptions,
  type ResolvedEvent,
} from '@kurrent/kurrentdb-client';
import {
  EsdbEventStore,
  IDEMPOTENCY_WINDOW,
  type EsdbClient,
  type EsdbSubscriptionSource,
} from './esdb.event-store';
import {
  AppendTooLargeError,
  EventIdConflictError,
  StoreUnavailableError,
  WrongExpectedRevisionError,
  type EventToAppend,
  type ExpectedRevision,
  type RecordedEvent,
} from './event-store.port';

const STREAM = 'run-1';

/** A stream held in memory that answers reads the way the server does. */
class StubClient implements EsdbClient {
  readonly recorded: ResolvedEvent[] = [];
  all: AllStreamResolvedEvent[] = [];
  subscription: EsdbSubscriptionSource | null = null;
  appendError: unknown = null;
  private nextPosition = 1000;

  readonly appendToStream = jest.fn(
    async (
      streamName: string,
      events: EventData[],
      _options?: AppendToStreamOptions,
    ): Promise<EsdbAppendResult> => {
      if (this.appendError !== null) throw this.appendError;
      for (const event of events) this.record(streamName, event.id, event.type, event.data);
      return {
        success: true,
        nextExpectedRevision: BigInt(this.recorded.length - 1),
        position: { commit: BigInt(this.nextPosition), prepare: BigInt(this.nextPosition) },
      };
    },
  );

  readonly readStream = jest.fn(
    (streamName: string, options: EsdbReadStreamOptions = {}): AsyncIterable<ResolvedEvent> => {
      const recorded = this.recorded;
      return (async function* () {
        if (recorded.length === 0) throw new StreamNotFoundError(undefined, streamName);
        const backwards = options.direction === BACKWARDS;
        const from = options.fromRevision ?? (backwards ? END : START);
        const start = from === START ? 0 : from === END ? recorded.length - 1 : Number(from);
        const max = Number(options.maxCount ?? Number.MAX_SAFE_INTEGER);
        const slice = backwards
          ? recorded.slice(Math.max(0, start - max + 1), start + 1).reverse()
          : recorded.slice(start, start + max);
        yield* slice;
      })();
    },
  );

  readonly readAll = jest.fn((_options?: EsdbReadAllOptions) => {
    const all = this.all;
    return (async function* () {
      yield* all;
    })();
  });

  readonly subscribeToAll = jest.fn(() => {
    if (!this.subscription) throw new Error('no subscription stubbed');
    return this.subscription;
  });

  readonly dispose = jest.fn(async () => undefined);

  record(stream: string, id: string, type: string, data: unknown): ResolvedEvent {
    const position = (this.nextPosition += 100);
    const entry = resolved(stream, this.recorded.length, position, { id, type, data });
    this.recorded.push(entry);
    return entry;
  }
}

function resolved(
  stream: string,
  revision: number,
  position: number,
  event: { id: string; type: string; data: unknown },
): AllStreamResolvedEvent {
  return {
    event: {
      streamId: stream,
      id: event.id,
      isJson: true,
      revision: BigInt(revision),
      type: event.type,
      created: new Date('2025-01-02T03:04:05.678Z'),
      data: event.data as Record<string, unknown>,
      metadata: { by: 'stub' },
      position: { commit: BigInt(position), prepare: BigInt(position) },
    },
    commitPosition: BigInt(position),
  };
}

function event(n: number): EventToAppend {
  return { id: randomUUID(), type: 'test.happened', data: { n }, metadata: { by: 'test' } };
}

function setUp(): { client: StubClient; store: EsdbEventStore } {
  const client = new StubClient();
  return { client, store: new EsdbEventStore(client) };
}

describe('EsdbEventStore (stubbed client)', () => {
  describe('expected revision', () => {
    it.each<[ExpectedRevision | undefined, unknown]>([
      [undefined, ANY],
      ['any', ANY],
      ['no_stream', NO_STREAM],
      ['stream_exists', STREAM_EXISTS],
      [5, 5n],
    ])('%p is sent as stream state %p', async (expectedRevision, streamState) => {
      const { client, store } = setUp();
      if (typeof expectedRevision === 'number') {
        for (let i = 0; i <= expectedRevision; i += 1) client.record(STREAM, randomUUID(), 't', {});
      }
      await store.append(STREAM, [event(1)], { expectedRevision });
      expect(client.appendToStream).toHaveBeenCalledTimes(1);
      expect(client.appendToStream.mock.calls[0][2]).toEqual({ streamState });
    });

    it('a negative or fractional revision is refused before anything is sent', async () => {
      const { client, store } = setUp();
      await expect(store.append(STREAM, [event(1)], { expectedRevision: -1 })).rejects.toThrow(
        RangeError,
      );
      await expect(store.append(STREAM, [event(1)], { expectedRevision: 1.5 })).rejects.toThrow(
        RangeError,
      );
      expect(client.appendToStream).not.toHaveBeenCalled();
    });

    it('maps a wrong expected version with a numeric actual revision', async () => {
      const { client, store } = setUp();
      client.appendError = new WrongExpectedVersionError(undefined, {
        streamName: STREAM,
        expected: 1n,
        current: 4n,
      });
      const error = await store
        .append(STREAM, [event(1)], { expectedRevision: 1 })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(WrongExpectedRevisionError);
      expect(error).toMatchObject({ stream: STREAM, expected: 1, actual: 4 });
    });

    it('maps a wrong expected version on a missing stream to actual no_stream', async () => {
      const { client, store } = setUp();
      client.appendError = new WrongExpectedVersionError(undefined, {
        streamName: STREAM,
        expected: STREAM_EXISTS,
        current: NO_STREAM,
      });
      const error = await store
        .append(STREAM, [event(1)], { expectedRevision: 'stream_exists' })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(WrongExpectedRevisionError);
      expect(error).toMatchObject({ expected: 'stream_exists', actual: 'no_stream' });
    });

    it('maps a refusal answered as a result (throwOnAppendFailure=false)', async () => {
      const { client, store } = setUp();
      client.appendToStream.mockResolvedValueOnce({ success: false, nextExpectedRevision: -1n });
      await expect(store.append(STREAM, [event(1)], { expectedRevision: 3 })).rejects.toMatchObject(
        { name: 'WrongExpectedRevisionError', expected: 3, actual: 'no_stream' },
      );
    });
  });

  describe('errors', () => {
    it('maps MaxAppendSizeExceeded to AppendTooLargeError naming the server limit', async () => {
      const { client, store } = setUp();
      client.appendError = MaxAppendSizeExceededError.fromMaxAppendSize(1_048_576);
      const error = await store.append(STREAM, [event(1)]).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AppendTooLargeError);
      expect(error).toMatchObject({ stream: STREAM, limitBytes: 1_048_576 });
      expect((error as Error).message).toContain("server's MaxAppendSize of 1048576 bytes");
    });

    it('maps an unavailable server to StoreUnavailableError keeping the cause', async () => {
      const { client, store } = setUp();
      const cause = new UnavailableError(undefined, 'connect ECONNREFUSED 127.0.0.1:2113');
      client.appendError = cause;
      const error = await store.append(STREAM, [event(1)]).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as Error).cause).toBe(cause);
      expect((error as Error).message).toContain('ECONNREFUSED');
    });

    it('rethrows any other error unchanged', async () => {
      const { client, store } = setUp();
      const denied = new AccessDeniedError(undefined, 'access denied');
      client.appendError = denied;
      await expect(store.append(STREAM, [event(1)])).rejects.toBe(denied);
      const boom = new TypeError('boom');
      client.appendError = boom;
      await expect(store.append(STREAM, [event(1)])).rejects.toBe(boom);
    });

    it('answers an empty list for a stream that does not exist', async () => {
      const { store } = setUp();
      expect(await store.readStream('missing')).toEqual([]);
    });
  });

  describe('idempotency', () => {
    it.each<ExpectedRevision>(['no_stream', 'any', 'stream_exists'])(
      're-appending recorded ids (expected %p) answers the originals and writes nothing',
      async (expectedRevision) => {
        const { client, store } = setUp();
        const batch = [event(1), event(2)];
        const first = await store.append(STREAM, batch, { expectedRevision: 'no_stream' });
        client.record(STREAM, randomUUID(), 'other', {});
        client.appendToStream.mockClear();
        const again = await store.append(STREAM, batch, { expectedRevision });
        expect(again).toEqual({ ...first, idempotent: true });
        expect(first.idempotent).toBe(false);
        expect(client.appendToStream).not.toHaveBeenCalled();
        expect(client.recorded).toHaveLength(3);
      },
    );

    it('looks for a numeric expectation right after the expected revision', async () => {
      const { client, store } = setUp();
      client.record(STREAM, randomUUID(), 't', {});
      const batch = [event(1), event(2)];
      const first = await store.append(STREAM, batch, { expectedRevision: 0 });
      client.appendToStream.mockClear();
      const again = await store.append(STREAM, batch, { expectedRevision: 0 });
      expect(again.events).toEqual(first.events);
      expect(client.appendToStream).not.toHaveBeenCalled();
      expect(client.readStream).toHaveBeenLastCalledWith(STREAM, {
        direction: FORWARDS,
        fromRevision: 1n,
        maxCount: 2,
      });
    });

    it('readByIds answers the recorded ones in the order asked, from the same window a retry is looked for in', async () => {
      const { client, store } = setUp();
      const batch = [event(1), event(2), event(3)];
      await store.append(STREAM, batch);
      client.readStream.mockClear();
      const found = await store.readByIds(STREAM, [batch[2].id, randomUUID(), batch[0].id]);
      expect(found.map((e) => [e.id, e.revision])).toEqual([
        [batch[2].id, 2],
        [batch[0].id, 0],
      ]);
      expect(client.readStream).toHaveBeenCalledWith(STREAM, {
        direction: BACKWARDS,
        fromRevision: END,
        maxCount: IDEMPOTENCY_WINDOW,
      });
      expect(await store.readByIds(STREAM, [])).toEqual([]);
    });

    it('looks back a bounded window for any', async () => {
      const { client, store } = setUp();
      await store.append(STREAM, [event(1)]);
      expect(client.readStream.mock.calls[0][1]).toEqual({
        direction: BACKWARDS,
        fromRevision: END,
        maxCount: IDEMPOTENCY_WINDOW,
      });
    });

    it('the same id with different data is a conflict and nothing is sent', async () => {
      const { client, store } = setUp();
      const original = event(1);
      await store.append(STREAM, [original]);
      client.appendToStream.mockClear();
      const error = await store
        .append(STREAM, [{ ...original, data: { n: 2 } }])
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EventIdConflictError);
      expect(error).toMatchObject({ stream: STREAM, eventId: original.id });
      expect(client.appendToStream).not.toHaveBeenCalled();
    });

    it('the same id with another type is a conflict', async () => {
      const { store } = setUp();
      const original = event(1);
      await store.append(STREAM, [original]);
      await expect(
        store.append(STREAM, [{ ...original, type: 'test.other' }]),
      ).rejects.toBeInstanceOf(EventIdConflictError);
    });

    it('the same data with keys in another order is the same content', async () => {
      const { client, store } = setUp();
      const original: EventToAppend = { ...event(1), data: { a: 1, b: { c: 2, d: 3 } } };
      await store.append(STREAM, [original]);
      client.appendToStream.mockClear();
      const again = await store.append(STREAM, [
        { ...original, data: { b: { d: 3, c: 2 }, a: 1 } },
      ]);
      expect(again.idempotent).toBe(true);
      expect(client.appendToStream).not.toHaveBeenCalled();
    });

    it('a batch only partly recorded is a conflict naming the recorded id', async () => {
      const { client, store } = setUp();
      const recorded = event(1);
      await store.append(STREAM, [recorded]);
      client.appendToStream.mockClear();
      const error = await store.append(STREAM, [recorded, event(2)]).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EventIdConflictError);
      expect(error).toMatchObject({ eventId: recorded.id });
      expect(client.appendToStream).not.toHaveBeenCalled();
    });

    it('an id twice in one batch is a conflict', async () => {
      const { client, store } = setUp();
      const twice = event(1);
      await expect(store.append(STREAM, [twice, twice])).rejects.toMatchObject({
        name: 'EventIdConflictError',
        eventId: twice.id,
      });
      expect(client.appendToStream).not.toHaveBeenCalled();
    });
  });

  describe('mapping recorded events', () => {
    it('answers each appended event with its own revision and log position', async () => {
      const { client, store } = setUp();
      client.record(STREAM, randomUUID(), 't', {});
      const batch = [event(1), event(2)];
      const result = await store.append(STREAM, batch);
      const recorded = await store.readStream(STREAM, { fromRevision: 1 });
      expect(result).toEqual({
        firstRevision: 1,
        lastRevision: 2,
        position: recorded[1].position,
        events: recorded.map(({ id, revision, position }) => ({ id, revision, position })),
        idempotent: false,
      });
      expect(recorded.map((e) => e.id)).toEqual(batch.map((e) => e.id));
      expect(recorded[0]).toMatchObject({
        stream: STREAM,
        type: 'test.happened',
        data: { n: 1 },
        metadata: { by: 'stub' },
        recordedAt: '2025-01-02T03:04:05.678Z',
      });
      expect(typeof recorded[0].position).toBe('number');
    });

    it('answers null for the data of the types not asked for, every event still read', async () => {
      const { client, store } = setUp();
      client.record(STREAM, randomUUID(), 'run.started', { threadId: 't' });
      client.record(STREAM, randomUUID(), 'model.call', { callId: 'c1' });
      client.record(STREAM, randomUUID(), 'tool.finished', { toolCallId: 'x' });
      const recorded = await store.readStream(STREAM, { dataTypes: ['tool.finished'] });
      expect(recorded.map((e) => [e.revision, e.type, e.data])).toEqual([
        [0, 'run.started', null],
        [1, 'model.call', null],
        [2, 'tool.finished', { toolCallId: 'x' }],
      ]);
    });

    it('readAll sends a server-side prefix filter and drops system events', async () => {
      const { client, store } = setUp();
      client.all = [
        resolved('run-1', 0, 10, { id: 'a', type: 'test.happened', data: {} }),
        resolved('run-1', 1, 20, { id: 'b', type: '$metadata', data: {} }),
        resolved('$stats-1', 0, 30, { id: 'c', type: 'stats', data: {} }),
        resolved('run-2', 0, 40, { id: 'd', type: 'test.happened', data: {} }),
      ];
      const read = await store.readAll({ fromPosition: 15, streamPrefix: 'run-', maxCount: 9 });
      expect(read.map((e) => [e.id, e.position])).toEqual([
        ['a', 10],
        ['d', 40],
      ]);
      expect(client.readAll).toHaveBeenCalledWith(
        expect.objectContaining({
          direction: FORWARDS,
          fromPosition: { commit: 15n, prepare: 15n },
          maxCount: 9,
          filter: expect.objectContaining({ prefixes: ['run-'] }),
        }),
      );
    });

    it('headPosition is the newest user event, 0 on an empty log', async () => {
      const { client, store } = setUp();
      expect(await store.headPosition()).toBe(0);
      client.all = [resolved('run-1', 3, 4242, { id: 'a', type: 'test.happened', data: {} })];
      expect(await store.headPosition()).toBe(4242);
      expect(client.readAll).toHaveBeenLastCalledWith(
        expect.objectContaining({ direction: BACKWARDS, fromPosition: END, maxCount: 1 }),
      );
    });

    it('headPosition of a stream prefix asks the server for the newest event of those streams', async () => {
      const { client, store } = setUp();
      client.all = [resolved('run-1', 3, 4242, { id: 'a', type: 'test.happened', data: {} })];
      expect(await store.headPosition({ streamPrefix: 'run-' })).toBe(4242);
      expect(client.readAll).toHaveBeenLastCalledWith(
        expect.objectContaining({
          direction: BACKWARDS,
          fromPosition: END,
          maxCount: 1,
          filter: expect.objectContaining({ prefixes: ['run-'] }),
        }),
      );
    });
  });

  describe('subscribeToAll', () => {
    function stubSubscription(): PassThrough & EsdbSubscriptionSource {
      const stream = new PassThrough({ objectMode: true });
      return Object.assign(stream, { unsubscribe: jest.fn(async () => undefined) });
    }

    it('yields user events after the checkpoint and ends when closed', async () => {
      const { client, store } = setUp();
      const source = stubSubscription();
      client.subscription = source;
      const subscription = store.subscribeToAll({ fromPosition: 500, streamPrefix: 'run-' });
      expect(client.subscribeToAll).toHaveBeenCalledWith(
        expect.objectContaining({ fromPosition: { commit: 500n, prepare: 500n } }),
      );
      source.write(resolved('run-1', 0, 600, { id: 'a', type: 'test.happened', data: {} }));
      source.write(resolved('$stats', 0, 700, { id: 'b', type: '$statsCollected', data: {} }));
      source.write(resolved('run-1', 1, 800, { id: 'c', type: 'test.happened', data: {} }));
      const seen: RecordedEvent[] = [];
      const collecting = (async () => {
        for await (const page of subscription) {
          seen.push(...page);
          // Closing while the loop waits for a next event must end it, not hang or throw.
          if (seen.length === 2) setImmediate(() => void subscription.close());
        }
      })();
      await collecting;
      expect(seen.map((e) => e.id)).toEqual(['a', 'c']);
      expect(source.unsubscribe).toHaveBeenCalledTimes(1);
      expect(source.destroyed).toBe(true);
    });

    it('answers null for the data of the types not asked for', async () => {
      const { client, store } = setUp();
      const source = stubSubscription();
      client.subscription = source;
      const subscription = store.subscribeToAll({ dataTypes: ['run.started'] });
      source.write(resolved('run-1', 0, 600, { id: 'a', type: 'run.started', data: { n: 1 } }));
      source.write(resolved('run-1', 1, 700, { id: 'b', type: 'model.call', data: { n: 2 } }));
      const seen: RecordedEvent[] = [];
      for await (const page of subscription) {
        seen.push(...page);
        if (seen.length === 2) break;
      }
      expect(seen.map((e) => [e.id, e.data])).toEqual([
        ['a', { n: 1 }],
        ['b', null],
      ]);
    });

    it('maps start and end, and a failing server to StoreUnavailableError', async () => {
      const { client, store } = setUp();
      client.subscription = stubSubscription();
      store.subscribeToAll();
      expect(client.subscribeToAll).toHaveBeenLastCalledWith(
        expect.objectContaining({ fromPosition: START }),
      );
      const failing = stubSubscription();
      client.subscription = failing;
      const subscription = store.subscribeToAll({ fromPosition: 'end' });
      expect(client.subscribeToAll).toHaveBeenLastCalledWith(
        expect.objectContaining({ fromPosition: END }),
      );
      failing.destroy(new UnavailableError(undefined, 'connection lost'));
      const error = await (async () => {
        for await (const _ of subscription) {
          // no event is expected before the failure
        }
      })().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
    });

    it('close() of the store closes its open subscriptions and disposes the client', async () => {
      const { client, store } = setUp();
      const source = stubSubscription();
      client.subscription = source;
      store.subscribeToAll();
      await store.close();
      expect(source.unsubscribe).toHaveBeenCalledTimes(1);
      expect(client.dispose).toHaveBeenCalledTimes(1);
    });
  });
});
