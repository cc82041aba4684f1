/**
 * Which threads a tenant has, for the client surface's commands: a thread exists once a run
 * names it (the thread view) or a channel is bound to it (a bound thread has no run until
 * its first prompt). Both read models are caught up to the log head first, so a decision is
 * never taken on a view older than the caller's own last write.
 */
import { Inject, Injectable } from '@nestjs/common';
import type { PromptThread } from '@runledger/domain';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { ApiError } from '../http/api-error';
import { ProjectionsService } from '../threads/projections.service';
import { assertThreadId } from '../threads/threads.service';
import { SurfaceService } from './surface.service';

@Injectable()
export class ThreadDirectory {
  constructor(
    private readonly projections: ProjectionsService,
    private readonly surface: SurfaceService,
    @Inject(EVENT_STORE) private readonly log: EventStore,
  ) {}

  /** The thread as the prompt rule reads it; 404 when the tenant has no such thread. */
  async require(tenantId: string, threadId: string): Promise<PromptThread> {
    assertThreadId(threadId);
    const head = await this.log.headPosition();
    await Promise.all([this.projections.waitFor(head), this.surface.waitFor(head)]);
    // The header row only: a thread's messages are not needed to know its runs.
    const state = this.projections.readModels.head(tenantId, threadId)?.header;
    if (state) return { status: state.status, title: state.title, runs: state.runs };
    if (this.surface.store.isBound(tenantId, threadId))
      return { status: 'idle', title: null, runs: [] };
    throw new ApiError(404, 'thread_not_found', `thread ${threadId} not found`);
  }
}
