/**
 * The client surface's read models in their own SQLite file (DATA_DIR/client-surface.db):
 * per-tenant notifications with the fold state behind them, who each thread is for, and
 * channel bindings. Disposable like every read model: deleting the file rebuilds it from the
 * log at the next start. Commits without fsync (synchronous=NORMAL) for the same reason.
 */
import { Checkpoints } from '@runledger/event-store';
import Database, { type Database as Db, type Statement } from 'better-sqlite3';
import type { ChannelBound, Notification, NotificationThread } from '@runledger/domain';

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS notification_threads (
    tenant_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    state     TEXT NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
  );
  CREATE TABLE IF NOT EXISTS notifications (
    tenant_id TEXT    NOT NULL,
    position  INTEGER NOT NULL,
    thread_id TEXT    NOT NULL,
    item      TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, position)
  );
  CREATE INDEX IF NOT EXISTS notifications_by_position ON notifications (position);
  CREATE INDEX IF NOT EXISTS notifications_by_thread ON notifications (tenant_id, thread_id, position);
  CREATE TABLE IF NOT EXISTS thread_users (
    tenant_id TEXT NOT NULL,
    user      TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    PRIMARY KEY (tenant_id, user, thread_id)
  );
  CREATE TABLE IF NOT EXISTS bindings (
    stream     TEXT    PRIMARY KEY,
    tenant_id  TEXT    NOT NULL,
    binding_id TEXT    NOT NULL,
    channel    TEXT    NOT NULL,
    account    TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    topic      TEXT,
    thread_id  TEXT    NOT NULL,
    bound_by   TEXT    NOT NULL,
    bound_at   TEXT    NOT NULL,
    position   INTEGER NOT NULL
  );
  CREATE INDEX IF NOT EXISTS bindings_by_account ON bindings (tenant_id, channel, account, position);
  CREATE INDEX IF NOT EXISTS bindings_by_thread ON bindings (tenant_id, thread_id);
