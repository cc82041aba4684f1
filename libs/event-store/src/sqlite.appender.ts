/**
 * The SQLite log's write side: one group of appends, one IMMEDIATE transaction, each append
 * with its own expected-revision and idempotency checks and its own outcome. The same code
 * runs on the service's event loop or in the writer thread (sqlite.writer.ts); its inputs
 * and outcomes are plain data, so they cross a thread unchanged. It imports nothing of the
 * domain, so the writer thread loads only SQLite.
 */
import type { Database as Db, Statement } from 'better-sqlite3';
import canonicalize from 'canonicalize';
import {
  appendResult,
  EventIdConflictError,
  expectationHolds,
  WrongExpectedRevisionError,
  type AppendResult,
  type ExpectedRevision,
} from './event-store.port';

/** An event as the log stores it: data and metadata already JSON. */
export interface SerializedEvent {
  id: string;
  type: string;
  data: string;
  metadata: string;
}

export interface AppendRequest {
  stream: string;
  /** The stream's tenant, inside which event ids are unique (`eventIdScope`). */
  scope: string;
  events: SerializedEvent[];
  expected: ExpectedRevision;
}

/** Why an append was refused; nothing of it was written. */
export type Refusal =
  | {
      kind: 'wrong_expected_revision';
      stream: string;
      expected: ExpectedRevision;
      actual: number | 'no_stream';
    }
  | { kind: 'event_id_conflict'; stream: string; eventId: string; detail: string };

export type AppendOutcome = { written: AppendResult } | { refused: Refusal };

export type SqliteSynchronous = 'FULL' | 'NORMAL';

/** What the writer thread (sqlite.writer.ts) is started with, and the messages it exchanges. */
export interface WriterData {
  file: string;
  synchronous: SqliteSynchronous;
  /** Most appends the thread takes into one commit, however many groups they came in. */
  maxGroupSize: number;
}

/**
 * An append as it is handed to the writer thread: data or metadata of more than
 * WIRE_BYTES_CHARS goes as its UTF-8 bytes, whose buffer is moved to the thread rather than
 * copied. Copying a group's strings costs the service's event loop about 3.5 ms a MiB: 25
 * megabyte events held it for 85-140 ms, and four concurrent 32 MB batches of 32 KiB events
 * for up to 900 ms.
 */
export interface WireRequest extends Omit<AppendRequest, 'events'> {
  events: WireEvent[];
}

type WireEvent = Omit<SerializedEvent, 'data' | 'metadata'> & {
  data: string | Uint8Array;
  metadata: string | Uint8Array;
};

/**
 * Longest text copied as a string. An append of MAX_EVENTS_PER_APPEND (1,000) events then
 * copies at most about 2 MiB; every longer text is encoded within the serialization's slices.
 */
const WIRE_BYTES_CHARS = 1024;

function wireText(text: string): string | Uint8Array {
  return text.length <= WIRE_BYTES_CHARS ? text : new TextEncoder().encode(text);
}

function fromWireText(text: string | Uint8Array): string {
  return typeof text === 'string'
    ? text
    : Buffer.from(text.buffer, text.byteOffset, text.byteLength).toString('utf8');
}

/** The event for the wire: long data and metadata encoded as UTF-8 (sliced with the serialization). */
export function toWire(event: SerializedEvent): WireEvent {
  return { ...event, data: wireText(event.data), metadata: wireText(event.metadata) };
}

/** The buffers a group's wire form moves to the writer thread. */
export function wireTransfers(requests: readonly WireRequest[]): ArrayBuffer[] {
  return requests.flatMap((request) =>
    request.events.flatMap((event) =>
      [event.data, event.metadata].flatMap((text) =>
        typeof text === 'string' ? [] : [text.buffer as ArrayBuffer],
      ),
    ),
  );
}

/** The request as the appender takes it, its data and metadata text again. */
export function fromWire(request: WireRequest): AppendRequest {
  return {
    ...request,
    events: request.events.map((event) => ({
      ...event,
      data: fromWireText(event.data),
      metadata: fromWireText(event.metadata),
    })),
  };
}

export type ToWriter = { type: 'group'; requests: WireRequest[] } | { type: 'close' };

/** One commit's answer: for each group it took, in the order they were sent. */
export type FromWriter =
  | { type: 'outcomes'; outcomes: AppendOutcome[][] }
  | { type: 'commit-failed'; message: string; groups: number };

