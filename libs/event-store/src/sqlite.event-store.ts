/**
 * The embedded EventStore: one SQLite file (WAL, fsync on commit by default). Concurrent
 * appends are coalesced into one transaction per event-loop turn (group commit), so many
 * writers share one fsync while each append keeps its own expected-revision check and
 * its own outcome.
 */
import Database, { type Database as Db, type Statement } from 'better-sqlite3';
import { EventEmitter } from 'node:events';
import { canonicalJson, eventIdScope } from '@runledger/domain';
import {
  EventIdConflictError,
  expectationHolds,
  StoreUnavailableError,
  WrongExpectedRevisionError,
  type AppendOptions,
  type AppendResult,
  type EventStore,
  type EventToAppend,
  type ExpectedRevision,
  type HeadPositionOptions,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  type Subscription,
} from './event-store.port';
import { EVENTS_SCHEMA, migrateSqliteLog } from './sqlite.migrations';

export type SqliteSynchronous = 'FULL' | 'NORMAL';

export interface SqliteEventStoreOptions {
  file: string;
  /** FULL (default): an acknowledged append survives power loss. */
  synchronous?: SqliteSynchronous;
  /** How often a live subscription looks for events written by another process. */
  pollIntervalMs?: number;
  /** Most appends coalesced into one transaction. */
  maxGroupSize?: number;
}

interface EventRow {
  position: number;
  stream: string;
  revision: number;
  id: string;
  type: string;
  data: string;
  metadata: string;
  recorded_at: string;
}

interface PendingAppend {
  stream: string;
  events: EventToAppend[];
  expected: ExpectedRevision;
  resolve: (result: AppendResult) => void;
  reject: (error: unknown) => void;
}

const READ_BATCH = 500;