`;

/**
 * Bumped when the follower folds the log differently: a file folded before is refolded at
 * start. 1: every user of a thread is recorded (it was its first 32). 2: a blocked item's
 * question is cut at 4,096 characters.
 */
const FOLD_VERSION = 2;

/** What the follower folds from the log: dropped by `clear`, refolded from position 0. */
const FOLDED_TABLES = ['notification_threads', 'notifications', 'thread_users', 'bindings'];

export const SURFACE_CHECKPOINT = 'client-surface';
/** The log head a refold from an empty store set out for: the views are partial below it. */
const REBUILD_TARGET = 'client-surface-rebuild-target';
/** A user in at most this many threads has their notifications read from those threads. */
const FEW_THREADS = 1000;
/** How far the notifications were published to Kafka, before each topic had its own. */
const PUBLISHED_CHECKPOINT = 'notifications-published';

/** How far the notifications were published to one Kafka topic (notification-publisher.ts). */
function publishedCheckpoint(topic: string): string {
  return `${PUBLISHED_CHECKPOINT}:${topic}`;
}

/** A binding as `GET /v1/bindings` lists it. */
export interface BindingView extends ChannelBound {
  boundAt: string;
  position: number;
}

export interface BindingRow {
  stream: string;
  tenantId: string;
  binding: ChannelBound;
  boundAt: string;
  position: number;
}

export interface SurfaceBatch {
  threads: readonly NotificationThread[];
  notifications: readonly { tenantId: string; item: Notification }[];
  users: readonly { tenantId: string; user: string; threadId: string }[];
  bindings: readonly BindingRow[];
  position: number;
}

interface BindingRecord {
  binding_id: string;
  channel: string;
  account: string;
  chat: string;
  topic: string | null;
  thread_id: string;
  bound_by: string;
  bound_at: string;
  position: number;
}

export class SurfaceStore {
  private readonly db: Db;
  private readonly checkpoints: Checkpoints;
  private readonly selectThread: Statement<[string, string], { state: string }>;
  private readonly selectNotifications: Statement<[string, number, number], { item: string }>;
  private readonly selectUserNotifications: Statement<
    [string, number, string, number],
    { item: string }
  >;
  private readonly selectFewThreadsNotifications: Statement<
    [string, number, string, number],
    { item: string }
  >;
  private readonly countUserThreads: Statement<[string, string], { n: number }>;
  private readonly selectAllNotifications: Statement<
    [number, number],
    { tenant_id: string; item: string }
  >;
  private readonly selectBound: Statement<[string, string], { found: number }>;
  private readonly commitTx: (batch: SurfaceBatch) => void;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec(SCHEMA);
    this.checkpoints = new Checkpoints(this.db);
    if (this.db.pragma('user_version', { simple: true }) !== FOLD_VERSION) {
      // Folded by another version of the rules: refolded from the log (what was published
      // to Kafka stays published).
      this.clear();
      this.db.pragma(`user_version = ${FOLD_VERSION}`);
    }
    this.selectThread = this.db.prepare(
      'SELECT state FROM notification_threads WHERE tenant_id = ? AND thread_id = ?',
    );
    this.selectNotifications = this.db.prepare(
      `SELECT item FROM notifications WHERE tenant_id = ? AND position > ?
       ORDER BY position LIMIT ?`,
    );
    this.selectUserNotifications = this.db.prepare(
      `SELECT n.item FROM notifications n
       WHERE n.tenant_id = ? AND n.position > ? AND EXISTS (
         SELECT 1 FROM thread_users u
         WHERE u.tenant_id = n.tenant_id AND u.user = ? AND u.thread_id = n.thread_id)
       ORDER BY n.position LIMIT ?`,
    );
    // From the user's threads (CROSS JOIN keeps them the outer loop), then sorted.
    this.selectFewThreadsNotifications = this.db.prepare(
      `SELECT n.item FROM thread_users u CROSS JOIN notifications n
       WHERE u.tenant_id = ? AND n.position > ? AND u.user = ?
         AND n.tenant_id = u.tenant_id AND n.thread_id = u.thread_id
       ORDER BY n.position LIMIT ?`,
    );
    this.countUserThreads = this.db.prepare(
      `SELECT COUNT(*) AS n FROM (
         SELECT 1 FROM thread_users WHERE tenant_id = ? AND user = ? LIMIT ${FEW_THREADS + 1})`,
    );
    this.selectAllNotifications = this.db.prepare(
      'SELECT tenant_id, item FROM notifications WHERE position > ? ORDER BY position LIMIT ?',
    );
    this.selectBound = this.db.prepare(
      'SELECT 1 AS found FROM bindings WHERE tenant_id = ? AND thread_id = ? LIMIT 1',
    );
    const upsertThread = this.db.prepare(
      `INSERT INTO notification_threads (tenant_id, thread_id, state) VALUES (?, ?, ?)
       ON CONFLICT (tenant_id, thread_id) DO UPDATE SET state = excluded.state`,
    );
    const insertNotification = this.db.prepare(
      'INSERT OR IGNORE INTO notifications (tenant_id, position, thread_id, item) VALUES (?, ?, ?, ?)',
    );
    const insertUser = this.db.prepare(
      'INSERT OR IGNORE INTO thread_users (tenant_id, user, thread_id) VALUES (?, ?, ?)',
    );
    const insertBinding = this.db.prepare(
      `INSERT OR IGNORE INTO bindings
         (stream, tenant_id, binding_id, channel, account, chat, topic, thread_id, bound_by, bound_at, position)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.commitTx = this.db.transaction((batch: SurfaceBatch) => {
      for (const state of batch.threads) {
        upsertThread.run(state.tenantId, state.threadId, JSON.stringify(state));
      }
      for (const { tenantId, item } of batch.notifications) {
        insertNotification.run(tenantId, item.position, item.threadId, JSON.stringify(item));
      }
      for (const { tenantId, user, threadId } of batch.users) {
        insertUser.run(tenantId, user, threadId);
      }
      for (const { stream, tenantId, binding, boundAt, position } of batch.bindings) {
        insertBinding.run(
          stream,
          tenantId,
          binding.bindingId,
          binding.channel,
          binding.account,
          binding.chat,
          binding.topic ?? null,
          binding.threadId,
          binding.boundBy,
          boundAt,
          position,
        );
      }
      this.checkpoints.save(SURFACE_CHECKPOINT, batch.position);
    });
  }

  checkpoint(): number {
    return this.checkpoints.get(SURFACE_CHECKPOINT);
  }

  /** Nothing folded yet: every batch moves the checkpoint, whatever streams it held. */
  isEmpty(): boolean {
    return this.checkpoint() === 0;
  }

  /** Records that a refold from empty sets out for `target`, so a restart part way knows of it. */
  startRebuild(target: number): void {
    this.checkpoints.save(REBUILD_TARGET, target);
  }

  rebuildTarget(): number {
    return this.checkpoints.get(REBUILD_TARGET);
  }

  /** Fold states, notifications, users, bindings and the checkpoint, in one transaction. */
  commit(batch: SurfaceBatch): void {
    this.commitTx(batch);
  }

  /** Every tenant's notifications after `after`, oldest first: what the Kafka publisher sends next. */
  notificationsAfter(after: number, limit: number): { tenantId: string; item: Notification }[] {
    const rows = this.selectAllNotifications.all(after, limit);
    return rows.map((row) => ({
      tenantId: row.tenant_id,
      item: JSON.parse(row.item) as Notification,
    }));
  }

  /**
   * How far the notifications were published to `topic`: a topic new to this file starts from
   * the first item. The one position a file kept before each topic had its own is taken over
   * by the first topic that asks.
   */
  published(topic: string): number {
    const name = publishedCheckpoint(topic);
    this.db.transaction(() => this.checkpoints.takeOver(PUBLISHED_CHECKPOINT, name))();
    return this.checkpoints.get(name);
  }

  savePublished(topic: string, position: number): void {
    this.checkpoints.save(publishedCheckpoint(topic), position);
  }

  notificationThread(tenantId: string, threadId: string): NotificationThread | null {
    const row = this.selectThread.get(tenantId, threadId);
    return row ? (JSON.parse(row.state) as NotificationThread) : null;
  }

  /** The tenant's notifications after `after`, oldest first; with `user`, only that user's threads. */
  notifications(
    tenantId: string,
    query: { after: number; user?: string; limit: number },
  ): Notification[] {
    const { user, after, limit } = query;
    // Walking the tenant's notifications and testing each for the user's threads costs the
    // tenant's notifications after `after` when the user is in few of them (none at all: it
    // read them all, for every page and every commit a stream woke for). A user in few threads
    // is read from those threads instead; one in many, whose notifications are many, is
    // walked, where sorting them all would cost more.
    const rows =
      user === undefined
        ? this.selectNotifications.all(tenantId, after, limit)
        : (this.countUserThreads.get(tenantId, user)?.n ?? 0) <= FEW_THREADS
          ? this.selectFewThreadsNotifications.all(tenantId, after, user, limit)
          : this.selectUserNotifications.all(tenantId, after, user, limit);
    return rows.map((row) => JSON.parse(row.item) as Notification);
  }

  /** The tenant's bindings, oldest first, filtered by channel and account when given. */
  bindings(
    tenantId: string,
    query: { channel?: string; account?: string; after: number; limit: number },
  ): BindingView[] {
    const where = ['tenant_id = ?', 'position > ?'];
    const params: (string | number)[] = [tenantId, query.after];
    if (query.channel !== undefined) {
      where.push('channel = ?');
      params.push(query.channel);
    }
    if (query.account !== undefined) {
      where.push('account = ?');
      params.push(query.account);
    }
    params.push(query.limit);
    const rows = this.db
      .prepare(
        `SELECT binding_id, channel, account, chat, topic, thread_id, bound_by, bound_at, position
         FROM bindings WHERE ${where.join(' AND ')} ORDER BY position LIMIT ?`,
      )
      .all(...params) as BindingRecord[];
    return rows.map(toBindingView);
  }

  /** Whether any binding of the tenant names the thread. */
  isBound(tenantId: string, threadId: string): boolean {
    return this.selectBound.get(tenantId, threadId) !== undefined;
  }

  /**
   * Drops what the follower folded and its checkpoint, so the next follower refolds it from
   * the log. How far the notifications were published stays: none is published twice.
   */
  clear(): void {
    this.db.transaction(() => {
      for (const table of FOLDED_TABLES) this.db.exec(`DELETE FROM ${table}`);
      this.checkpoints.save(SURFACE_CHECKPOINT, 0);
      this.checkpoints.save(REBUILD_TARGET, 0);
    })();
  }

  close(): void {
    this.db.close();
  }
}

function toBindingView(row: BindingRecord): BindingView {
  return {
    bindingId: row.binding_id,
    threadId: row.thread_id,
    channel: row.channel,
    account: row.account,
    chat: row.chat,
    ...(row.topic === null ? {} : { topic: row.topic }),
    boundBy: row.bound_by,
    boundAt: row.bound_at,
    position: row.position,
  };
}
