/**
 * The mirror's own SQLite file (DATA_DIR/mirror.db), the same whether the log is SQLite or
 * EventStoreDB: its checkpoint (the position of the last event the broker acknowledged, or
 * parked) and its parked events. A parked row and the checkpoint that passes it commit in
 * one transaction, so an event is never both behind the checkpoint and unrecorded.
 */
import { parseStreamName } from '@runledger/domain';
import { Checkpoints } from '@runledger/event-store';
import Database, { type Database as Db, type Statement } from 'better-sqlite3';

/**
 * Keyed by topic and position, the one id unique across the log: event ids are unique per
 * tenant only, so two tenants' events may share one and must each keep their own parked row;
 * and each topic has its own checkpoint, so an event parked for one topic may be published to
 * another.
 */
const SCHEMA = `
  CREATE TABLE IF NOT EXISTS parked (
    topic           TEXT    NOT NULL,
    position        INTEGER NOT NULL,
    event_id        TEXT    NOT NULL,
    stream          TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    tenant_id       TEXT,
    reason          TEXT    NOT NULL,
    parked_at       TEXT    NOT NULL,
    attempts        INTEGER NOT NULL,
    last_attempt_at TEXT    NOT NULL,
    redriven_at     TEXT,
    PRIMARY KEY (topic, position)
  );
  CREATE INDEX IF NOT EXISTS parked_waiting ON parked (topic, redriven_at, position);
  CREATE INDEX IF NOT EXISTS parked_by_topic_and_event_id ON parked (topic, event_id);
`;

/**
 * A mirror.db written before rows were kept per topic (keyed by event id, then by position):
 * its rows move into the table above under the shared topic (''), which the first topic to
 * open the file takes over with the shared checkpoint.
 */
function migrateParkedTable(db: Db): void {
  const columns = db.prepare("SELECT name FROM pragma_table_info('parked')").all() as {
    name: string;
  }[];
  if (columns.length === 0 || columns.some((column) => column.name === 'topic')) return;
  const kept =
    'position, event_id, stream, type, tenant_id, reason, parked_at, attempts, last_attempt_at, redriven_at';
  db.transaction(() => {
    db.exec('ALTER TABLE parked RENAME TO parked_before_topics');
    db.exec('DROP INDEX IF EXISTS parked_by_position');
    db.exec('DROP INDEX IF EXISTS parked_by_event_id');
    db.exec(SCHEMA);
    db.exec(`INSERT INTO parked (topic, ${kept}) SELECT '', ${kept} FROM parked_before_topics`);
    db.exec('DROP TABLE parked_before_topics');
  })();
}

/** The checkpoint of a mirror.db kept before each topic had its own, and of a store given none. */
const SHARED_CHECKPOINT = 'kafka';

export interface MirrorStoreOptions {
  /**
   * The topic the checkpoint is kept for: a topic this file has not published to starts from
   * the log's start, where a shared checkpoint would leave the history out of it.
   */
  topic?: string;
}

export interface ParkedEvent {
  eventId: string;
  position: number;
  stream: string;
  type: string;
  /** Its tenant stamp, else the tenant its stream is named for; null when neither names one. */
  tenantId: string | null;
  reason: string;
  parkedAt: string;
  attempts: number;
  lastAttemptAt: string;
  /** Set once a retry published it; such rows stay as the record of what happened. */
  redrivenAt: string | null;
}

/** What parking an event records; the rest of a ParkedEvent is the store's bookkeeping. */
export type ParkRequest = Pick<
  ParkedEvent,
  'eventId' | 'position' | 'stream' | 'type' | 'tenantId' | 'reason'
>;

interface ParkedRow {
  event_id: string;
  position: number;
  stream: string;
  type: string;
  tenant_id: string | null;
  reason: string;
  parked_at: string;
  attempts: number;
  last_attempt_at: string;
  redriven_at: string | null;
}

export class MirrorStore {
  private readonly db: Db;
  private readonly checkpoints: Checkpoints;
  private readonly checkpointName: string;
  /** The topic whose parked rows this store reads and writes ('': the shared one). */
  private readonly topic: string;
  private readonly statements: {
    park: Statement<
      [string, string, number, string, string, string | null, string, string, string]
    >;
    get: Statement<[string, string, string | null, string | null], ParkedRow>;
    at: Statement<[string, number], ParkedRow>;
    list: Statement<[string, string | null, string | null, number, number], ParkedRow>;
    count: Statement<[string], { n: number }>;
    attempt: Statement<[string, string, string, number]>;
    redriven: Statement<[string, string, string, number]>;
  };
  private readonly commitTx: (parked: readonly ParkRequest[], position: number, at: string) => void;

