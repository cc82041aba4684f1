/**
 * The event store port, split into a reader and a writer (as Eventuous does). Adapters:
 * `sqlite.event-store.ts` (embedded default) and `esdb.event-store.ts` (EventStoreDB /
 * KurrentDB). Both pass `event-store.contract.ts`.
 */

/** `any` appends whatever the stream holds; a number is the revision of the stream's last event. */
export type ExpectedRevision = number | 'no_stream' | 'stream_exists' | 'any';

export interface EventToAppend {
  id: string;
  type: string;
  data: unknown;
  metadata: Record<string, unknown>;
}

export interface RecordedEvent {
  id: string;
  stream: string;
  type: string;
  /** 0-based index of the event in its stream. */
  revision: number;
  /** Global, strictly increasing; every reader sees the same order. */
  position: number;
  data: unknown;
  metadata: Record<string, unknown>;
  /** ISO-8601 UTC. */
  recordedAt: string;
  /**
   * About how much memory the event's data and metadata take: the length of their stored
   * JSON, when the store knows it. Followers bound their batches by it.
   */
  size?: number;
}

export interface AppendResult {
  firstRevision: number;
  lastRevision: number;
  /** Position of the batch's last event. */
  position: number;
  events: { id: string; revision: number; position: number }[];
  /** True when every id was already recorded: nothing was written, the originals are answered. */
  idempotent: boolean;
}

/**
 * An append's answer from its events, in the batch's order. A batch re-sent in another order
 * is still the same events: its first and last revisions are the lowest and highest it
 * holds, and its position that of the latest.
 */
export function appendResult(
  events: readonly { id: string; revision: number; position: number }[],
  idempotent: boolean,
): AppendResult {
  let first = events[0];
  let last = events[0];
  for (const event of events) {
    if (event.revision < first.revision) first = event;
    if (event.revision > last.revision) last = event;
  }
  return {
    firstRevision: first.revision,
    lastRevision: last.revision,
    position: last.position,
    events: events.map(({ id, revision, position }) => ({ id, revision, position })),
    idempotent,
  };
}

export interface AppendOptions {
  expectedRevision?: ExpectedRevision;
}

/**
 * About what a page of events read at once may hold (characters of JSON, data and metadata),
 * beyond its last event: a page of events of a megabyte each is a few events, not hundreds
 * of megabytes in memory and one string too long to serialize. A page is read in one stretch
 * of its reader's event loop, and the client surface, the mirror and the SSE fan-out read
 * every event on the api's: at 4 MiB a page of non-ASCII text held it 60–130 ms.
 */
export const PAGE_CHARS = 1024 * 1024;

/** Bounds a read by the size of what it answers, not only by its count. */
export interface PageBudget {
  /**
   * Stops once the events after the first hold this many characters of JSON (data and
   * metadata), the event that reaches it included. The first is not counted, so a page read
   * from an event already seen (an inclusive position) still holds the event after it,
   * however large either is. A shorter page is then not the end: read on from its last event.
   */
  maxChars?: number;
}

/** Which events a read answers with their data. */
export interface DataSelection {
  /**
   * Only events of these types come with their data; every other one comes with `data: null`
   * (its revision, position and metadata as ever, its `size` without the data). The embedded
   * store then never reads the others' data: a fold that needs a few types' data reads a run
   * of megabyte model calls without their megabytes.
   */
  dataTypes?: readonly string[];
}

export interface ReadStreamOptions extends PageBudget, DataSelection {
  /** Inclusive. Defaults to 0 forwards, to the last event backwards. */
  fromRevision?: number;
  direction?: 'forwards' | 'backwards';
  maxCount?: number;
}

export interface ReadAllOptions extends PageBudget {
  /** Inclusive; 0 reads from the beginning. */
  fromPosition?: number;
  /**
   * The position of the last event the reader holds, when it resumes from it (usually
   * `fromPosition` itself). A page an unreadable event would leave with nothing past it
   * throws UnreadableEventError instead, naming that event; one at this position the reader
   * holds already (shown in its place), and the read goes on past it. Default: nothing held.
   */
  heldPosition?: number;
  /** Most events answered (after every filter). */
  maxCount?: number;
  streamPrefix?: string;
  /**
   * Only this stream's events, named exactly (a run's): the embedded store reads them through
   * the stream's own index, not the log after the position.
   */
  stream?: string;
  /**
   * Only events whose metadata names this tenant and thread (the server stamps both into
   * every run event). The embedded store reads them through an index.
   */
  thread?: ThreadFilter;
}

export interface ThreadFilter {
  tenantId: string;
  threadId: string;
}

