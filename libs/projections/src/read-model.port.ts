/**
 * The read-model store port, split into what the projector writes through and what queries
 * read through, as the event store's port is. The adapter is SQLite (`read-model.store.ts`,
 * a file of its own beside the log). A shared engine such as PostgreSQL would implement the
 * same two interfaces; the fold (`applyToRows` over the domain's `ThreadRows`) and the
 * services above would not change.
 */
import type {
  ThreadHeader,
  ThreadRows,
  ThreadStatus,
  ThreadSummary,
  ToolPart,
  UIMessage,
} from '@runledger/domain';

/** What the projector needs: a thread's rows to fold into, and one commit per batch. */
export interface ReadModelWriter<Rows extends ThreadRows = ThreadRows> {
  /**
   * The thread's rows for the fold to read and change; nothing is stored until `commit`.
   * Open each thread once per commit: the rows remember what the fold changed.
   */
  openThread(tenantId: string, threadId: string): Rows;
  /** The rows the fold changed, and the position they reach, in one transaction. */
  commit(threads: readonly Rows[], position: number): void | Promise<void>;
  /** Position of the last event committed. */
  checkpoint(): number;
}

/** A row of the thread list: the thread's summary as the fold defines it. */
export type ThreadListItem = ThreadSummary;

export interface ThreadListQuery {
  status?: ThreadStatus;
  limit: number;
  /** Opaque: from a previous page's `nextCursor`. */
  after?: { lastActivityAt: string; threadId: string };
}

/** A thread's header row as stored. */
export interface ThreadHead {
  header: ThreadHeader;
  messageCount: number;
}

/** A page of messages, oldest first, and where the thread goes on before it. */
export interface MessagePage {
  /** The page's messages: each an AI SDK UIMessage's JSON, as UTF-8 built from the stored rows. */
  messages: Buffer[];
  /** `seq` of the page's oldest message: read before it for the next older page. */
  oldestSeq: number | null;
  hasMore: boolean;
}

/** What queries read: never a whole long thread at once. */
export interface ThreadReadModels {
  /**
   * Runs `read` on one snapshot of the read models: every read in it sees the same commit,
   * whatever the projector commits meanwhile (from another thread, through another
   * connection). For an answer made of several reads, a header and its page, that must agree.
   */
  snapshot<T>(read: () => T): T;
  head(tenantId: string, threadId: string): ThreadHead | null;
  /**
   * Up to `limit` messages before the one numbered `before` (the newest when absent), oldest
   * first, and no more than fit in `maxBytes` of parts (at least one message).
   */
  messagePage(
    tenantId: string,
    threadId: string,
    limit: number,
    before?: number,
    maxBytes?: number,
  ): MessagePage;
  /** Every message's JSON, oldest first, a page at a time (for exports). */
  allMessages(tenantId: string, threadId: string): Iterable<Buffer[]>;
  /** Messages that have text, newest first, with their text parts only, read lazily (the voice seed). */
  messagesWithTextNewestFirst(tenantId: string, threadId: string): Iterable<UIMessage>;
  /** The newest tool part of the call (in `runId` when given), or null. */
  toolPart(tenantId: string, threadId: string, toolCallId: string, runId?: string): ToolPart | null;
  /** Newest activity first; ties broken by thread id so pages never overlap or skip. */
  listThreads(tenantId: string, query: ThreadListQuery): ThreadListItem[];
  checkpoint(): number;
  /** No thread and no checkpoint: the next projection pass is a rebuild. */
  isEmpty(): boolean;
}
