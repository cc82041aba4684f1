/**
 * The read side's queries: thread view, thread list, voice seed and tool results for
 * voice, each after the projection has passed the caller's `minPosition`. A thread is
 * keyed by tenant, so another tenant's thread is simply not found (404).
 */
import { createHash } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import {
  PATH_ID_PATTERN,
  isPlainObject,
  jsonArray,
  nextTurn,
  threadKey,
  threadView,
  toolPartResult,
  voiceSeedOf,
  type ThreadStatus,
} from '@runledger/domain';
import type { ThreadHead, ThreadListItem } from '@runledger/projections';
import { ApiError } from '../http/api-error';
import { ProjectionsService } from './projections.service';

export const THREAD_STATUSES: readonly ThreadStatus[] = ['running', 'blocked', 'idle', 'finished'];

/** Messages in a thread page unless `?limit=` says otherwise, and the most it may say. */
export const THREAD_PAGE_DEFAULT = 50;
export const THREAD_PAGE_MAX = 500;
/**
 * A page also stops before its parts pass this many bytes (it always holds the newest
 * message it can): a request's cost stays bounded whatever its messages hold.
 */
export const THREAD_PAGE_MAX_BYTES = 1024 * 1024;

export interface ThreadListPage {
  threads: ThreadListItem[];
  nextCursor: string | null;
  position: number;
}

@Injectable()
export class ThreadsService {
  constructor(private readonly projections: ProjectionsService) {}

  /**
   * The header and one page of messages (the newest, or those before a page's cursor) as the
   * JSON body of the answer, in UTF-8: the stored parts are spliced in as bytes, not decoded,
   * parsed or serialized again.
   */
  async view(
    tenantId: string,
    threadId: string,
    query: { limit: number; before?: string; minPosition?: number },
  ): Promise<Buffer> {
    const before =
      query.before === undefined
        ? undefined
        : decodeMessageCursor(tenantId, threadId, query.before);
    await this.ready(tenantId, threadId, query.minPosition);
    const models = this.projections.readModels;
    // One snapshot: the projector commits from its own thread, and a header read before its
    // commit with a page read after would show messages past the header's position.
    const { head, page } = models.snapshot(() => {
      const head = this.projections.threadHead(tenantId, threadId);
      // Messages are never removed: a cursor this thread issued is always before its end.
      if (before !== undefined && before >= head.messageCount) throw invalidMessageCursor();
      const page = models.messagePage(
        tenantId,
        threadId,
        query.limit,
        before,
        THREAD_PAGE_MAX_BYTES,
      );
      return { head, page };
    });
    const header = JSON.stringify(
      threadView(head.header, head.messageCount, {
        limit: query.limit,
        before:
          page.hasMore && page.oldestSeq !== null
            ? encodeMessageCursor(tenantId, threadId, page.oldestSeq)
            : null,
        hasMore: page.hasMore,
      }),
    );
    return jsonArray(page.messages, `${header.slice(0, -1)},"messages":`, '}');
  }

  /** Every message of the thread as JSON, oldest first, a page of rows at a time (export). */
  async export(
    tenantId: string,
    threadId: string,
    minPosition?: number,
  ): Promise<AsyncGenerator<Buffer[]>> {
    await this.load(tenantId, threadId, minPosition);
    const pages = this.projections.readModels.allMessages(tenantId, threadId);
    return (async function* () {
      for (const page of pages) {
        yield page;
        // A long thread is read between other requests, not in one stretch.
        await nextTurn();
      }
    })();
  }

  async list(
    tenantId: string,
    query: { status?: ThreadStatus; limit: number; cursor?: string; minPosition?: number },
  ): Promise<ThreadListPage> {
    const after = query.cursor === undefined ? undefined : decodeCursor(tenantId, query.cursor);
    await this.projections.waitFor(query.minPosition);
    const threads = this.projections.readModels.listThreads(tenantId, {
      status: query.status,
      limit: query.limit,
      after,
    });
    const last = threads[threads.length - 1];
    return {
      threads,
      nextCursor: threads.length === query.limit && last ? encodeCursor(tenantId, last) : null,
      // Read after the list, from the read models themselves: each listed thread was committed
      // with a checkpoint at or past its position, so this is never behind one of them (the
      // projector's reported position can trail its own commit by a message).
      position: this.projections.readModels.checkpoint(),
    };
  }

  /** Reads only the newest messages with words, as far back as the seed's budget goes. */
  async voiceSeed(tenantId: string, threadId: string, minPosition?: number) {
    await this.ready(tenantId, threadId, minPosition);
    const models = this.projections.readModels;
    // The active tools and the messages as of one commit, as in the thread view.
    return models.snapshot(() =>
      voiceSeedOf(
        models.messagesWithTextNewestFirst(tenantId, threadId),
        this.projections.threadHead(tenantId, threadId).header.activeTools,
      ),
    );
  }