  constructor(file: string, options: MirrorStoreOptions = {}) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    // A lost tail costs re-publishing (consumers dedupe by tenant and id), never a skipped event: the
    // checkpoint and the parked rows it passes are lost together or kept together.
    this.db.pragma('synchronous = NORMAL');
    migrateParkedTable(this.db);
    this.db.exec(SCHEMA);
    tenantUnstampedRows(this.db);
    this.checkpoints = new Checkpoints(this.db);
    this.topic = options.topic ?? '';
    this.checkpointName =
      options.topic === undefined ? SHARED_CHECKPOINT : `${SHARED_CHECKPOINT}:${options.topic}`;
    if (options.topic !== undefined) {
      adoptShared(this.db, this.checkpoints, this.checkpointName, options.topic);
    }
    this.statements = {
      park: this.db.prepare(
        `INSERT INTO parked (topic, event_id, position, stream, type, tenant_id, reason, parked_at, attempts, last_attempt_at, redriven_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, NULL)
         ON CONFLICT (topic, position) DO UPDATE SET reason = excluded.reason, attempts = attempts + 1,
           last_attempt_at = excluded.last_attempt_at, redriven_at = NULL`,
      ),
      // The tenant's own event before one with no tenant stamp that shares its id.
      get: this.db.prepare(
        `SELECT * FROM parked WHERE topic = ? AND event_id = ?
           AND (tenant_id IS ? OR tenant_id IS NULL OR ? IS NULL)
         ORDER BY tenant_id IS NULL, position LIMIT 1`,
      ),
      at: this.db.prepare('SELECT * FROM parked WHERE topic = ? AND position = ?'),
      list: this.db.prepare(
        `SELECT * FROM parked WHERE topic = ? AND redriven_at IS NULL
           AND (tenant_id IS ? OR tenant_id IS NULL OR ? IS NULL)
         AND position > ? ORDER BY position LIMIT ?`,
      ),
      count: this.db.prepare(
        'SELECT COUNT(*) AS n FROM parked WHERE topic = ? AND redriven_at IS NULL',
      ),
      attempt: this.db.prepare(
        `UPDATE parked SET attempts = attempts + 1, reason = ?, last_attempt_at = ?
         WHERE topic = ? AND position = ?`,
      ),
      redriven: this.db.prepare(
        `UPDATE parked SET attempts = attempts + 1, redriven_at = ?, last_attempt_at = ?
         WHERE topic = ? AND position = ?`,
      ),
    };
    this.commitTx = this.db.transaction(
      (parked: readonly ParkRequest[], position: number, at: string) => {
        for (const p of parked) {
          this.statements.park.run(
            this.topic,
            p.eventId,
            p.position,
            p.stream,
            p.type,
            p.tenantId,
            p.reason,
            at,
            at,
          );
        }
        this.checkpoints.save(this.checkpointName, position);
      },
    );
  }

  checkpoint(): number {
    return this.checkpoints.get(this.checkpointName);
  }

  /** Parks `parked` and moves the checkpoint to `position`, in one transaction. */
  commit(parked: readonly ParkRequest[], position: number, at: Date = new Date()): void {
    this.commitTx(parked, position, at.toISOString());
  }

  /**
   * The parked event with this id that `tenantId` may see (its own, or one with no tenant
   * stamp); null `tenantId`: any tenant's.
   */
  parked(eventId: string, tenantId: string | null): ParkedEvent | null {
    const row = this.statements.get.get(this.topic, eventId, tenantId, tenantId);
    return row ? toParked(row) : null;
  }

  parkedAt(position: number): ParkedEvent | null {
    const row = this.statements.at.get(this.topic, position);
    return row ? toParked(row) : null;
  }

  /**
   * Events still parked, oldest first: a tenant's own and those with no tenant stamp (they
   * name no tenant's data); `tenantId` null lists all.
   */
  listParked(tenantId: string | null, afterPosition = 0, limit = 100): ParkedEvent[] {
    return this.statements.list
      .all(this.topic, tenantId, tenantId, afterPosition, limit)
      .map(toParked);
  }

  parkedCount(): number {
    return this.statements.count.get(this.topic)?.n ?? 0;
  }

  recordAttempt(position: number, reason: string, at: Date = new Date()): void {
    this.statements.attempt.run(reason, at.toISOString(), this.topic, position);
  }

  markRedriven(position: number, at: Date = new Date()): void {
    this.statements.redriven.run(at.toISOString(), at.toISOString(), this.topic, position);
  }

  close(): void {
    this.db.close();
  }
}

function toParked(row: ParkedRow): ParkedEvent {
  return {
    eventId: row.event_id,
    position: row.position,
    stream: row.stream,
    type: row.type,
    tenantId: row.tenant_id,
    reason: row.reason,
    parkedAt: row.parked_at,
    attempts: row.attempts,
    lastAttemptAt: row.last_attempt_at,
    redrivenAt: row.redriven_at,
  };
}

/**
 * Rows parked before an event without a tenant stamp was given its stream's tenant: each is
 * given it now, so only that tenant's admin lists it (a row whose stream names no tenant is
 * still every admin's: it reveals none).
 */
function tenantUnstampedRows(db: Db): void {
  const rows = db
    .prepare<[], { position: number; stream: string }>(
      'SELECT position, stream FROM parked WHERE tenant_id IS NULL',
    )
    .all();
  const update = db.prepare<[string, number]>('UPDATE parked SET tenant_id = ? WHERE position = ?');
  db.transaction(() => {
    for (const { position, stream } of rows) {
      const tenantId = parseStreamName(stream)?.tenantId;
      if (tenantId !== undefined) update.run(tenantId, position);
    }
  })();
}

/**
 * A mirror.db kept before each topic had its own checkpoint and rows has one checkpoint, and
 * its parked rows, for the topic it published to: the first topic that opens it takes them
 * over (an upgrade goes on where it stood), and they are spent, so a topic opened later
 * starts from the log's start.
 */
function adoptShared(db: Db, checkpoints: Checkpoints, name: string, topic: string): void {
  db.transaction(() => {
    if (checkpoints.takeOver(SHARED_CHECKPOINT, name)) {
      db.prepare("UPDATE parked SET topic = ? WHERE topic = ''").run(topic);
    }
  })();
}