export class SqliteEventStore implements EventStore {
  private readonly db: Db;
  private readonly committed = new EventEmitter();
  private readonly pollIntervalMs: number;
  private readonly maxGroupSize: number;
  private pending: PendingAppend[] = [];
  private flushScheduled = false;
  private closed = false;
  private readonly statements: {
    head: Statement<[string], { revision: number }>;
    byId: Statement<[string, string], EventRow>;
    insert: Statement<[string, number, string, string, string, string, string, string]>;
    stream: Statement<[string, number, number], EventRow>;
    streamBackwards: Statement<[string, number, number], EventRow>;
    all: Statement<[number, number], EventRow>;
    allPrefixed: Statement<[number, number, string, number], EventRow>;
    after: Statement<[number, number], EventRow>;
    afterPrefixed: Statement<[number, number, string, number], EventRow>;
    ofThread: Statement<[string, string, number, number], EventRow>;
    headPosition: Statement<[], { position: number | null }>;
    headPositionPrefixed: Statement<[number, string], { position: number }>;
  };
  private readonly runGroup: (group: PendingAppend[]) => Array<AppendResult | { error: unknown }>;

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
    const columns = 'position, stream, revision, id, type, data, metadata, recorded_at';
    this.statements = {
      head: this.db.prepare(
        'SELECT revision FROM events WHERE stream = ? ORDER BY revision DESC LIMIT 1',
      ),
      byId: this.db.prepare(`SELECT ${columns} FROM events WHERE id_scope = ? AND id = ?`),
      insert: this.db.prepare(
        'INSERT INTO events (stream, revision, id_scope, id, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
      ),
      stream: this.db.prepare(
        `SELECT ${columns} FROM events WHERE stream = ? AND revision >= ? ORDER BY revision LIMIT ?`,
      ),
      streamBackwards: this.db.prepare(
        `SELECT ${columns} FROM events WHERE stream = ? AND revision <= ? ORDER BY revision DESC LIMIT ?`,
      ),
      all: this.db.prepare(
        `SELECT ${columns} FROM events WHERE position >= ? ORDER BY position LIMIT ?`,
      ),
      allPrefixed: this.db.prepare(
        `SELECT ${columns} FROM events WHERE position >= ? AND substr(stream, 1, ?) = ? ORDER BY position LIMIT ?`,
      ),
      after: this.db.prepare(
        `SELECT ${columns} FROM events WHERE position > ? ORDER BY position LIMIT ?`,
      ),
      afterPrefixed: this.db.prepare(
        `SELECT ${columns} FROM events WHERE position > ? AND substr(stream, 1, ?) = ? ORDER BY position LIMIT ?`,
      ),
      ofThread: this.db.prepare(
        `SELECT ${columns} FROM events
         WHERE json_extract(metadata, '$.tenantId') = ? AND json_extract(metadata, '$.threadId') = ?
           AND position >= ? ORDER BY position LIMIT ?`,
      ),
      headPosition: this.db.prepare('SELECT MAX(position) AS position FROM events'),
      // Walks back from the tail, so it costs the number of other streams' events at the end.
      headPositionPrefixed: this.db.prepare(
        'SELECT position FROM events WHERE substr(stream, 1, ?) = ? ORDER BY position DESC LIMIT 1',
      ),
    };
    // Every refusal is decided before an append's first insert, so a refused append has
    // written nothing and needs no savepoint of its own (a savepoint per append made SQLite
    // journal every page twice). Any other error rolls the whole group back.
    const group = this.db.transaction((requests: PendingAppend[]) =>
      requests.map((request) => this.appendNow(request)),
    );
    // IMMEDIATE takes the write lock up front, so another process cannot force a retry mid-group.
    this.runGroup = (requests) => group.immediate(requests);
  }

  append(
    stream: string,
    events: EventToAppend[],
    options: AppendOptions = {},
  ): Promise<AppendResult> {
    if (this.closed)
      return Promise.reject(new StoreUnavailableError('the SQLite event store is closed'));
    if (events.length === 0)
      return Promise.reject(new RangeError('an append needs at least one event'));
    return new Promise<AppendResult>((resolve, reject) => {
      this.pending.push({
        stream,
        events,
        expected: options.expectedRevision ?? 'any',
        resolve,
        reject,
      });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.flushScheduled = false;
    while (this.pending.length > 0) {
      const group = this.pending.splice(0, this.maxGroupSize);
      let outcomes: Array<AppendResult | { error: unknown }>;
      try {
        outcomes = this.runGroup(group);
      } catch (error) {
        // The commit itself failed (disk full, lock timeout): nothing of the group is recorded.
        const failure = new StoreUnavailableError(`SQLite commit failed: ${String(error)}`, {
          cause: error,
        });
        for (const request of group) request.reject(failure);
        continue;
      }
      group.forEach((request, i) => {
        const outcome = outcomes[i];
        if ('error' in outcome) request.reject(outcome.error);
        else request.resolve(outcome);
      });
    }
    this.committed.emit('commit');
  }

  /**
   * Runs inside the group's transaction. A refusal is answered as `{ error }` before anything
   * is written; an error thrown from here fails the whole group.
   */
  private appendNow({
    stream,
    events,
    expected,
  }: PendingAppend): AppendResult | { error: unknown } {
    let rows: { data: string; metadata: string }[];
    let head: number | undefined;
    try {
      const recorded = this.findRecorded(stream, events);
      if (recorded) return recorded;
      head = this.statements.head.get(stream)?.revision;
      if (!expectationHolds(expected, head)) {
        throw new WrongExpectedRevisionError(stream, expected, head ?? 'no_stream');
      }
      rows = events.map((event) => ({
        data: toJson(event, 'data'),
        metadata: toJson(event, 'metadata'),
      }));
    } catch (error) {
      return { error };
    }
    const recordedAt = new Date().toISOString();
    const first = head === undefined ? 0 : head + 1;
    const scope = eventIdScope(stream);
    const written = events.map((event, i) => {
      const revision = first + i;
      const info = this.statements.insert.run(
        stream,
        revision,
        scope,
        event.id,
        event.type,
        rows[i].data,
        rows[i].metadata,
        recordedAt,
      );
      return { id: event.id, revision, position: Number(info.lastInsertRowid) };
    });
    return summarize(written, false);
  }

  /**
   * Idempotency: a batch whose ids are all recorded in this stream with the same content
   * answers the originals. Any other overlap with recorded ids is a conflict.
   */
  private findRecorded(stream: string, events: EventToAppend[]): AppendResult | null {
    const seen = new Set<string>();
    const scope = eventIdScope(stream);
    const rows = events.map((event) => {
      if (seen.has(event.id))
        throw new EventIdConflictError(stream, event.id, 'appears twice in the batch');
      seen.add(event.id);
      return this.statements.byId.get(scope, event.id);
    });
    if (rows.every((row) => row === undefined)) return null;
    const knownIndex = rows.findIndex((row) => row !== undefined);
    rows.forEach((row, i) => {
      const event = events[i];
      if (row === undefined) {
        throw new EventIdConflictError(
          stream,
          events[knownIndex].id,
          'is recorded, but the rest of this batch is not',
        );
      }
      if (row.stream !== stream)
        throw new EventIdConflictError(stream, event.id, 'is recorded in another stream');
      if (
        row.type !== event.type ||
        canonicalJson(JSON.parse(row.data)) !== canonicalJson(event.data)
      ) {
        throw new EventIdConflictError(stream, event.id, 'was recorded with different content');
      }
    });
    return summarize(
      rows.map((row) => ({ id: row!.id, revision: row!.revision, position: row!.position })),
      true,
    );
  }

  async readStream(stream: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    const limit = options.maxCount ?? Number.MAX_SAFE_INTEGER;
    const rows =
      options.direction === 'backwards'
        ? this.statements.streamBackwards.all(
            stream,
            options.fromRevision ?? Number.MAX_SAFE_INTEGER,
            limit,
          )
        : this.statements.stream.all(stream, options.fromRevision ?? 0, limit);
    return rows.map(toRecorded);
  }

  async readByIds(stream: string, ids: readonly string[]): Promise<RecordedEvent[]> {
    const scope = eventIdScope(stream);
    return ids.flatMap((id) => {
      const row = this.statements.byId.get(scope, id);
      return row !== undefined && row.stream === stream ? [toRecorded(row)] : [];
    });
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    const from = options.fromPosition ?? 0;
    const limit = options.maxCount ?? Number.MAX_SAFE_INTEGER;
    const prefix = options.streamPrefix;
    if (options.thread) {
      const { tenantId, threadId } = options.thread;
      const rows = this.statements.ofThread.all(tenantId, threadId, from, limit);
      return rows
        .filter((row) => prefix === undefined || row.stream.startsWith(prefix))
        .map(toRecorded);
    }
    const rows = prefix
      ? this.statements.allPrefixed.all(from, prefix.length, prefix, limit)
      : this.statements.all.all(from, limit);
    return rows.map(toRecorded);
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

    const readNext = (): EventRow[] =>
      prefix
        ? this.statements.afterPrefixed.all(cursor, prefix.length, prefix, READ_BATCH)
        : this.statements.after.all(cursor, READ_BATCH);
    const pollIntervalMs = this.pollIntervalMs;

    async function* follow(): AsyncGenerator<RecordedEvent> {
      try {
        while (!stopped) {
          const rows = readNext();
          for (const row of rows) {
            cursor = row.position;
            yield toRecorded(row);
            if (stopped) return;
          }
          if (rows.length === READ_BATCH) continue;
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
    this.db.prepare('SELECT 1').get();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pending.length > 0) this.flush();
    this.committed.emit('close');
    this.db.close();
  }
}

function toJson(event: EventToAppend, field: 'data' | 'metadata'): string {
  const text: unknown = JSON.stringify(event[field]);
  if (typeof text !== 'string')
    throw new TypeError(`event ${event.id}: ${field} has no JSON representation`);
  return text;
}

function summarize(written: AppendResult['events'], idempotent: boolean): AppendResult {
  const last = written[written.length - 1];
  return {
    firstRevision: written[0].revision,
    lastRevision: last.revision,
    position: last.position,
    events: written,
    idempotent,
  };
}

function toRecorded(row: EventRow): RecordedEvent {
  return {
    id: row.id,
    stream: row.stream,
    type: row.type,
    revision: row.revision,
    position: row.position,
    data: JSON.parse(row.data) as unknown,
    metadata: JSON.parse(row.metadata) as Record<string, unknown>,
    recordedAt: row.recorded_at,
  };
}