/** Whether an event's metadata names the thread. */
export function isOfThread(event: RecordedEvent, thread: ThreadFilter): boolean {
  return event.metadata.tenantId === thread.tenantId && event.metadata.threadId === thread.threadId;
}

export interface HeadPositionOptions {
  /** Only streams whose name starts with this. */
  streamPrefix?: string;
}

export interface SubscribeOptions extends DataSelection {
  /** Exclusive: the subscription yields the events after this position (a checkpoint). */
  fromPosition?: number | 'start' | 'end';
  streamPrefix?: string;
}

/**
 * Catch-up then live; never skips or repeats an event across the switch. `close()` ends it.
 * Events come in pages (position order, never empty): what the store read at once, so a
 * follower handles a page without waiting between its events.
 */
export interface Subscription extends AsyncIterable<readonly RecordedEvent[]> {
  close(): Promise<void>;
}

export interface EventStoreWriter {
  /**
   * Appends a batch atomically. Ids already recorded in the stream with the same type and
   * data make the call idempotent (the originals are answered, nothing is written) whatever
   * the expected revision; an id recorded with other content is an `EventIdConflictError`.
   * Ids never clash across tenants (`eventIdScope` in libs/domain). Within a tenant, SQLite
   * refuses an id recorded in another of its streams; EventStoreDB, which has no index across
   * streams, checks ids within their stream.
   */
  append(stream: string, events: EventToAppend[], options?: AppendOptions): Promise<AppendResult>;
}

export interface EventStoreReader {
  readStream(stream: string, options?: ReadStreamOptions): Promise<RecordedEvent[]>;
  /**
   * The events of `stream` recorded under these ids, in the order of `ids`; an id the stream
   * does not hold is left out. Lets a caller recognise a retried batch without a second copy
   * of the idempotency rule.
   */
  readByIds(stream: string, ids: readonly string[]): Promise<RecordedEvent[]>;
  readAll(options?: ReadAllOptions): Promise<RecordedEvent[]>;
  subscribeToAll(options?: SubscribeOptions): Subscription;
  /** Position of the newest event in the log (or in the streams with the prefix), 0 when none. */
  headPosition(options?: HeadPositionOptions): Promise<number>;
}

export interface EventStore extends EventStoreReader, EventStoreWriter {
  /** Confirms the store answers; throws when it does not. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export const EVENT_STORE = Symbol('EVENT_STORE');

/** Whether an expectation holds for a stream whose last revision is `head` (undefined: no stream). */
export function expectationHolds(expected: ExpectedRevision, head: number | undefined): boolean {
  switch (expected) {
    case 'any':
      return true;
    case 'no_stream':
      return head === undefined;
    case 'stream_exists':
      return head !== undefined;
    default:
      return head === expected;
  }
}

export class WrongExpectedRevisionError extends Error {
  readonly code = 'wrong_expected_revision';
  constructor(
    readonly stream: string,
    readonly expected: ExpectedRevision,
    /** Revision of the stream's last event, or `no_stream`. */
    readonly actual: number | 'no_stream',
  ) {
    super(`stream ${stream}: expected revision ${String(expected)}, actual ${String(actual)}`);
    this.name = 'WrongExpectedRevisionError';
  }
}

export class EventIdConflictError extends Error {
  readonly code = 'event_id_conflict';
  constructor(
    readonly stream: string,
    readonly eventId: string,
    /** What is wrong with the id, in the client's terms: `appears twice in the batch`. */
    readonly detail: string,
  ) {
    super(`stream ${stream}: event id ${eventId} ${detail}`);
    this.name = 'EventIdConflictError';
  }
}

export class AppendTooLargeError extends Error {
  readonly code = 'append_too_large';
  constructor(
    readonly stream: string,
    readonly limitBytes: number | null,
    detail: string,
  ) {
    super(`stream ${stream}: ${detail}`);
    this.name = 'AppendTooLargeError';
  }
}

export class StoreUnavailableError extends Error {
  readonly code = 'store_unavailable';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreUnavailableError';
  }
}

/**
 * A stored event whose JSON does not parse (a damaged or tampered row). A read's page ends
 * before it; a read that starts at it throws this, naming it, so a reader keeps every event
 * before it and an audit can name the revision where the run breaks.
 */
export class UnreadableEventError extends Error {
  readonly code = 'unreadable_event';
  constructor(
    readonly event: {
      id: string;
      stream: string;
      type: string;
      revision: number;
      position: number;
      recordedAt: string;
    },
    readonly reason: string,
  ) {
    super(
      `event ${event.id} (stream ${event.stream}, revision ${event.revision}, position ${event.position}) is unreadable: ${reason}`,
    );
    this.name = 'UnreadableEventError';
  }
}
