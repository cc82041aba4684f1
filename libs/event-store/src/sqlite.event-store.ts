/**
 * The embedded EventStore: one SQLite file (WAL, fsync on commit by default). Concurrent
 * appends are coalesced into one transaction (group commit), so many writers share one
 * fsync while each append keeps its own expected-revision check and its own outcome.
 *
 * The groups are written on this thread (`writer: 'inline'`), or by a writer thread of
 * their own (`'thread'`): then the commit's fsync never holds this event loop, and the
 * appends that arrive while one group is written make up the next. Reads always use this
 * thread's connection (WAL: readers never wait for the writer).
 */
import Database, { type Database as Db, type Statement } from 'better-sqlite3';
import { EventEmitter } from 'node:events';
import { Worker } from 'node:worker_threads';
import { eventIdScope } from '@runledger/domain/stream-names';
import { mapInSlices, nextTurn, TurnQueue } from '@runledger/domain/time-slices';
import {
  PAGE_CHARS,
  isOfThread,
  StoreUnavailableError,
  UnreadableEventError,
  type AppendOptions,
  type AppendResult,
  type EventStore,
  type EventToAppend,
  type HeadPositionOptions,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  type Subscription,
} from './event-store.port';
import {
  fromWire,
  refusalError,
  SqliteAppender,
  toWire,
  wireTransfers,
  type AppendOutcome,
  type FromWriter,
  type SerializedEvent,
  type SqliteSynchronous,
  type ToWriter,
  type WireRequest,
  type WriterData,
} from './sqlite.appender';
import { EVENTS_SCHEMA, migrateSqliteLog } from './sqlite.migrations';
import { workerEntry } from './worker-entry';

export type { SqliteSynchronous };

export type SqliteWriter = 'inline' | 'thread';

export interface SqliteEventStoreOptions {
  file: string;
  /** FULL (default): an acknowledged append survives power loss. */
  synchronous?: SqliteSynchronous;
  /** How often a live subscription looks for events written by another process. */
  pollIntervalMs?: number;
  /** Most appends coalesced into one transaction. */
  maxGroupSize?: number;
  /** Where groups are written: on this thread (default) or in a writer thread. */
  writer?: SqliteWriter;
}

/**
 * An event as read: the columns of EVENT_COLUMNS, in order. Rows come back as arrays, not
 * objects: better-sqlite3 builds an object per row with a property per column, which costs a
 * catch-up read about two fifths of its time.
 */
type EventRow = [
  position: number,
  stream: string,
  revision: number,
  id: string,
  type: string,
  data: string,
  metadata: string,
  recordedAt: string,
  /** The stored data's length, when the row comes without it (eventColumnsWithDataOf). */
  storedDataLength?: number,
];

const EVENT_COLUMNS = 'position, stream, revision, id, type, data, metadata, recorded_at';
/**
 * EVENT_COLUMNS with the data of `count` types only (the first parameters), `null` for the
 * rest: SQLite reads a column only when its expression needs it. The metadata, stored after
 * the data, is still reached by walking the pages the data overflows into, so the row also
 * answers the data's stored length (from the record's header) for the page budget.
 */
function eventColumnsWithDataOf(count: number): string {
  const types = Array.from({ length: count }, () => '?').join(', ');
  return `position, stream, revision, id, type,
    CASE WHEN type IN (${types}) THEN data ELSE 'null' END, metadata, recorded_at, octet_length(data)`;
}
/** A stream's events forwards from a revision, and backwards from one. */
const STREAM_FORWARDS = 'WHERE stream = ? AND revision >= ? ORDER BY revision LIMIT ?';
const STREAM_BACKWARDS = 'WHERE stream = ? AND revision <= ? ORDER BY revision DESC LIMIT ?';
/** The log after a position, and only the streams starting with a prefix. */
const AFTER = 'WHERE position > ? ORDER BY position LIMIT ?';
const AFTER_PREFIXED = 'WHERE position > ? AND substr(stream, 1, ?) = ? ORDER BY position LIMIT ?';
const STREAM = 1;
const DATA = 5;
const METADATA = 6;
const STORED_DATA_LENGTH = 8;

