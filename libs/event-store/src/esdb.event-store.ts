/**
 * The EventStore port on EventStoreDB / KurrentDB, through `@kurrent/kurrentdb-client`.
 * Owns the translation between the port and the client: numbers for ESDB's bigint revisions
 * and log positions, the port's expected revisions as stream states, the port's idempotency
 * rule (checked here, because the server's own is a best-effort cache), and client errors
 * as the port's errors. System events (`$` types and streams) never reach the port.
 */
import {
  ANY,
  BACKWARDS,
  DeadlineExceededError,
  END,
  FORWARDS,
  KurrentDBClient,
  MaxAppendSizeExceededError,
  NO_STREAM,
  START,
  STREAM_EXISTS,
  StreamNotFoundError,
  UnavailableError,
  WrongExpectedVersionError,
  excludeSystemEvents,
  jsonEvent,
  streamNameFilter,
  type AllStreamResolvedEvent,
  type AppendResult as EsdbAppendResult,
  type AppendStreamState,
  type AppendToStreamOptions,
  type CurrentStreamState,
  type EventData,
  type Filter,
  type JSONType,
  type Position,
  type ReadAllOptions as EsdbReadAllOptions,
  type ReadPosition,
  type ReadStreamOptions as EsdbReadStreamOptions,
  type ResolvedEvent,
  type SubscribeToAllOptions,
} from '@kurrent/kurrentdb-client';
import { canonicalJson } from '@runledger/domain';
import {
  appendResult,
  AppendTooLargeError,
  EventIdConflictError,
  PAGE_CHARS,
  StoreUnavailableError,
  WrongExpectedRevisionError,
  type AppendOptions,
  type AppendResult,
  type EventStore,
  type EventToAppend,
  type ExpectedRevision,
  type HeadPositionOptions,
  isOfThread,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  type Subscription,
} from './event-store.port';

/** Events read per page while looking for one thread's events. */
const THREAD_SCAN_PAGE = 1000;

/** What the adapter needs of a subscription: the client's is a Node Readable. */
export interface EsdbSubscriptionSource extends AsyncIterable<AllStreamResolvedEvent> {
  unsubscribe(): Promise<void>;
  destroy(error?: Error): unknown;
}

/** The part of `KurrentDBClient` the adapter uses, so a test can hand in a stub. */
export interface EsdbClient {
  appendToStream(
    streamName: string,
    events: EventData[],
    options?: AppendToStreamOptions,
  ): Promise<EsdbAppendResult>;
  readStream(streamName: string, options?: EsdbReadStreamOptions): AsyncIterable<ResolvedEvent>;
  readAll(options?: EsdbReadAllOptions): AsyncIterable<AllStreamResolvedEvent>;
  subscribeToAll(options?: SubscribeToAllOptions): EsdbSubscriptionSource;
  dispose(): Promise<void>;
}

/**
 * How far back an `any` or `stream_exists` append looks for its own ids. A retry normally
 * lands within a few events of the first attempt; a batch re-sent after more than this many
 * other events were appended to the run is not recognised and would be recorded again.
 */
export const IDEMPOTENCY_WINDOW = 1000;

/** Stream reads on servers before 22.6 report this instead of a log position. */
const NO_POSITION = 2n ** 64n - 1n;

export class EsdbEventStore implements EventStore {
  private readonly subscriptions = new Set<EsdbSubscription>();

  constructor(private readonly client: EsdbClient) {}

  /** `esdb://host:2113?tls=false`, or `kurrentdb://…`: the client's connection string. */
  static connect(connectionString: string): EsdbEventStore {
    return new EsdbEventStore(KurrentDBClient.connectionString(connectionString));
  }

  async append(
    stream: string,
    events: EventToAppend[],
    options: AppendOptions = {},
  ): Promise<AppendResult> {
    if (events.length === 0) throw new RangeError('an append needs at least one event');
    const expected = options.expectedRevision ?? 'any';
    const streamState = toStreamState(expected);
    const replayed = await this.findRecorded(stream, events, expected);
    if (replayed) return replayed;

    let result: EsdbAppendResult;
    try {
      result = await this.client.appendToStream(stream, events.map(toEventData), { streamState });
    } catch (error) {
      throw toAppendError(stream, expected, error);
    }
    // Only a client built with throwOnAppendFailure=false answers a refusal this way.
    if (!result.success) {
      throw new WrongExpectedRevisionError(stream, expected, toActual(result.nextExpectedRevision));
    }
    return this.readBack(stream, events, Number(result.nextExpectedRevision));
  }