export function refusalError(refusal: Refusal): Error {
  return refusal.kind === 'wrong_expected_revision'
    ? new WrongExpectedRevisionError(refusal.stream, refusal.expected, refusal.actual)
    : new EventIdConflictError(refusal.stream, refusal.eventId, refusal.detail);
}

/** A recorded event's row as the idempotency check reads it; the readers' rows add the rest. */
export interface RecordedRow {
  position: number;
  stream: string;
  revision: number;
  id: string;
  type: string;
  data: string;
}

export class SqliteAppender {
  private readonly head: Statement<[string], { revision: number }>;
  private readonly byId: Statement<[string, string], RecordedRow>;
  private readonly insert: Statement<
    [string, number, string, string, string, string, string, string]
  >;
  private readonly group: (requests: readonly AppendRequest[]) => AppendOutcome[];

  constructor(db: Db) {
    this.head = db.prepare(
      'SELECT revision FROM events WHERE stream = ? ORDER BY revision DESC LIMIT 1',
    );
    this.byId = db.prepare(
      'SELECT position, stream, revision, id, type, data FROM events WHERE id_scope = ? AND id = ?',
    );
    this.insert = db.prepare(
      'INSERT INTO events (stream, revision, id_scope, id, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    );
    // Every refusal is decided before an append's first insert, so a refused append has
    // written nothing and needs no savepoint of its own (a savepoint per append made SQLite
    // journal every page twice). Any other error rolls the whole group back.
    const group = db.transaction((requests: readonly AppendRequest[]) =>
      requests.map((request) => this.appendOne(request)),
    );
    // IMMEDIATE takes the write lock up front, so another process cannot force a retry mid-group.
    this.group = (requests) => group.immediate(requests);
  }

  /** One transaction for the whole group; throws (nothing recorded) when the commit fails. */
  appendGroup(requests: readonly AppendRequest[]): AppendOutcome[] {
    return this.group(requests);
  }

  private appendOne({ stream, scope, events, expected }: AppendRequest): AppendOutcome {
    const recorded = this.findRecorded(stream, scope, events);
    if (recorded) return recorded;
    const head = this.head.get(stream)?.revision;
    if (!expectationHolds(expected, head)) {
      return {
        refused: {
          kind: 'wrong_expected_revision',
          stream,
          expected,
          actual: head ?? 'no_stream',
        },
      };
    }
    const recordedAt = new Date().toISOString();
    const first = head === undefined ? 0 : head + 1;
    const written = events.map((event, i) => {
      const revision = first + i;
      const info = this.insert.run(
        stream,
        revision,
        scope,
        event.id,
        event.type,
        event.data,
        event.metadata,
        recordedAt,
      );
      return { id: event.id, revision, position: Number(info.lastInsertRowid) };
    });
    return { written: appendResult(written, false) };
  }

  /**
   * Idempotency: a batch whose ids are all recorded in this stream with the same content
   * answers the originals. Any other overlap with recorded ids is a conflict.
   */
  private findRecorded(
    stream: string,
    scope: string,
    events: readonly SerializedEvent[],
  ): AppendOutcome | null {
    const conflict = (eventId: string, detail: string): AppendOutcome => ({
      refused: { kind: 'event_id_conflict', stream, eventId, detail },
    });
    const seen = new Set<string>();
    const rows: (RecordedRow | undefined)[] = [];
    for (const event of events) {
      if (seen.has(event.id)) return conflict(event.id, 'appears twice in the batch');
      seen.add(event.id);
      rows.push(this.byId.get(scope, event.id));
    }
    const knownIndex = rows.findIndex((row) => row !== undefined);
    if (knownIndex < 0) return null;
    const originals: AppendResult['events'] = [];
    for (const [i, row] of rows.entries()) {
      const event = events[i];
      if (row === undefined)
        return conflict(events[knownIndex].id, 'is recorded, but the rest of this batch is not');
      if (row.stream !== stream) return conflict(event.id, 'is recorded in another stream');
      if (
        row.type !== event.type ||
        canonicalize(JSON.parse(row.data)) !== canonicalize(JSON.parse(event.data))
      ) {
        return conflict(event.id, 'was recorded with different content');
      }
      originals.push({ id: row.id, revision: row.revision, position: row.position });
    }
    return { written: appendResult(originals, true) };
  }
}
