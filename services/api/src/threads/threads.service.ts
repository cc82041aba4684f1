/**
 * The read side's queries: thread view, thread list, voice seed and tool results for
 * voice, each after the projection has passed the caller's `minPosition`. A thread is
 * keyed by tenant, so another tenant's thread is simply not found (404).
 */
import { Injectable } from '@nestjs/common';
import {
  PATH_ID_PATTERN,
  threadView,
  toolResultForVoice,
  voiceSeed,
  type ThreadState,
  type ThreadStatus,
} from '@runledger/domain';
import type { ThreadListItem } from '@runledger/projections';
import { ApiError } from '../http/api-error';
import { ProjectionsService } from './projections.service';

export const THREAD_STATUSES: readonly ThreadStatus[] = ['running', 'blocked', 'idle', 'finished'];

export interface ThreadListPage {
  threads: ThreadListItem[];
  nextCursor: string | null;
  position: number;
}

@Injectable()
export class ThreadsService {
  constructor(private readonly projections: ProjectionsService) {}

  async view(tenantId: string, threadId: string, minPosition?: number) {
    return threadView(await this.load(tenantId, threadId, minPosition));
  }

  async list(
    tenantId: string,
    query: { status?: ThreadStatus; limit: number; cursor?: string; minPosition?: number },
  ): Promise<ThreadListPage> {
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    await this.projections.waitFor(query.minPosition);
    const threads = this.projections.readModels.listThreads(tenantId, {
      status: query.status,
      limit: query.limit,
      after,
    });
    const last = threads[threads.length - 1];
    return {
      threads,
      nextCursor: threads.length === query.limit && last ? encodeCursor(last) : null,
      position: this.projections.position(),
    };
  }

  async voiceSeed(tenantId: string, threadId: string, minPosition?: number) {
    return voiceSeed(await this.load(tenantId, threadId, minPosition));
  }

  async toolResult(
    tenantId: string,
    threadId: string,
    toolCallId: string,
    query: { forVoice: boolean; offset: number; minPosition?: number },
  ) {
    const result = toolResultForVoice(
      await this.load(tenantId, threadId, query.minPosition),
      toolCallId,
      // Only a voice model's session bounds what it can hear; any other reader gets it whole.
      { offset: query.offset, ...(query.forVoice ? {} : { maxChars: Number.POSITIVE_INFINITY }) },
    );
    if (!result) {
      throw new ApiError(
        404,
        'tool_call_not_found',
        `tool call ${toolCallId} not found in thread ${threadId}`,
      );
    }
    return result;
  }

  /** The thread's state if the tenant may see it, else 404: for routes that only need access. */
  async require(tenantId: string, threadId: string, minPosition?: number): Promise<ThreadState> {
    return this.load(tenantId, threadId, minPosition);
  }

  private async load(
    tenantId: string,
    threadId: string,
    minPosition?: number,
  ): Promise<ThreadState> {
    if (!PATH_ID_PATTERN.test(threadId)) {
      throw new ApiError(400, 'invalid_thread_id', `threadId must match ${PATH_ID_PATTERN.source}`);
    }
    await this.projections.waitFor(minPosition);
    const state = this.projections.readModels.thread(tenantId, threadId);
    if (!state) throw new ApiError(404, 'thread_not_found', `thread ${threadId} not found`);
    return state;
  }
}

function encodeCursor(item: ThreadListItem): string {
  return Buffer.from(JSON.stringify([item.lastActivityAt, item.threadId])).toString('base64url');
}

function decodeCursor(cursor: string): { lastActivityAt: string; threadId: string } {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (Array.isArray(value) && value.length === 2 && value.every((v) => typeof v === 'string')) {
      return { lastActivityAt: value[0] as string, threadId: value[1] as string };
    }
  } catch {
    // Falls through to the same answer as any other cursor this service did not issue.
  }
  throw new ApiError(400, 'invalid_cursor', 'cursor must be a nextCursor from a previous page');
}