  /**
   * The port's idempotency rule. The ids are looked for where a retry of this batch would
   * have put them: right after the expected revision, from the start of a stream expected
   * not to exist, or else among the last IDEMPOTENCY_WINDOW events of the stream.
   */
  private async findRecorded(
    stream: string,
    batch: EventToAppend[],
    expected: ExpectedRevision,
  ): Promise<AppendResult | null> {
    const seen = new Set<string>();
    for (const event of batch) {
      if (seen.has(event.id)) {
        throw new EventIdConflictError(stream, event.id, 'appears twice in the batch');
      }
      seen.add(event.id);
    }
    const window = await this.readStreamOrEmpty(stream, idempotencyWindow(expected, batch.length));
    const byId = new Map(window.map((event) => [event.id, event]));
    const found = batch.map((event) => byId.get(event.id));
    const knownIndex = found.findIndex((event) => event !== undefined);
    if (knownIndex === -1) return null;

    const originals: RecordedEvent[] = [];
    batch.forEach((event, i) => {
      const recorded = found[i];
      if (recorded === undefined) {
        throw new EventIdConflictError(
          stream,
          batch[knownIndex].id,
          'is recorded, but the rest of this batch is not',
        );
      }
      if (
        recorded.type !== event.type ||
        canonicalJson(recorded.data) !== canonicalJson(event.data)
      ) {
        throw new EventIdConflictError(
          stream,
          event.id,
          `was recorded at revision ${recorded.revision} with different content`,
        );
      }
      originals.push(recorded);
    });
    return appendResult(originals, true);
  }

  /**
   * The client answers one position for the whole batch; the port wants each event's, so the
   * batch is read back from the revisions the server just gave it.
   */
  private async readBack(
    stream: string,
    batch: EventToAppend[],
    lastRevision: number,
  ): Promise<AppendResult> {
    const firstRevision = lastRevision - batch.length + 1;
    const recorded = await this.readStreamOrEmpty(stream, {
      direction: FORWARDS,
      fromRevision: BigInt(firstRevision),
      maxCount: batch.length,
    });
    const matches =
      recorded.length === batch.length && recorded.every((event, i) => event.id === batch[i].id);
    if (!matches) {
      throw new Error(
        `stream ${stream}: EventStoreDB acknowledged the append at revisions ` +
          `${firstRevision}..${lastRevision}, but reading them back found other events there`,
      );
    }
    return appendResult(recorded, false);
  }

  async readStream(stream: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    if (options.maxCount === 0) return [];
    const backwards = options.direction === 'backwards';
    const events = await this.readStreamOrEmpty(
      stream,
      {
        direction: backwards ? BACKWARDS : FORWARDS,
        fromRevision:
          options.fromRevision === undefined
            ? backwards
              ? END
              : START
            : BigInt(options.fromRevision),
        ...(options.maxCount === undefined ? {} : { maxCount: options.maxCount }),
      },
      options.maxChars,
    );
    return options.dataTypes === undefined ? events : events.map(selectData(options.dataTypes));
  }

  private async readStreamOrEmpty(
    stream: string,
    options: EsdbReadStreamOptions,
    maxChars?: number,
  ): Promise<RecordedEvent[]> {
    try {
      return await collect(this.client.readStream(stream, options), maxChars);
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw toStoreError(error);
    }
  }

  /** Looks among the stream's last IDEMPOTENCY_WINDOW events, where a retry's ids are. */
  async readByIds(stream: string, ids: readonly string[]): Promise<RecordedEvent[]> {
    if (ids.length === 0) return [];
    const window = await this.readStreamOrEmpty(stream, {
      direction: BACKWARDS,
      fromRevision: END,
      maxCount: IDEMPOTENCY_WINDOW,
    });
    const byId = new Map(window.map((event) => [event.id, event]));
    return ids.flatMap((id) => {
      const event = byId.get(id);
      return event === undefined ? [] : [event];
    });
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    if (options.maxCount === 0) return [];
    const { thread, stream } = options;
    if (thread) return this.readAllWhere(options, (event) => isOfThread(event, thread));
    if (stream !== undefined) {
      // The server's filter takes a prefix: "run-t-r1" would also pass "run-t-r10".
      return this.readAllWhere({ ...options, streamPrefix: stream }, (e) => e.stream === stream);
    }
    const prefix = options.streamPrefix;
    try {
      return await collect(
        this.client.readAll({
          direction: FORWARDS,
          fromPosition: toReadPosition(options.fromPosition ?? 0),
          filter: userEventsFilter(prefix),
          ...(options.maxCount === undefined ? {} : { maxCount: options.maxCount }),
        }),
        options.maxChars,
        (event) => isVisible(event, prefix),
      );
    } catch (error) {
      throw toStoreError(error);
    }
  }