interface PendingAppend {
  /** In the wire's form for a writer thread; all text inline. */
  request: WireRequest;
  resolve: (result: AppendResult) => void;
  reject: (error: unknown) => void;
}

/** The writer thread and the group it is writing. */
interface WriterThread {
  worker: Worker;
  /** Groups sent to the thread and not yet answered, oldest first. */
  inFlight: PendingAppend[][];
  /** Why it can write no more (it exited, or failed to start); appends are then refused. */
  failure: StoreUnavailableError | null;
  exited: Promise<void>;
}

/**
 * A subscription reads at most this many rows at once, and stops sooner once their JSON
 * passes PAGE_CHARS characters: 500 events of a megabyte each would be half a gigabyte.
 */
const READ_BATCH = 500;

/**
 * How long a failed commit (a full disk) keeps `ping`, and so readiness, failing unless a
 * commit succeeds first: long enough for a load balancer to see it, short enough that a
 * replica taken out of rotation, and so no longer writing, is tried again once it is mended.
 */
const COMMIT_FAILURE_HOLD_MS = 15_000;

export class SqliteEventStore implements EventStore {
  private readonly db: Db;
  private readonly committed = new EventEmitter();
  private readonly pollIntervalMs: number;
  private readonly maxGroupSize: number;
  private pending: PendingAppend[] = [];
  /** The last commit, when it failed: readiness says so for a while (COMMIT_FAILURE_HOLD_MS). */
  private lastCommitFailure: { error: StoreUnavailableError; at: number } | null = null;
  /** Appends whose events are being serialized, queued once they are. */
  private readonly serializing = new Set<Promise<unknown>>();
  private readonly readTurns = new TurnQueue(READ_SLICE_MS);
  private flushScheduled = false;
  private closed = false;
  private readonly appender: SqliteAppender | null;
  private readonly writer: WriterThread | null;
  /** Called when the writer thread has nothing in flight and nothing pending. */
  private drained: (() => void) | null = null;
  /** Reads of a stream or of the log after a position (eventsWhere), by query and data read. */
  private readonly reads = new Map<string, Statement<unknown[], EventRow>>();
  private readonly statements: {
    byId: Statement<[string, string], EventRow>;
    all: Statement<[number, number], EventRow>;
    allPrefixed: Statement<[number, number, string, number], EventRow>;
    ofThread: Statement<[string, string, number, number], EventRow>;
    ofThreadPrefixed: Statement<[string, string, number, number, string, number], EventRow>;
    ofStream: Statement<[string, number, number], EventRow>;
    headPosition: Statement<[], { position: number | null }>;
    headPositionPrefixed: Statement<[number, string], { position: number }>;
  };