  /** Reads the one tool part's row. */
  async toolResult(
    tenantId: string,
    threadId: string,
    toolCallId: string,
    query: { runId?: string; forVoice: boolean; offset: number; minPosition?: number },
  ) {
    await this.load(tenantId, threadId, query.minPosition);
    const part = this.projections.readModels.toolPart(tenantId, threadId, toolCallId, query.runId);
    if (!part) {
      const where = query.runId === undefined ? '' : ` of run ${query.runId}`;
      throw new ApiError(
        404,
        'tool_call_not_found',
        `tool call ${toolCallId}${where} not found in thread ${threadId}`,
      );
    }
    // Only a voice model's session bounds what it can hear; any other reader gets it whole.
    return toolPartResult(part, {
      offset: query.offset,
      ...(query.forVoice ? {} : { maxChars: Number.POSITIVE_INFINITY }),
    });
  }

  /** The thread's header if the tenant may see it, else 404: for routes that only need access. */
  async require(tenantId: string, threadId: string, minPosition?: number): Promise<ThreadHead> {
    return this.load(tenantId, threadId, minPosition);
  }

  private async load(
    tenantId: string,
    threadId: string,
    minPosition?: number,
  ): Promise<ThreadHead> {
    await this.ready(tenantId, threadId, minPosition);
    return this.projections.threadHead(tenantId, threadId);
  }

  /**
   * A well-formed thread id, and the projection past `minPosition`. Without one, a thread not
   * in the view yet waits for what was recorded when it was asked: its run.started may be a
   * commit away, and a UI that opens it, or its stream (which EventSource does not retry after
   * a 404), would be told it does not exist.
   */
  private async ready(tenantId: string, threadId: string, minPosition?: number): Promise<void> {
    assertThreadId(threadId);
    await this.projections.waitFor(minPosition);
    if (
      minPosition === undefined &&
      this.projections.readModels.head(tenantId, threadId) === null
    ) {
      await this.projections.waitForRecorded(undefined);
    }
  }
}

/** A thread id as a path may carry it; else 400 naming it. */
export function assertThreadId(threadId: string): void {
  if (PATH_ID_PATTERN.test(threadId)) return;
  const rule = `threadId must match ${PATH_ID_PATTERN.source}`;
  throw new ApiError(400, 'invalid_thread_id', rule, [
    { field: 'threadId', rule: 'matches', message: rule },
  ]);
}

/**
 * A list page's `nextCursor`: the place of its last thread in the list's order (newest
 * activity first), and a tag of the tenant it was issued to. As with a page's `before`, only
 * the exact text this service issues is taken: another tenant's cursor, another spelling of
 * it, or a place the service never named is refused, not read as some other place.
 */
function encodeCursor(
  tenantId: string,
  item: { lastActivityAt: string; threadId: string },
): string {
  const value = { a: item.lastActivityAt, i: item.threadId, t: tenantTag(tenantId) };
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

function tenantTag(tenantId: string): string {
  return createHash('sha256').update(`list\u0000${tenantId}`).digest('base64url').slice(0, 8);
}

function decodeCursor(
  tenantId: string,
  cursor: string,
): { lastActivityAt: string; threadId: string } {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (isPlainObject(value) && typeof value.a === 'string' && typeof value.i === 'string') {
      const place = { lastActivityAt: value.a, threadId: value.i };
      if (encodeCursor(tenantId, place) === cursor) return place;
    }
  } catch {
    // Falls through to the same answer as any other cursor this service did not issue.
  }
  const rule = 'cursor must be the nextCursor of a previous page of this list';
  throw new ApiError(400, 'invalid_cursor', rule, [
    { field: 'cursor', rule: 'isCursor', message: rule },
  ]);
}

/**
 * A page's `before` cursor: the place of its oldest message, and a tag of the thread (and its
 * tenant) it was issued for. Messages are only ever added after the newest, so a cursor stays
 * valid however many arrive after it was issued. Only the exact text this service issues is
 * taken: another spelling of the number, another key, another thread's or another tenant's
 * cursor, or one before the first message (the first page's oldest is never a cursor) is
 * refused, not guessed at.
 */
function encodeMessageCursor(tenantId: string, threadId: string, seq: number): string {
  const tag = threadTag(tenantId, threadId);
  return Buffer.from(JSON.stringify({ m: seq, t: tag })).toString('base64url');
}

function threadTag(tenantId: string, threadId: string): string {
  return createHash('sha256').update(threadKey(tenantId, threadId)).digest('base64url').slice(0, 8);
}

function decodeMessageCursor(tenantId: string, threadId: string, cursor: string): number {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    const seq = isPlainObject(value) ? value.m : undefined;
    if (
      typeof seq === 'number' &&
      Number.isSafeInteger(seq) &&
      seq > 0 &&
      encodeMessageCursor(tenantId, threadId, seq) === cursor
    ) {
      return seq;
    }
  } catch {
    // Falls through to the same answer as any other cursor this service did not issue.
  }
  throw invalidMessageCursor();
}

function invalidMessageCursor(): ApiError {
  const rule = 'before must be the page.before of a previous page of this thread';
  return new ApiError(400, 'invalid_cursor', rule, [
    { field: 'before', rule: 'isCursor', message: rule },
  ]);
}