  /**
   * EventStoreDB has no index on metadata (a server-side projection would be one, but this
   * adapter adds nothing to the server), and its filter takes stream prefixes: a thread's
   * events, or one stream's, are found by reading the prefixed log in pages (bounded by count
   * and by PAGE_CHARS) and keeping those `wanted` takes, until `maxCount` of them, `maxChars`
   * of their JSON after the first, or the end.
   */
  private async readAllWhere(
    options: ReadAllOptions,
    wanted: (event: RecordedEvent) => boolean,
  ): Promise<RecordedEvent[]> {
    const most = options.maxCount ?? Number.POSITIVE_INFINITY;
    const maxChars = options.maxChars ?? Number.POSITIVE_INFINITY;
    const found: RecordedEvent[] = [];
    let chars = 0;
    let from = options.fromPosition ?? 0;
    let seen = -1;
    for (;;) {
      const page = await this.readAll({
        fromPosition: from,
        maxCount: THREAD_SCAN_PAGE,
        maxChars: PAGE_CHARS,
        streamPrefix: options.streamPrefix,
      });
      // Each page but the first starts at the last one's final event (positions are read
      // inclusively), and a budget never ends a page before the event after its first: a page
      // with nothing new is the end.
      const fresh = page.filter((event) => event.position > seen);
      if (fresh.length === 0) return found;
      for (const event of fresh) {
        seen = event.position;
        if (!wanted(event)) continue;
        if (found.length > 0 && Number.isFinite(maxChars)) chars += jsonChars(event);
        found.push(event);
        if (found.length >= most || chars >= maxChars) return found;
      }
      from = seen;
    }
  }

  subscribeToAll(options: SubscribeOptions = {}): Subscription {
    const from = options.fromPosition ?? 'start';
    const source = this.client.subscribeToAll({
      // The server's subscription starts after the given position, as the port's does.
      fromPosition: from === 'start' ? START : from === 'end' ? END : toReadPosition(from),
      filter: userEventsFilter(options.streamPrefix),
    });
    const subscription = new EsdbSubscription(
      source,
      options.streamPrefix,
      options.dataTypes === undefined ? (event) => event : selectData(options.dataTypes),
      () => this.subscriptions.delete(subscription),
    );
    this.subscriptions.add(subscription);
    return subscription;
  }

  /**
   * Newest user event, not the log's tail: the server keeps writing system events (stats,
   * epochs), which no reader of the port ever sees and so could never catch up to.
   */
  async headPosition(options: HeadPositionOptions = {}): Promise<number> {
    try {
      const [last] = await collect(
        this.client.readAll({
          direction: BACKWARDS,
          fromPosition: END,
          maxCount: 1,
          filter: userEventsFilter(options.streamPrefix),
        }),
      );
      return last?.position ?? 0;
    } catch (error) {
      throw toStoreError(error);
    }
  }

  async ping(): Promise<void> {
    try {
      await collect(this.client.readAll({ direction: BACKWARDS, fromPosition: END, maxCount: 1 }));
    } catch (error) {
      throw toStoreError(error);
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.subscriptions].map((subscription) => subscription.close()));
    await this.client.dispose();
  }
}

/** Catch-up then live is the server's; this adapts its Readable to the port's Subscription. */
class EsdbSubscription implements Subscription {
  private closed = false;

