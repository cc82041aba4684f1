/**
 * The read models' own SQLite file (DATA_DIR/read-models.db), the same whether the log is
 * SQLite or EventStoreDB. Disposable by design: everything here is rebuilt from the log, so
 * it commits without fsync (synchronous=NORMAL) and a crash costs only catch-up time.
 *
 * A thread is stored by row, so folding one event costs the same however long it is:
 * - `threads`: one header row (title, status, runs, pending approvals, active tools,
 *   position, message count), which the thread list also reads;
 * - `thread_messages`: one row per message (id, role, metadata, how many parts);
 * - `thread_parts`: one row per part; a tool part is found by (run, toolCallId), so its
 *   start, approval and finish update that one row in whatever order they come. A part
 *   holds a tool's whole output (kilobytes), so this table keeps its rowid: in a WITHOUT
 *   ROWID table rows that large, rewritten as a call finishes, made the file twice the
 *   log's size and the rebuild a third slower;
 * - `thread_approvals`: which tool part an approval was requested for.
 * Messages are numbered in thread order (`seq`), which is what pages and cursors use.
 *
 * The projector is the one writer, so between its commits it keeps the threads it folded
 * (least recently used dropped first, bounded in bytes): their headers, last messages, open
 * tool parts and lookups. A thread it created itself has every row in memory, so a lookup
 * that misses there (a new tool call, a new message id) misses without asking SQLite.
 */
import { jsonArray } from '@runledger/domain/json-array';
import { Checkpoints } from '@runledger/event-store/checkpoints';
import Database, { type Database as Db } from 'better-sqlite3';
import {
  countRuns,
  emptyHeader,
  isOpenToolPart,
  isToolPart,
  threadKey,
  toolKey,
  type MessageSource,
  type MessageTail,
  type PartLocation,
  type RunSummary,
  type ThreadHeader,
  type ThreadRows,
  type ThreadState,
  type ThreadStatus,
  type ToolLocation,
  type ToolPart,
  type UIMessage,
  type UIMessagePart,
} from '@runledger/domain/projections';
import type {
  MessagePage,
  ReadModelWriter,
  ThreadHead,
  ThreadListItem,
  ThreadListQuery,
  ThreadReadModels,
} from './read-model.port';

/**
 * Bumped when the tables change shape or the fold writes them differently: an older file is
 * dropped and rebuilt from the log.
 */
const SCHEMA_VERSION = 17;

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS threads (
    tenant_id        TEXT    NOT NULL,
    thread_id        TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    title            TEXT, -- JSON: a text column would not keep a lone surrogate
    last_activity_at TEXT    NOT NULL,
    pending_count    INTEGER NOT NULL,
    position         INTEGER NOT NULL,
    message_count    INTEGER NOT NULL,
    header           TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
  );
  CREATE INDEX IF NOT EXISTS threads_by_activity
    ON threads (tenant_id, last_activity_at DESC, thread_id DESC);
  CREATE INDEX IF NOT EXISTS threads_by_status
    ON threads (tenant_id, status, last_activity_at DESC, thread_id DESC);

  CREATE TABLE IF NOT EXISTS thread_messages (
    tenant_id  TEXT    NOT NULL,
    thread_id  TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    id         TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    metadata   TEXT,
    part_count INTEGER NOT NULL,
    text_part  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, thread_id, seq)
  ) WITHOUT ROWID;
  CREATE UNIQUE INDEX IF NOT EXISTS thread_messages_by_id
    ON thread_messages (tenant_id, thread_id, id);
  CREATE INDEX IF NOT EXISTS thread_messages_with_text
    ON thread_messages (tenant_id, thread_id, seq) WHERE text_part >= 0;

  CREATE TABLE IF NOT EXISTS thread_parts (
    tenant_id    TEXT    NOT NULL,
    thread_id    TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    part         INTEGER NOT NULL,
    run_id       TEXT,
    tool_call_id TEXT,
    open         INTEGER NOT NULL,
    bytes        INTEGER NOT NULL,
    body         TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, thread_id, seq, part)
  );
  CREATE UNIQUE INDEX IF NOT EXISTS thread_parts_by_call
    ON thread_parts (tenant_id, thread_id, tool_call_id, run_id) WHERE tool_call_id IS NOT NULL;
  CREATE INDEX IF NOT EXISTS thread_parts_open
    ON thread_parts (tenant_id, thread_id, run_id) WHERE open = 1;

  CREATE TABLE IF NOT EXISTS thread_approvals (
    tenant_id    TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    approval_id  TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    PRIMARY KEY (tenant_id, thread_id, run_id, approval_id)
  ) WITHOUT ROWID;