  constructor(options: SqliteEventStoreOptions) {
    this.pollIntervalMs = options.pollIntervalMs ?? 250;
    this.maxGroupSize = options.maxGroupSize ?? 512;
    this.db = new Database(options.file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma(`synchronous = ${options.synchronous ?? 'FULL'}`);
    // Another process (a second replica, the mirror) may hold the write lock briefly.
    this.db.pragma('busy_timeout = 5000');
    // A log written before ids were scoped by tenant is upgraded in place, once.
    migrateSqliteLog(this.db);
    this.db.exec(EVENTS_SCHEMA);
    this.committed.setMaxListeners(0);
    const events = <P extends unknown[]>(where: string) =>
      this.db.prepare<P, EventRow>(`SELECT ${EVENT_COLUMNS} FROM events ${where}`).raw();
    this.statements = {
      byId: events('WHERE id_scope = ? AND id = ?'),
      all: events('WHERE position >= ? ORDER BY position LIMIT ?'),
      allPrefixed: events(
        'WHERE position >= ? AND substr(stream, 1, ?) = ? ORDER BY position LIMIT ?',
      ),
      ofThread: events(
        `WHERE json_extract(metadata, '$.tenantId') = ? AND json_extract(metadata, '$.threadId') = ?
           AND position >= ? ORDER BY position LIMIT ?`,
      ),
      // The prefix filters inside the query, before LIMIT: a thread's receipts, stamped with
      // it too, would otherwise fill a page of its run events and hide those after them.
      ofThreadPrefixed: events(
        `WHERE json_extract(metadata, '$.tenantId') = ? AND json_extract(metadata, '$.threadId') = ?
           AND position >= ? AND substr(stream, 1, ?) = ? ORDER BY position LIMIT ?`,
      ),
      // The stream's own index, in revision order (its positions rise with it); the position
      // is the rowid, which the index holds, so rows before it are skipped in the index.
      ofStream: events('WHERE stream = ? AND position >= ? ORDER BY revision LIMIT ?'),
      headPosition: this.db.prepare('SELECT MAX(position) AS position FROM events'),
      // Walks back from the tail, so it costs the number of other streams' events at the end.
      headPositionPrefixed: this.db.prepare(
        'SELECT position FROM events WHERE substr(stream, 1, ?) = ? ORDER BY position DESC LIMIT 1',
      ),
    };
    if (options.writer === 'thread') {
      this.appender = null;
      this.writer = this.startWriter({
        file: options.file,
        synchronous: options.synchronous ?? 'FULL',
        maxGroupSize: this.maxGroupSize,
      });
    } else {
      this.appender = new SqliteAppender(this.db);
      this.writer = null;
    }
  }

  append(
    stream: string,
    events: EventToAppend[],
    options: AppendOptions = {},
  ): Promise<AppendResult> {
    if (this.closed)
      return Promise.reject(new StoreUnavailableError('the SQLite event store is closed'));
    if (this.writer?.failure) return Promise.reject(this.writer.failure);
    if (events.length === 0)
      return Promise.reject(new RangeError('an append needs at least one event'));
    // A batch of megabyte events, serialized at once, held the event loop for 120-160 ms (25
    // of them); a small batch is serialized in one slice. An append made before close() is
    // written all the same: close() waits for the serializing ones too.
    const form = this.writer ? (event: EventToAppend) => toWire(serialize(event)) : serialize;
    const queued = mapInSlices(events, form).then((serialized) => ({
      outcome: this.enqueue(stream, serialized, options),
    }));
    this.serializing.add(queued);
    const done = () => this.serializing.delete(queued);
    queued.then(done, done);
    return queued.then(({ outcome }) => outcome);
  }

  private enqueue(
    stream: string,
    events: WireRequest['events'],
    options: AppendOptions,
  ): Promise<AppendResult> {
    if (this.writer?.failure) return Promise.reject(this.writer.failure);
    const request = {
      stream,
      scope: eventIdScope(stream),
      events,
      expected: options.expectedRevision ?? 'any',
    };
    return new Promise<AppendResult>((resolve, reject) => {
      this.pending.push({ request, resolve, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.writer) {
      this.sendGroup(this.writer);
      return;
    }
    while (this.pending.length > 0) {
      const group = this.pending.splice(0, this.maxGroupSize);
      let outcomes: AppendOutcome[];
      try {
        outcomes = this.appender!.appendGroup(group.map((append) => fromWire(append.request)));
      } catch (error) {
        this.commitFailed(group, error);
        continue;
      }
      this.settle(group, outcomes);
    }
    this.committed.emit('commit');
  }

  private startWriter(data: WriterData): WriterThread {
    const entry = workerEntry(__dirname, 'sqlite.writer', __filename);
    const worker = new Worker(entry.filename, { eval: entry.eval, workerData: data });
    const writer: WriterThread = {
      worker,
      inFlight: [],
      failure: null,
      exited: Promise.resolve(),
    };
    worker.on('message', (message: FromWriter) => {
      if (message.type === 'commit-failed') {
        this.commitFailed(writer.inFlight.splice(0, message.groups).flat(), message.message);
      } else {
        for (const outcomes of message.outcomes) this.settle(writer.inFlight.shift()!, outcomes);
      }
      this.committed.emit('commit');
      if (writer.inFlight.length === 0 && this.pending.length === 0) this.drained?.();
    });
    worker.on('error', (error) => this.writerStopped(writer, String(error)));
    writer.exited = new Promise((resolve) => {
      worker.once('exit', (code) => {
        this.writerStopped(writer, `the SQLite writer thread exited (code ${code})`);
        resolve();
      });
    });
    return writer;
  }

  /**
   * Hands every pending append to the writer at once, without waiting for the group it is
   * committing: it takes all the groups that arrived meanwhile into its next commit, so a
   * commit starts as soon as the last one ends, not a round trip through this loop later.
   */
  private sendGroup(writer: WriterThread): void {
    while (this.pending.length > 0) {
      const group = this.pending.splice(0, this.maxGroupSize);
      writer.inFlight.push(group);
      const requests = group.map((append) => append.request);
      writer.worker.postMessage(
        { type: 'group', requests } satisfies ToWriter,
        wireTransfers(requests),
      );
    }
  }

  /** The writer can write no more: whatever waits on it fails, and so does every later append. */
  private writerStopped(writer: WriterThread, reason: string): void {
    if (writer.failure === null) {
      writer.failure = new StoreUnavailableError(`SQLite writer stopped: ${reason}`);
    }
    const waiting = [...writer.inFlight.splice(0).flat(), ...this.pending.splice(0)];
    for (const append of waiting) append.reject(writer.failure);
    this.drained?.();
  }

  /**
   * A statement of `where`, prepared once, reading every event's data or, with `dataTypes`,
   * only those types' (their names are its first parameters).
   */
  private eventsWhere(
    where: string,
    dataTypes?: readonly string[],
  ): Statement<unknown[], EventRow> {
    const columns =
      dataTypes === undefined ? EVENT_COLUMNS : eventColumnsWithDataOf(dataTypes.length);
    const sql = `SELECT ${columns} FROM events ${where}`;
    let statement = this.reads.get(sql);
    if (statement === undefined) {
      statement = this.db.prepare<unknown[], EventRow>(sql).raw();
      this.reads.set(sql, statement);
    }
    return statement;
  }

  async readStream(stream: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    const turn = this.readTurns.take();
    if (turn !== undefined) await turn;
    const limit = options.maxCount ?? Number.MAX_SAFE_INTEGER;
    const backwards = options.direction === 'backwards';
    const from = options.fromRevision ?? (backwards ? Number.MAX_SAFE_INTEGER : 0);
    const selected = options.dataTypes ?? [];
    const statement = this.eventsWhere(
      backwards ? STREAM_BACKWARDS : STREAM_FORWARDS,
      options.dataTypes,
    );
    const rows = statement.iterate(...selected, stream, from, limit);
    return decoded(takeWithin(rows, options.maxChars).rows);
  }

  async readByIds(stream: string, ids: readonly string[]): Promise<RecordedEvent[]> {
    const scope = eventIdScope(stream);
    return ids.flatMap((id) => {
      const row = this.statements.byId.get(scope, id);
      return row !== undefined && row[STREAM] === stream ? decoded([row]) : [];
    });
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    const turn = this.readTurns.take();
    if (turn !== undefined) await turn;
    const from = options.fromPosition ?? 0;
    const held = options.heldPosition ?? -1;
    const limit = options.maxCount ?? Number.MAX_SAFE_INTEGER;
    const prefix = options.streamPrefix;
    if (options.stream !== undefined) {
      const { thread } = options;
      const rows = this.statements.ofStream.iterate(options.stream, from, limit);
      return decoded(takeWithin(rows, options.maxChars).rows, held).filter(
        (event) =>
          (prefix === undefined || event.stream.startsWith(prefix)) &&
          (thread === undefined || isOfThread(event, thread)),
      );
    }
    if (options.thread) {
      const { tenantId, threadId } = options.thread;
      const rows =
        prefix === undefined
          ? this.statements.ofThread.iterate(tenantId, threadId, from, limit)
          : this.statements.ofThreadPrefixed.iterate(
              tenantId,
              threadId,
              from,
              prefix.length,
              prefix,
              limit,
            );
      return decoded(takeWithin(rows, options.maxChars).rows, held);
    }
    const rows = prefix
      ? this.statements.allPrefixed.iterate(from, prefix.length, prefix, limit)
      : this.statements.all.iterate(from, limit);
    return decoded(takeWithin(rows, options.maxChars).rows, held);
  }

  async headPosition(options: HeadPositionOptions = {}): Promise<number> {
    const prefix = options.streamPrefix;
    const row = prefix
      ? this.statements.headPositionPrefixed.get(prefix.length, prefix)
      : this.statements.headPosition.get();
    return row?.position ?? 0;
  }

  subscribeToAll(options: SubscribeOptions = {}): Subscription {
    const from = options.fromPosition ?? 'start';
    let cursor =
      from === 'start'
        ? 0
        : from === 'end'
          ? (this.statements.headPosition.get()?.position ?? 0)
          : from;
    const prefix = options.streamPrefix;
    let stopped = false;
    let wake: (() => void) | null = null;
    const onCommit = () => wake?.();
    this.committed.on('commit', onCommit);
    const stop = () => {
      stopped = true;
      this.committed.off('commit', onCommit);
      wake?.();
    };
    this.committed.once('close', stop);

    const selected = options.dataTypes ?? [];
    const statement = this.eventsWhere(prefix ? AFTER_PREFIXED : AFTER, options.dataTypes);
    /** The next rows after the cursor, and whether more may follow them at once. */
    const readNext = (): { rows: EventRow[]; full: boolean } => {
      const { rows, full } = takeWithin(
        prefix
          ? statement.iterate(...selected, cursor, prefix.length, prefix, READ_BATCH)
          : statement.iterate(...selected, cursor, READ_BATCH),
        PAGE_CHARS,
      );
      return { rows, full: full || rows.length === READ_BATCH };
    };
    const pollIntervalMs = this.pollIntervalMs;

    async function* follow(): AsyncGenerator<readonly RecordedEvent[]> {
      try {
        while (!stopped) {
          const { rows, full } = readNext();
          const events = decoded(rows);
          if (events.length > 0) {
            cursor = events[events.length - 1].position;
            yield events;
          }
          // A page that ended before an unreadable event: the next read throws, naming it.
          if (events.length < rows.length) continue;
          if (full) {
            // More is waiting: read it, but give other work a turn first. Six pages of
            // megabyte events, read back to back, held the loop for 130-170 ms.
            await nextTurn();
            continue;
          }
          // Woken by our own commits at once; by other processes' commits within a poll interval.
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, pollIntervalMs);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          wake = null;
        }
      } finally {
        stop();
      }
    }
    const iterator = follow();
    return {
      [Symbol.asyncIterator]: () => iterator,
      close: async () => {
        stop();
        await iterator.return(undefined);
      },
    };
  }

  /** Calls `listener` after each commit of appends made through this store; returns the unsubscribe. */
  onCommitted(listener: () => void): () => void {
    this.committed.on('commit', listener);
    return () => this.committed.off('commit', listener);
  }

  /**
   * Another connection to the same file (a worker thread's) committed: this store's
   * subscriptions read now instead of at their next poll.
   */
  committedElsewhere(): void {
    this.committed.emit('commit');
  }

  async ping(): Promise<void> {
    if (this.closed) throw new StoreUnavailableError('the SQLite event store is closed');
    if (this.writer?.failure) throw this.writer.failure;
    const failed = this.lastCommitFailure;
    if (failed && Date.now() - failed.at < COMMIT_FAILURE_HOLD_MS) throw failed.error;
    this.db.prepare('SELECT 1').get();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled(this.serializing);
    if (this.writer) {
      await this.drain(this.writer);
      this.writer.worker.postMessage({ type: 'close' } satisfies ToWriter);
      await this.writer.exited;
    } else if (this.pending.length > 0) {
      this.flush();
    }
    this.committed.emit('close');
    this.db.close();
  }

  /** A group committed: each append answers its outcome, and the store can write again. */
  private settle(group: readonly PendingAppend[], outcomes: readonly AppendOutcome[]): void {
    this.lastCommitFailure = null;
    group.forEach((append, i) => {
      const outcome = outcomes[i];
      if ('written' in outcome) append.resolve(outcome.written);
      else append.reject(refusalError(outcome.refused));
    });
  }

  /** The commit itself failed (disk full, lock timeout): nothing of the group is recorded. */
  private commitFailed(group: readonly PendingAppend[], error: unknown): void {
    const failure = new StoreUnavailableError(`SQLite commit failed: ${String(error)}`, {
      cause: error,
    });
    this.lastCommitFailure = { error: failure, at: Date.now() };
    for (const append of group) append.reject(failure);
  }

  /** Resolves once every append made so far has its outcome. */
  private async drain(writer: WriterThread): Promise<void> {
    while (writer.failure === null && (writer.inFlight.length > 0 || this.pending.length > 0)) {
      await new Promise<void>((resolve) => {
        this.drained = resolve;
        this.sendGroup(writer);
      });
      this.drained = null;
    }
  }
}

function serialize(event: EventToAppend): SerializedEvent {
  return {
    id: event.id,
    type: event.type,
    data: toJson(event, 'data'),
    metadata: toJson(event, 'metadata'),
  };
}

function toJson(event: EventToAppend, field: 'data' | 'metadata'): string {
  const text: unknown = JSON.stringify(event[field]);
  if (typeof text !== 'string')
    throw new TypeError(`event ${event.id}: ${field} has no JSON representation`);
  return text;
}

/**
 * Page reads take turns of the event loop (TurnQueue): reads asked for in one turn go on at
 * once for READ_SLICE_MS, then take a later turn each, in order. A page is read and decoded
 * at once, on this thread (12 ms and more for 1 MiB of non-ASCII events), and the reads of
 * requests that arrived together ran back to back in one turn: twenty replays of a large run
 * starting at once held the loop for 400-800 ms. Reads that fit in the slice (a run's head, a
 * small page) go on at once and are answered in the turn they were asked: put off to the next
 * turn every time, they lost the answers of clients that end their side of the connection
 * after their request, before the server kept such connections open to answer them.
 */
const READ_SLICE_MS = 10;

/**
 * The rows' events, up to the first whose stored JSON does not parse: the page ends before
 * it, and a page that starts with it throws UnreadableEventError, naming it. So does one
 * that would end holding nothing past `held` (a reader resuming from an event it holds),
 * which would otherwise read the same page again, or take its end for the log's; one at
 * `held` itself the reader holds already, and the page reads on past it.
 */
function decoded(rows: readonly EventRow[], held = -1): RecordedEvent[] {
  const events: RecordedEvent[] = [];
  for (const row of rows) {
    let event: RecordedEvent;
    try {
      event = toRecorded(row);
    } catch (error) {
      const [position, stream, revision, id, type, , , recordedAt] = row;
      // The reader holds it already (shown in its place): read on past it.
      if (position <= held) continue;
      if (events.length > 0 && events[events.length - 1].position > held) return events;
      throw new UnreadableEventError(
        { id, stream, type, revision, position, recordedAt },
        error instanceof SyntaxError
          ? `its stored JSON does not parse (${error.message})`
          : String(error instanceof Error ? error.message : error),
      );
    }
    events.push(event);
  }
  return events;
}

function toRecorded(row: EventRow): RecordedEvent {
  const [position, stream, revision, id, type, data, metadata, recordedAt] = row;
  const parsedMetadata: unknown = JSON.parse(metadata);
  // Every append stores an object: anything else is a damaged row, and every reader of
  // metadata (tenant, run, thread, the hash chain) would fail on it, each its own way.
  if (
    typeof parsedMetadata !== 'object' ||
    parsedMetadata === null ||
    Array.isArray(parsedMetadata)
  ) {
    throw new TypeError(`its stored metadata is ${metadata.slice(0, 32)}, not an object`);
  }
  return {
    id,
    stream,
    type,
    revision,
    position,
    data: JSON.parse(data) as unknown,
    metadata: parsedMetadata as Record<string, unknown>,
    recordedAt,
    size: data.length + metadata.length,
  };
}

/** The length of an event's stored JSON (data and metadata): its `size`. */
function storedLength(row: EventRow): number {
  return (row[STORED_DATA_LENGTH] ?? row[DATA].length) + row[METADATA].length;
}

/**
 * Rows until those after the first hold `maxChars` characters of JSON, the row that reaches
 * it included (PageBudget); `full` when the budget ended the page.
 */
function takeWithin(
  source: Iterable<EventRow>,
  maxChars = Number.POSITIVE_INFINITY,
): { rows: EventRow[]; full: boolean } {
  const rows: EventRow[] = [];
  let chars = 0;
  for (const row of source) {
    if (rows.length > 0) chars += storedLength(row);
    rows.push(row);
    // Leaving the loop resets the statement: nothing more is read.
    if (chars >= maxChars) return { rows, full: true };
  }
  return { rows, full: false };
}
