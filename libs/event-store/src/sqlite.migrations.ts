/**
 * Upgrades a SQLite log written before streams and event ids were scoped by tenant. That
 * layout named runs `run-<runId>` and receipts `receipt-<receiptId>` and held every event id
 * unique across the whole log. The upgrade renames each such stream into its tenant (read
 * from the events' own `tenantId` metadata, which the server always stamped), fills the
 * id scope, and keeps every position, revision and byte of data and metadata: the hash chain
 * covers the tenant and run, not the stream's name, so replays still verify. It runs in one
 * transaction when the store opens a file in the old layout, and never again.
 */
import type { Database } from 'better-sqlite3';
import {
  RECEIPT_STREAM_PREFIX,
  RUN_STREAM_PREFIX,
  eventIdScope,
  receiptStream,
  runStream,
} from '@runledger/domain/stream-names';

interface LegacyRow {
  position: number;
  stream: string;
  metadata: string;
}

const COPY_BATCH = 1000;

/**
 * Event ids are unique within `id_scope`, the stream's tenant (`eventIdScope`): two tenants
 * may use one id, and neither can take an id from the other.
 */
export const EVENTS_SCHEMA = `
  CREATE TABLE IF NOT EXISTS events (
    position    INTEGER PRIMARY KEY AUTOINCREMENT,
    stream      TEXT    NOT NULL,
    revision    INTEGER NOT NULL,
    id_scope    TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    data        TEXT    NOT NULL,
    metadata    TEXT    NOT NULL,
    recorded_at TEXT    NOT NULL,
    UNIQUE (stream, revision),
    UNIQUE (id_scope, id)
  );
  -- A thread's events across its runs, for a reader following one thread.
  CREATE INDEX IF NOT EXISTS events_by_thread ON events (
    json_extract(metadata, '$.tenantId'), json_extract(metadata, '$.threadId'), position
  );
`;

/** Answers whether the file was in the old layout (and is now upgraded). */
export function migrateSqliteLog(db: Database): boolean {
  const columns = db.prepare("SELECT name FROM pragma_table_info('events')").all() as {
    name: string;
  }[];
  if (columns.length === 0 || columns.some((column) => column.name === 'id_scope')) return false;
  db.transaction(() => {
    db.exec('ALTER TABLE events RENAME TO events_legacy');
    db.exec(EVENTS_SCHEMA);
    const page = db.prepare<[number, number], LegacyRow>(
      'SELECT position, stream, metadata FROM events_legacy WHERE position > ? ORDER BY position LIMIT ?',
    );
    const copy = db.prepare<[string, string, number]>(
      `INSERT INTO events (position, stream, revision, id_scope, id, type, data, metadata, recorded_at)
       SELECT position, ?, revision, ?, id, type, data, metadata, recorded_at
       FROM events_legacy WHERE position = ?`,
    );
    for (let after = 0; ;) {
      const rows = page.all(after, COPY_BATCH);
      for (const row of rows) {
        const stream = tenantScopedName(row.stream, row.metadata);
        copy.run(stream, eventIdScope(stream), row.position);
      }
      if (rows.length < COPY_BATCH) break;
      after = rows[rows.length - 1].position;
    }
    db.exec('DROP TABLE events_legacy');
  })();
  return true;
}

/** The stream's name in its tenant; a name of no known kind, or without a tenant, is kept. */
function tenantScopedName(stream: string, metadataJson: string): string {
  const metadata = JSON.parse(metadataJson) as Record<string, unknown>;
  const tenantId = metadata.tenantId;
  if (typeof tenantId !== 'string' || tenantId === '') return stream;
  if (stream.startsWith(RUN_STREAM_PREFIX))
    return runStream(tenantId, stream.slice(RUN_STREAM_PREFIX.length));
  if (stream.startsWith(RECEIPT_STREAM_PREFIX))
    return receiptStream(tenantId, stream.slice(RECEIPT_STREAM_PREFIX.length));
  return stream;
}
