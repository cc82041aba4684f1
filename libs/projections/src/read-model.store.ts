/**
 * The read models' own SQLite file (DATA_DIR/read-models.db), the same whether the log is
 * SQLite or EventStoreDB. Disposable by design: everything here is rebuilt from the log, so
 * it commits without fsync (synchronous=NORMAL) and a crash costs only catch-up time.
 */
import { Checkpoints } from '@runledger/event-store';
import Database, { type Database as Db, type Statement } from 'better-sqlite3';
import type { ThreadState, ThreadStatus, ThreadSummary } from '@runledger/domain';

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS threads (
    tenant_id        TEXT    NOT NULL,
    thread_id        TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    title            TEXT,
    last_activity_at TEXT    NOT NULL,
    pending_count    INTEGER NOT NULL,
    position         INTEGER NOT NULL,
    state            TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
  );
  CREATE INDEX IF NOT EXISTS threads_by_activity
    ON threads (tenant_id, last_activity_at DESC, thread_id DESC);
  CREATE INDEX IF NOT EXISTS threads_by_status
    ON threads (tenant_id, status, last_activity_at DESC, thread_id DESC);
`;

/** A row of the thread list: the thread's summary as the fold defines it. */
export type ThreadListItem = ThreadSummary;

export interface ThreadListQuery {
  status?: ThreadStatus;
  limit: number;
  /** Opaque: from a previous page's `nextCursor`. */
  after?: { lastActivityAt: string; threadId: string };
}

interface ThreadRow {
  thread_id: string;
  title: string | null;
  status: ThreadStatus;
  last_activity_at: string;
  pending_count: number;
  position: number;
}

export const THREADS_CHECKPOINT = 'threads';

export class ReadModelStore {
  private readonly db: Db;
  private readonly checkpoints: Checkpoints;
  private readonly statements: {
    thread: Statement<[string, string], { state: string }>;
    upsert: Statement<[string, string, string, string | null, string, number, number, string]>;
    count: Statement<[], { n: number }>;
  };
  private readonly commitTx: (states: readonly ThreadState[], position: number) => void;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec(SCHEMA);
    this.checkpoints = new Checkpoints(this.db);
    this.statements = {
      thread: this.db.prepare('SELECT state FROM threads WHERE tenant_id = ? AND thread_id = ?'),
      upsert: this.db.prepare(
        `INSERT INTO threads (tenant_id, thread_id, status, title, last_activity_at, pending_count, position, state)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (tenant_id, thread_id) DO UPDATE SET
           status = excluded.status, title = excluded.title, last_activity_at = excluded.last_activity_at,
           pending_count = excluded.pending_count, position = excluded.position, state = excluded.state`,
      ),
      count: this.db.prepare('SELECT COUNT(*) AS n FROM threads'),
    };
    this.commitTx = this.db.transaction((states: readonly ThreadState[], position: number) => {
      for (const state of states) {
        this.statements.upsert.run(
          state.tenantId,
          state.threadId,
          state.status,
          state.title,
          state.lastActivityAt,
          state.pendingApprovals.length,
          state.position,
          JSON.stringify(state),
        );
      }
      this.checkpoints.save(THREADS_CHECKPOINT, position);
    });
  }

  thread(tenantId: string, threadId: string): ThreadState | null {
    const row = this.statements.thread.get(tenantId, threadId);
    return row ? (JSON.parse(row.state) as ThreadState) : null;
  }

  /** View updates and the checkpoint, in one transaction. */
  commit(states: readonly ThreadState[], position: number): void {
    this.commitTx(states, position);
  }

  checkpoint(): number {
    return this.checkpoints.get(THREADS_CHECKPOINT);
  }

  isEmpty(): boolean {
    return (this.statements.count.get()?.n ?? 0) === 0 && this.checkpoint() === 0;
  }

  /** Newest activity first; ties broken by thread id so pages never overlap or skip. */
  listThreads(tenantId: string, query: ThreadListQuery): ThreadListItem[] {
    const where = ['tenant_id = ?'];
    const params: (string | number)[] = [tenantId];
    if (query.status) {
      where.push('status = ?');
      params.push(query.status);
    }
    if (query.after) {
      where.push('(last_activity_at, thread_id) < (?, ?)');
      params.push(query.after.lastActivityAt, query.after.threadId);
    }
    params.push(query.limit);
    const rows = this.db
      .prepare(
        `SELECT thread_id, title, status, last_activity_at, pending_count, position FROM threads
         WHERE ${where.join(' AND ')} ORDER BY last_activity_at DESC, thread_id DESC LIMIT ?`,
      )
      .all(...params) as ThreadRow[];
    return rows.map((row) => ({
      threadId: row.thread_id,
      title: row.title,
      status: row.status,
      lastActivityAt: row.last_activity_at,
      pendingApprovalCount: row.pending_count,
      position: row.position,
    }));
  }

  /** Drops every read model and the checkpoint: the next projection pass is a rebuild. */
  clear(): void {
    this.db.transaction(() => {
      this.db.exec('DELETE FROM threads; DELETE FROM checkpoints;');
    })();
  }

  close(): void {
    this.db.close();
  }
}