`;

const TABLES = ['threads', 'thread_messages', 'thread_parts', 'thread_approvals', 'checkpoints'];

/** SQLite's page cache for this file, in KiB: the store's memory is bounded in bytes. */
const PAGE_CACHE_KIB = 32 * 1024;

/** Parts' bytes in one page of an export: 200 messages of megabyte tool outputs are not read at once. */
const EXPORT_PAGE_BYTES = 4 * 1024 * 1024;

/** What the writer keeps of the threads it folded, between commits. */
const WRITER_CACHE_BYTES = 32 * 1024 * 1024;

export interface ReadModelStoreOptions {
  /** Bytes of threads the writer keeps between commits (about): 0 keeps none. */
  writerCacheBytes?: number;
}

interface ThreadRow {
  thread_id: string;
  /** The title as JSON (see the schema). */
  title: string | null;
  status: ThreadStatus;
  last_activity_at: string;
  pending_count: number;
  position: number;
}

interface MessageRow {
  seq: number;
  id: string;
  role: UIMessage['role'];
  metadata: string | null;
  part_count: number;
  text_part: number;
}

interface PartRow {
  seq: number;
  part: number;
  /** The part's JSON as stored, in UTF-8: read as bytes, it is never decoded to a string. */
  body: Buffer;
}

export const THREADS_CHECKPOINT = 'threads';
/** The log head a rebuild from empty read models set out for: the views are partial below it. */
const REBUILD_TARGET = 'rebuild-target';

type Key2 = [string, string];

export class ReadModelStore implements ReadModelWriter<StoredThreadRows>, ThreadReadModels {
  private readonly db: Db;
  private readonly checkpoints: Checkpoints;
  private readonly statements: ReturnType<typeof prepare>;
  private readonly commitTx: (threads: readonly StoredThreadRows[], position: number) => void;
  private readonly written: WrittenThreads;

  constructor(file: string, options: ReadModelStoreOptions = {}) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.pragma(`cache_size = -${PAGE_CACHE_KIB}`);
    if (this.db.pragma('user_version', { simple: true }) !== SCHEMA_VERSION) {
      // Another shape of read models: they are disposable, the log rebuilds them.
      for (const table of TABLES) this.db.exec(`DROP TABLE IF EXISTS ${table}`);
      this.db.pragma(`user_version = ${SCHEMA_VERSION}`);
    }
    this.db.exec(SCHEMA);
    this.checkpoints = new Checkpoints(this.db);
    this.statements = prepare(this.db);
    this.written = new WrittenThreads(options.writerCacheBytes ?? WRITER_CACHE_BYTES);
    this.commitTx = this.db.transaction(
      (threads: readonly StoredThreadRows[], position: number) => {
        for (const thread of threads) thread.write();
        this.checkpoints.save(THREADS_CHECKPOINT, position);
      },
    );
  }

  /**
   * The thread's rows for the fold to read and change; nothing is written until `commit`.
   * Open each thread once per commit: the rows remember what the fold changed. They come
   * from what the last commits kept when they can, else from the header row.
   */
  openThread(tenantId: string, threadId: string): StoredThreadRows {
    return (
      this.written.take(tenantId, threadId) ??
      new StoredThreadRows(this.statements, tenantId, threadId, this.head(tenantId, threadId))
    );
  }

  /**
   * The fold's changes to the threads, and the checkpoint, in one transaction. Only once it
   * commits are the threads kept for the next batch: a batch that fails (here or in its fold)
   * leaves nothing in memory that the file does not hold.
   */
  commit(threads: readonly StoredThreadRows[], position: number): void {
    this.commitTx(threads, position);
    for (const thread of threads) this.written.keep(thread);
  }

  snapshot<T>(read: () => T): T {
    // A read transaction: WAL mode keeps the commit its first read saw until it ends.
    return this.db.transaction(read)();
  }

  head(tenantId: string, threadId: string): ThreadHead | null {
    const row = this.statements.head.get(tenantId, threadId);
    if (!row) return null;
    return { header: JSON.parse(row.header) as ThreadHeader, messageCount: row.message_count };
  }

  /**
   * Up to `limit` messages before the one numbered `before` (the newest when absent), oldest
   * first, and no more than fit in `maxBytes` of parts (at least one message). Reads those
   * messages' rows and parts only, and answers them as the JSON bytes the parts are stored in:
   * a page is never parsed, serialized or even decoded again.
   */
  messagePage(
    tenantId: string,
    threadId: string,
    limit: number,
    before = Number.MAX_SAFE_INTEGER,
    maxBytes = Number.POSITIVE_INFINITY,
  ): MessagePage {
    const rows = this.statements.pageBefore.all(tenantId, threadId, before, limit + 1);
    // Newest first, as many as fit.
    const taken = this.fitting(tenantId, threadId, rows.slice(0, limit), maxBytes);
    const hasMore = rows.length > taken;
    const page = rows.slice(0, taken).reverse();
    if (page.length === 0) return { messages: [], oldestSeq: null, hasMore: false };
    const parts = this.statements.partsBetween.all(
      tenantId,
      threadId,
      page[0].seq,
      page[page.length - 1].seq,
    );
    return { messages: messagesJson(page, parts), oldestSeq: page[0].seq, hasMore };
  }

  /**
   * Every message's JSON, oldest first, read a page of rows at a time (for exports): up to
   * `pageSize` messages, no more than fit in `maxBytes` of parts (at least one).
   */
  *allMessages(
    tenantId: string,
    threadId: string,
    pageSize = 200,
    maxBytes = EXPORT_PAGE_BYTES,
  ): Generator<Buffer[]> {
    for (let after = -1; ;) {
      const read = this.statements.pageAfter.all(tenantId, threadId, after, pageSize);
      if (read.length === 0) return;
      const rows = read.slice(0, this.fitting(tenantId, threadId, read, maxBytes));
      const parts = this.statements.partsBetween.all(
        tenantId,
        threadId,
        rows[0].seq,
        rows[rows.length - 1].seq,
      );
      yield messagesJson(rows, parts);
      after = rows[rows.length - 1].seq;
    }
  }

  /**
   * How many of `rows`, from the first, fit in `maxBytes` of parts: the first always, however
   * large it is alone. Sizes come from the part rows' own column, never their bodies.
   */
  private fitting(
    tenantId: string,
    threadId: string,
    rows: readonly MessageRow[],
    maxBytes: number,
  ): number {
    if (rows.length === 0 || !Number.isFinite(maxBytes)) return rows.length;
    const seqs = rows.map((row) => row.seq);
    const sizes = new Map<number, number>();
    for (const row of this.statements.bytesBetween.all(
      tenantId,
      threadId,
      Math.min(...seqs),
      Math.max(...seqs),
    )) {
      sizes.set(row.seq, row.bytes);
    }
    let taken = 0;
    let bytes = 0;
    while (taken < rows.length) {
      bytes += sizes.get(rows[taken].seq) ?? 0;
      if (taken > 0 && bytes > maxBytes) break;
      taken += 1;
    }
    return taken;
  }

  /**
   * Messages that have text, newest first, with their text parts only, read lazily a few at a
   * time (the voice seed, which never speaks a tool's output). A message's tool parts are
   * neither read nor parsed: an assistant's words grouped with nine megabyte outputs held the
   * event loop ~300 ms per seed when they were.
   */
  *messagesWithTextNewestFirst(tenantId: string, threadId: string): Generator<UIMessage> {
    const pageSize = 16;
    for (let before = Number.MAX_SAFE_INTEGER; ;) {
      const rows = this.statements.textBefore.all(tenantId, threadId, before, pageSize);
      if (rows.length === 0) return;
      for (const row of rows) {
        const [json] = messagesJson(
          [row],
          this.statements.textPartsOf.all(tenantId, threadId, row.seq),
        );
        yield JSON.parse(json.toString()) as UIMessage;
      }
      before = rows[rows.length - 1].seq;
    }
  }

  /** The newest tool part of the call (in `runId` when given), or null. */
  toolPart(
    tenantId: string,
    threadId: string,
    toolCallId: string,
    runId?: string,
  ): ToolPart | null {
    const row =
      runId === undefined
        ? this.statements.latestToolPart.get(tenantId, threadId, toolCallId)
        : this.statements.toolPart.get(tenantId, threadId, runId, toolCallId);
    return row ? (JSON.parse(row.body) as ToolPart) : null;
  }

  /** The whole thread in memory: for tests and small threads, never for a request. */
  thread(tenantId: string, threadId: string): ThreadState | null {
    const head = this.head(tenantId, threadId);
    if (!head) return null;
    const messages: UIMessage[] = [];
    for (const page of this.allMessages(tenantId, threadId)) {
      for (const json of page) messages.push(JSON.parse(json.toString()) as UIMessage);
    }
    return { ...head.header, messages };
  }

  checkpoint(): number {
    return this.checkpoints.get(THREADS_CHECKPOINT);
  }

  isEmpty(): boolean {
    return (this.statements.count.get()?.n ?? 0) === 0 && this.checkpoint() === 0;
  }

  /**
   * Records that a rebuild from empty read models sets out for `target`, so that a restart
   * after a crash part way knows the views are still partial (they are no longer empty).
   */
  startRebuild(target: number): void {
    this.checkpoints.save(REBUILD_TARGET, target);
  }

  /** The target of the last rebuild from empty read models (0: none): partial below it. */
  rebuildTarget(): number {
    return this.checkpoints.get(REBUILD_TARGET);
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
      title: row.title === null ? null : (JSON.parse(row.title) as string | null),
      status: row.status,
      lastActivityAt: row.last_activity_at,
      pendingApprovalCount: row.pending_count,
      position: row.position,
    }));
  }

  /** Drops every read model and the checkpoint: the next projection pass is a rebuild. */
  clear(): void {
    this.written.clear();
    this.db.transaction(() => {
      for (const table of TABLES) this.db.exec(`DELETE FROM ${table}`);
    })();
  }

  close(): void {
    this.db.close();
  }
}

function prepare(db: Db) {
  const message = 'seq, id, role, metadata, part_count, text_part';
  return {
    head: db.prepare<Key2, { header: string; message_count: number }>(
      'SELECT header, message_count FROM threads WHERE tenant_id = ? AND thread_id = ?',
    ),
    upsertHead: db.prepare<
      [string, string, string, string | null, string, number, number, number, string]
    >(
      `INSERT INTO threads (tenant_id, thread_id, status, title, last_activity_at, pending_count, position, message_count, header)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (tenant_id, thread_id) DO UPDATE SET
         status = excluded.status, title = excluded.title, last_activity_at = excluded.last_activity_at,
         pending_count = excluded.pending_count, position = excluded.position,
         message_count = excluded.message_count, header = excluded.header`,
    ),
    count: db.prepare<[], { n: number }>('SELECT COUNT(*) AS n FROM threads'),
    messageBySeq: db.prepare<[string, string, number], MessageRow>(
      `SELECT ${message} FROM thread_messages WHERE tenant_id = ? AND thread_id = ? AND seq = ?`,
    ),
    messageSeqById: db.prepare<[string, string, string], { seq: number }>(
      'SELECT seq FROM thread_messages WHERE tenant_id = ? AND thread_id = ? AND id = ?',
    ),
    upsertMessage: db.prepare<
      [string, string, number, string, string, string | null, number, number]
    >(
      `INSERT INTO thread_messages (tenant_id, thread_id, seq, id, role, metadata, part_count, text_part)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (tenant_id, thread_id, seq) DO UPDATE SET
         part_count = excluded.part_count, text_part = excluded.text_part`,
    ),
    pageBefore: db.prepare<[string, string, number, number], MessageRow>(
      `SELECT ${message} FROM thread_messages WHERE tenant_id = ? AND thread_id = ? AND seq < ?
       ORDER BY seq DESC LIMIT ?`,
    ),
    pageAfter: db.prepare<[string, string, number, number], MessageRow>(
      `SELECT ${message} FROM thread_messages WHERE tenant_id = ? AND thread_id = ? AND seq > ?
       ORDER BY seq LIMIT ?`,
    ),
    textBefore: db.prepare<[string, string, number, number], MessageRow>(
      `SELECT ${message} FROM thread_messages
       WHERE tenant_id = ? AND thread_id = ? AND seq < ? AND text_part >= 0
       ORDER BY seq DESC LIMIT ?`,
    ),
    bytesBetween: db.prepare<[string, string, number, number], { seq: number; bytes: number }>(
      `SELECT seq, SUM(bytes) AS bytes FROM thread_parts
       WHERE tenant_id = ? AND thread_id = ? AND seq BETWEEN ? AND ? GROUP BY seq`,
    ),
    partsBetween: db.prepare<[string, string, number, number], PartRow>(
      `SELECT seq, part, CAST(body AS BLOB) AS body FROM thread_parts
       WHERE tenant_id = ? AND thread_id = ? AND seq BETWEEN ? AND ? ORDER BY seq, part`,
    ),
    // A tool part always has its call's id; every other part is text.
    textPartsOf: db.prepare<[string, string, number], PartRow>(
      `SELECT seq, part, CAST(body AS BLOB) AS body FROM thread_parts
       WHERE tenant_id = ? AND thread_id = ? AND seq = ? AND tool_call_id IS NULL ORDER BY part`,
    ),
    part: db.prepare<[string, string, number, number], { body: string }>(
      'SELECT body FROM thread_parts WHERE tenant_id = ? AND thread_id = ? AND seq = ? AND part = ?',
    ),
    upsertPart: db.prepare<
      [string, string, number, number, string | null, string | null, number, number, string]
    >(
      `INSERT INTO thread_parts (tenant_id, thread_id, seq, part, run_id, tool_call_id, open, bytes, body)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (tenant_id, thread_id, seq, part) DO UPDATE SET
         open = excluded.open, bytes = excluded.bytes, body = excluded.body`,
    ),
    toolLocation: db.prepare<[string, string, string, string], { seq: number; part: number }>(
      `SELECT seq, part FROM thread_parts
       WHERE tenant_id = ? AND thread_id = ? AND run_id = ? AND tool_call_id = ?`,
    ),
    toolPart: db.prepare<[string, string, string, string], { body: string }>(
      `SELECT body FROM thread_parts
       WHERE tenant_id = ? AND thread_id = ? AND run_id = ? AND tool_call_id = ?`,
    ),
    // Left to itself, SQLite walks the thread's rows newest first to skip the sort, which costs
    // the whole thread for an early call; the call's index finds its few rows at once.
    latestToolPart: db.prepare<[string, string, string], { body: string }>(
      `SELECT body FROM thread_parts INDEXED BY thread_parts_by_call
       WHERE tenant_id = ? AND thread_id = ? AND tool_call_id = ? ORDER BY seq DESC, part DESC LIMIT 1`,
    ),
    openTools: db.prepare<
      [string, string, string],
      { seq: number; part: number; tool_call_id: string }
    >(
      `SELECT seq, part, tool_call_id FROM thread_parts
       WHERE tenant_id = ? AND thread_id = ? AND run_id = ? AND open = 1`,
    ),
    approval: db.prepare<[string, string, string, string], { tool_call_id: string }>(
      `SELECT tool_call_id FROM thread_approvals
       WHERE tenant_id = ? AND thread_id = ? AND run_id = ? AND approval_id = ?`,
    ),
    upsertApproval: db.prepare<[string, string, string, string, string]>(
      `INSERT INTO thread_approvals (tenant_id, thread_id, run_id, approval_id, tool_call_id)
       VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (tenant_id, thread_id, run_id, approval_id) DO UPDATE SET
         tool_call_id = excluded.tool_call_id`,
    ),
  };
}

type Statements = ReturnType<typeof prepare>;

/**
 * Message rows with their part rows (both in seq order) as AI SDK UIMessages in JSON, one
 * buffer a message: `{ id, role, parts, metadata? }`, the parts spliced in as stored.
 */
function messagesJson(rows: readonly MessageRow[], parts: readonly PartRow[]): Buffer[] {
  const bySeq = new Map<number, Buffer[]>();
  for (const part of parts) {
    let list = bySeq.get(part.seq);
    if (list === undefined) {
      list = [];
      bySeq.set(part.seq, list);
    }
    list.push(part.body);
  }
  return rows.map((row) =>
    jsonArray(
      bySeq.get(row.seq) ?? [],
      `{"id":${JSON.stringify(row.id)},"role":${JSON.stringify(row.role)},"parts":`,
      row.metadata === null ? '}' : `,"metadata":${row.metadata}}`,
    ),
  );
}

interface BufferedMessage {
  seq: number;
  id: string;
  role: UIMessage['role'];
  metadata: UIMessage['metadata'];
  partCount: number;
  textPart: number;
  dirty: boolean;
}

interface BufferedPart {
  location: PartLocation;
  runId: string | null;
  body: UIMessagePart;
  dirty: boolean;
  /** What the parsed body holds in memory (heldBytes of its JSON), for a part kept open. */
  bytes: number;
}

/** About what one lookup entry or kept message costs in memory (key, value, map slot). */
const ENTRY_BYTES = 160;

/** What each object or array costs parsed, beyond its text (V8, measured: 37–61 bytes). */
const CONTAINER_BYTES = 64;

/**
 * About the memory a JSON text takes once parsed, from the text alone: it is what the writer
 * keeps. Text and numbers take up to twice their JSON; each object or array takes up to
 * CONTAINER_BYTES more, so an input of 40,000 `{}` (120 KB of JSON, 2.5 MB parsed) is not
 * counted as 120 KB: threads of such parts filled the projector's heap at a tenth of the
 * writer's budget.
 */
function heldBytes(json: string): number {
  let containers = 0;
  for (let i = 0; i < json.length; i += 1) {
    const code = json.charCodeAt(i);
    if (code === OPEN_BRACE || code === OPEN_BRACKET) containers += 1;
  }
  return 2 * json.length + containers * CONTAINER_BYTES;
}

const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;

/** The threads the writer committed, kept for its next batches: least recently used leave first. */
class WrittenThreads {
  private readonly threads = new Map<string, { rows: StoredThreadRows; bytes: number }>();
  private bytes = 0;

  constructor(private readonly budget: number) {}

  /** The thread's rows, if kept; they leave the cache until they are committed again. */
  take(tenantId: string, threadId: string): StoredThreadRows | undefined {
    const key = threadKey(tenantId, threadId);
    const kept = this.threads.get(key);
    if (kept === undefined) return undefined;
    this.threads.delete(key);
    this.bytes -= kept.bytes;
    return kept.rows;
  }

  keep(rows: StoredThreadRows): void {
    const bytes = rows.trim();
    if (bytes > this.budget) return;
    this.threads.set(threadKey(rows.tenantId, rows.threadId), { rows, bytes });
    this.bytes += bytes;
    for (const [key, oldest] of this.threads) {
      if (this.bytes <= this.budget) break;
      this.threads.delete(key);
      this.bytes -= oldest.bytes;
    }
  }

  clear(): void {
    this.threads.clear();
    this.bytes = 0;
  }
}

/**
 * A thread's rows as the fold sees them during one commit: each row it reads is fetched by
 * key (an index lookup) and kept; each row it changes is written back by `write`. The
 * thread's length never enters: no read scans its messages.
 */
export class StoredThreadRows implements ThreadRows {
  readonly header: ThreadHeader;
  readonly counts: { activeRuns: number; activeTurns: number };
  private messageCount: number;
  private readonly runs = new Map<string, RunSummary>();
  private readonly messages = new Map<number, BufferedMessage>();
  private readonly messageIds = new Map<string, number | null>();
  private readonly parts = new Map<string, BufferedPart>();
  private readonly tools = new Map<string, ToolLocation | null>();
  /** Tool call by toolKey(run, approval id); null: looked up, not stored. */
  private readonly approvals = new Map<string, string | null>();
  private readonly linkedApprovals = new Map<
    string,
    { runId: string; approvalId: string; toolCallId: string }
  >();
  /**
   * Whether every row of the thread is known here: true for a thread with no header row when
   * opened (this writer created it), so a lookup that misses here misses in the store too.
   */
  private readonly complete: boolean;
  private headerBytes = 0;

  constructor(
    private readonly statements: Statements,
    readonly tenantId: string,
    readonly threadId: string,
    head: ThreadHead | null,
  ) {
    this.complete = head === null;
    this.header = head?.header ?? emptyHeader(tenantId, threadId);
    this.messageCount = head?.messageCount ?? 0;
    this.counts = countRuns(this.header.runs);
    for (const run of this.header.runs) this.runs.set(run.runId, run);
  }

  run(runId: string): RunSummary | undefined {
    return this.runs.get(runId);
  }

  addRun(run: RunSummary): RunSummary {
    this.header.runs.push(run);
    this.runs.set(run.runId, run);
    return run;
  }

  dropRun(runId: string): void {
    const at = this.header.runs.findIndex((run) => run.runId === runId);
    if (at >= 0) this.header.runs.splice(at, 1);
    this.runs.delete(runId);
  }

  messageAt(id: string): number | undefined {
    let seq = this.messageIds.get(id);
    if (seq === undefined && !this.complete) {
      seq = this.statements.messageSeqById.get(this.tenantId, this.threadId, id)?.seq ?? null;
      this.messageIds.set(id, seq);
    }
    return seq ?? undefined;
  }

  sourceOf(message: number): MessageSource | undefined {
    return this.message(message).metadata?.source;
  }

  clientIdOf(message: number): string {
    const stored = this.message(message);
    return stored.metadata?.clientId ?? stored.id;
  }

  lastMessage(): MessageTail | undefined {
    if (this.messageCount === 0) return undefined;
    const last = this.message(this.messageCount - 1);
    return {
      message: last.seq,
      role: last.role,
      runId: last.metadata?.runId,
      partCount: last.partCount,
    };
  }

  addMessage(message: UIMessage): number {
    const seq = this.messageCount;
    this.messageCount += 1;
    this.messages.set(seq, {
      seq,
      id: message.id,
      role: message.role,
      metadata: message.metadata,
      partCount: 0,
      textPart: -1,
      dirty: true,
    });
    this.messageIds.set(message.id, seq);
    for (const part of message.parts) this.addPart(seq, part);
    return seq;
  }

  part(location: PartLocation): UIMessagePart {
    return this.bufferedPart(location).body;
  }

  textPartOf(message: number): number {
    return this.message(message).textPart;
  }

  addPart(seq: number, body: UIMessagePart): number {
    const message = this.message(seq);
    const location = { message: seq, part: message.partCount };
    message.partCount += 1;
    if (body.type === 'text' && message.textPart === -1) message.textPart = location.part;
    message.dirty = true;
    const runId = isToolPart(body) ? (message.metadata?.runId ?? '') : null;
    this.parts.set(partKey(location), { location, runId, body, dirty: true, bytes: 0 });
    if (isToolPart(body) && runId !== null) {
      const key = toolKey(runId, body.toolCallId);
      if (this.tools.get(key) == null) {
        this.tools.set(key, { ...location, runId, toolCallId: body.toolCallId });
      }
    }
    return location.part;
  }

  setPart(location: PartLocation, body: UIMessagePart): void {
    const part = this.bufferedPart(location);
    part.body = body;
    part.dirty = true;
  }

  tool(runId: string, toolCallId: string): ToolLocation | undefined {
    const key = toolKey(runId, toolCallId);
    let location = this.tools.get(key);
    if (location === undefined && !this.complete) {
      const row = this.statements.toolLocation.get(this.tenantId, this.threadId, runId, toolCallId);
      location = row ? { message: row.seq, part: row.part, runId, toolCallId } : null;
      this.tools.set(key, location);
    }
    return location ?? undefined;
  }

  openTools(runId: string): ToolLocation[] {
    const open = new Map<string, ToolLocation>();
    for (const row of this.statements.openTools.all(this.tenantId, this.threadId, runId)) {
      const location = { message: row.seq, part: row.part, runId, toolCallId: row.tool_call_id };
      open.set(partKey(location), location);
    }
    // Rows changed since they were read are judged by what they hold now.
    for (const [key, part] of this.parts) {
      if (part.runId !== runId || !isToolPart(part.body)) continue;
      if (isOpenToolPart(part.body)) {
        open.set(key, { ...part.location, runId, toolCallId: part.body.toolCallId });
      } else {
        open.delete(key);
      }
    }
    return [...open.values()];
  }

  approvalTool(runId: string, approvalId: string): ToolLocation | undefined {
    const key = toolKey(runId, approvalId);
    let toolCallId = this.approvals.get(key);
    if (toolCallId === undefined && !this.complete) {
      const row = this.statements.approval.get(this.tenantId, this.threadId, runId, approvalId);
      toolCallId = row?.tool_call_id ?? null;
      this.approvals.set(key, toolCallId);
    }
    return toolCallId == null ? undefined : this.tool(runId, toolCallId);
  }

  linkApproval(runId: string, approvalId: string, toolCallId: string): void {
    const key = toolKey(runId, approvalId);
    this.approvals.set(key, toolCallId);
    this.linkedApprovals.set(key, { runId, approvalId, toolCallId });
  }

  /** Writes the rows the fold changed; call inside the store's commit transaction. */
  write(): void {
    const { tenantId, threadId, header } = this;
    const headerJson = JSON.stringify(header);
    this.headerBytes = heldBytes(headerJson);
    this.statements.upsertHead.run(
      tenantId,
      threadId,
      header.status,
      // As JSON, as the header's own copy is: a title is free text, and SQLite would store
      // a lone surrogate as bytes it reads back as three replacement characters, so the list
      // would show another title than the thread.
      header.title == null ? null : JSON.stringify(header.title),
      header.lastActivityAt,
      header.pendingApprovals.length,
      header.position,
      this.messageCount,
      headerJson,
    );
    for (const message of this.messages.values()) {
      if (!message.dirty) continue;
      this.statements.upsertMessage.run(
        tenantId,
        threadId,
        message.seq,
        message.id,
        message.role,
        message.metadata === undefined ? null : JSON.stringify(message.metadata),
        message.partCount,
        message.textPart,
      );
      message.dirty = false;
    }
    for (const part of this.parts.values()) {
      if (!part.dirty) continue;
      const json = JSON.stringify(part.body);
      const tool = isToolPart(part.body) ? part.body : null;
      const open = isOpenToolPart(part.body);
      this.statements.upsertPart.run(
        tenantId,
        threadId,
        part.location.message,
        part.location.part,
        part.runId,
        tool?.toolCallId ?? null,
        open ? 1 : 0,
        Buffer.byteLength(json),
        json,
      );
      part.dirty = false;
      // Only an open tool part is kept past the commit (trim): only its size is needed.
      part.bytes = open ? heldBytes(json) : 0;
    }
    for (const link of this.linkedApprovals.values()) {
      this.statements.upsertApproval.run(
        tenantId,
        threadId,
        link.runId,
        link.approvalId,
        link.toolCallId,
      );
    }
    this.linkedApprovals.clear();
  }

  /**
   * After `write`: keeps what the next batches' folds read (the header, the last message, the
   * parts of tool calls still open, every lookup) and drops the rest; answers about how many
   * bytes are kept.
   */
  trim(): number {
    const last = this.messageCount - 1;
    for (const seq of this.messages.keys()) {
      if (seq !== last) this.messages.delete(seq);
    }
    let partBytes = 0;
    for (const [key, part] of this.parts) {
      if (isOpenToolPart(part.body)) partBytes += part.bytes;
      else this.parts.delete(key);
    }
    const entries =
      this.runs.size +
      this.messages.size +
      this.messageIds.size +
      this.parts.size +
      this.tools.size +
      this.approvals.size;
    return this.headerBytes + partBytes + entries * ENTRY_BYTES;
  }

  private message(seq: number): BufferedMessage {
    let message = this.messages.get(seq);
    if (message === undefined) {
      const row = this.statements.messageBySeq.get(this.tenantId, this.threadId, seq);
      if (!row) throw new Error(`thread ${this.threadId}: message ${seq} is not stored`);
      message = {
        seq,
        id: row.id,
        role: row.role,
        metadata:
          row.metadata === null
            ? undefined
            : (JSON.parse(row.metadata) as NonNullable<UIMessage['metadata']>),
        partCount: row.part_count,
        textPart: row.text_part,
        dirty: false,
      };
      this.messages.set(seq, message);
    }
    return message;
  }

  private bufferedPart(location: PartLocation): BufferedPart {
    const key = partKey(location);
    let part = this.parts.get(key);
    if (part === undefined) {
      const row = this.statements.part.get(
        this.tenantId,
        this.threadId,
        location.message,
        location.part,
      );
      if (!row) {
        throw new Error(
          `thread ${this.threadId}: part ${location.part} of message ${location.message} is not stored`,
        );
      }
      const body = JSON.parse(row.body) as UIMessagePart;
      const runId = isToolPart(body)
        ? (this.message(location.message).metadata?.runId ?? '')
        : null;
      part = { location: { ...location }, runId, body, dirty: false, bytes: heldBytes(row.body) };
      this.parts.set(key, part);
    }
    return part;
  }
}

function partKey(location: PartLocation): string {
  return `${location.message}:${location.part}`;
}