  constructor(
    private readonly source: EsdbSubscriptionSource,
    private readonly prefix: string | undefined,
    private readonly select: (event: RecordedEvent) => RecordedEvent,
    private readonly onClose: () => void,
  ) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<readonly RecordedEvent[], void, undefined> {
    try {
      // The server's stream hands over one event at a time: a page each.
      for await (const resolved of this.source) {
        const event = toRecorded(resolved);
        if (event && isVisible(event, this.prefix)) yield [this.select(event)];
      }
    } catch (error) {
      // close() destroys the stream under a pending read: that ends the iteration, it is not a failure.
      if (!this.closed) throw toStoreError(error);
    } finally {
      await this.close();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.onClose();
    try {
      await this.source.unsubscribe();
    } catch {
      // The call never started (no connection); that failure already reached the iterator.
    } finally {
      // Ends an iteration blocked waiting for the next event; cancelling alone does not.
      this.source.destroy();
    }
  }
}

function toStreamState(expected: ExpectedRevision): AppendStreamState {
  switch (expected) {
    case 'any':
      return ANY;
    case 'no_stream':
      return NO_STREAM;
    case 'stream_exists':
      return STREAM_EXISTS;
    default:
      if (!Number.isSafeInteger(expected) || expected < 0) {
        throw new RangeError(`expected revision must be a non-negative integer, got ${expected}`);
      }
      return BigInt(expected);
  }
}

function idempotencyWindow(expected: ExpectedRevision, batchLength: number): EsdbReadStreamOptions {
  switch (expected) {
    case 'no_stream':
      return { direction: FORWARDS, fromRevision: START, maxCount: batchLength };
    case 'any':
    case 'stream_exists':
      return {
        direction: BACKWARDS,
        fromRevision: END,
        maxCount: Math.max(IDEMPOTENCY_WINDOW, batchLength),
      };
    default:
      return { direction: FORWARDS, fromRevision: BigInt(expected + 1), maxCount: batchLength };
  }
}

function toEventData(event: EventToAppend): EventData {
  return jsonEvent({
    id: event.id,
    type: event.type,
    // The client serialises data with JSON.stringify; its JSONType is narrower than the port's.
    data: event.data as JSONType,
    metadata: event.metadata,
  });
}

/** Positions of user events are single-record commits, so commit and prepare are the same. */
function toReadPosition(position: number): ReadPosition {
  if (position === 0) return START;
  const at = BigInt(position);
  return { commit: at, prepare: at };
}

function userEventsFilter(prefix: string | undefined): Filter {
  return prefix ? streamNameFilter({ prefixes: [prefix] }) : excludeSystemEvents();
}

function isVisible(event: RecordedEvent, prefix: string | undefined): boolean {
  if (event.type.startsWith('$') || event.stream.startsWith('$')) return false;
  return prefix ? event.stream.startsWith(prefix) : true;
}

function toActual(current: CurrentStreamState): number | 'no_stream' {
  return current === 'no_stream' || current < 0n ? 'no_stream' : Number(current);
}

function toAppendError(stream: string, expected: ExpectedRevision, error: unknown): unknown {
  if (error instanceof WrongExpectedVersionError) {
    // The caller's expectation, not the error's: older servers report it as a magic number.
    return new WrongExpectedRevisionError(stream, expected, toActual(error.actualState));
  }
  if (error instanceof MaxAppendSizeExceededError) {
    return new AppendTooLargeError(
      stream,
      error.maxAppendSize,
      `EventStoreDB refused the append: batch exceeds the server's MaxAppendSize of ` +
        `${error.maxAppendSize} bytes; nothing was written`,
    );
  }
  return toStoreError(error);
}

/** The store not answering becomes the port's error; anything else is the caller's to see. */
function toStoreError(error: unknown): unknown {
  const unreachable =
    error instanceof UnavailableError ||
    error instanceof DeadlineExceededError ||
    // Cluster discovery gives up with a plain Error.
    (error instanceof Error && error.message.startsWith('Failed to discover after'));
  if (!unreachable) return error;
  const reason = error instanceof Error && error.message ? `: ${error.message}` : '';
  return new StoreUnavailableError(`EventStoreDB did not answer${reason}`, { cause: error });
}

/**
 * The port's `dataTypes` for a server that sends every event whole: the other types' data is
 * dropped here, so that a reader sees the same events from either store.
 */
function selectData(dataTypes: readonly string[]): (event: RecordedEvent) => RecordedEvent {
  const withData = new Set(dataTypes);
  return (event) => (withData.has(event.type) ? event : { ...event, data: null });
}

function toRecorded(resolved: ResolvedEvent | AllStreamResolvedEvent): RecordedEvent | null {
  const event = resolved.event;
  // A link whose target was deleted resolves to nothing.
  if (!event) return null;
  return {
    id: event.id,
    stream: event.streamId,
    type: event.type,
    revision: Number(event.revision),
    position: toPosition(event.position, resolved.commitPosition, event.id),
    data: event.data,
    metadata: isRecord(event.metadata) ? event.metadata : {},
    recordedAt: event.created.toISOString(),
  };
}

function toPosition(
  position: Position | undefined,
  commitPosition: bigint | undefined,
  id: string,
): number {
  const commit = position?.commit ?? commitPosition;
  if (commit === undefined || commit === NO_POSITION) {
    throw new Error(
      `EventStoreDB returned event ${id} without its log position; ` +
        'stream reads report positions from server 22.6 on',
    );
  }
  return Number(commit);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    !(value instanceof Uint8Array)
  );
}

/**
 * The events read that `keep` keeps, until those after the first hold `maxChars` characters
 * of JSON, the one that reaches it included (PageBudget); leaving the loop cancels the
 * server's read, so nothing more is received.
 */
async function collect(
  source: AsyncIterable<ResolvedEvent | AllStreamResolvedEvent>,
  maxChars = Number.POSITIVE_INFINITY,
  keep: (event: RecordedEvent) => boolean = () => true,
): Promise<RecordedEvent[]> {
  const events: RecordedEvent[] = [];
  let chars = 0;
  for await (const resolved of source) {
    const event = toRecorded(resolved);
    if (!event || !keep(event)) continue;
    if (events.length > 0 && Number.isFinite(maxChars)) chars += jsonChars(event);
    events.push(event);
    if (chars >= maxChars) break;
  }
  return events;
}

/** The event's data and metadata as JSON, in characters: what a page budget counts. */
function jsonChars(event: RecordedEvent): number {
  return JSON.stringify(event.data).length + JSON.stringify(event.metadata).length;
}
