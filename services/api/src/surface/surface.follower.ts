/**
 * Follows the whole log from the client surface's checkpoint, as a handler on the log's one
 * follower (CheckpointedProcessor), like the projector: run events go through the
 * notification fold (libs/domain), `channel.bound` events become binding rows; each batch
 * commits with its checkpoint in one transaction, so a crash never leaves a notification
 * ahead of, or behind, its checkpoint. Other streams (receipts, seen cursors) only move the
 * position.
 */
import {
  BINDING_STREAM_PREFIX,
  CHANNEL_BOUND,
  NOTIFICATION_DATA_TYPES,
  RUN_STREAM_PREFIX,
  channelBoundOf,
  emptyNotificationThread,
  foldNotification,
  threadKey,
  threadUserOf,
  threadOf,
  type Notification,
  type NotificationThread,
} from '@runledger/domain';
import {
  CheckpointedProcessor,
  type BatchHandler,
  type EventStoreReader,
  type RecordedEvent,
} from '@runledger/event-store';
import type { BindingRow, SurfaceBatch, SurfaceStore } from './surface.store';

export interface SurfaceObserver {
  /** After each committed batch: the new position and the notification items it recorded. */
  committed(position: number, notifications: readonly Notification[]): void;
  failed(error: unknown, position: number): void;
}

/** Events folded per transaction at most. */
const BATCH_SIZE = 1000;
/** Notification fold states kept parsed between batches. */
const CACHE_SIZE = 2000;

export class SurfaceFollower implements BatchHandler {
  private readonly processor: CheckpointedProcessor;
  /** The notification items of the batch just committed, told once the processor moved. */
  private recorded: readonly Notification[] = [];
  private readonly cache = new Map<string, NotificationThread>();

  constructor(
    log: EventStoreReader,
    private readonly store: SurfaceStore,
    private readonly observer: SurfaceObserver,
  ) {
    this.processor = new CheckpointedProcessor(
      log,
      this,
      {
        committed: (_events, position) => {
          const notifications = this.recorded;
          this.recorded = [];
          this.observer.committed(position, notifications);
        },
        failed: (error, position) => this.observer.failed(error, position),
      },
      // The notification fold and the bindings read a few types' data: the follower reads
      // every appended event back on the api's loop, mostly tool outputs and model calls.
      { batchSize: BATCH_SIZE, dataTypes: [...NOTIFICATION_DATA_TYPES, CHANNEL_BOUND] },
    );
  }

  current(): number {
    return this.processor.current();
  }

  /** Resolves once the follower has passed `minPosition`; rejects after `timeoutMs`. */
  waitFor(minPosition: number, timeoutMs: number): Promise<void> {
    return this.processor.waitFor(minPosition, timeoutMs);
  }

  start(): void {
    this.processor.start();
  }

  stop(): Promise<void> {
    return this.processor.stop();
  }

  checkpoint(): number {
    return this.store.checkpoint();
  }

  handle(events: readonly RecordedEvent[]): void {
    let batch: SurfaceBatch;
    try {
      batch = this.fold(events);
      this.store.commit(batch);
    } catch (error) {
      // Nothing of the batch is committed; the cached states may have run ahead of the store.
      this.cache.clear();
      throw error;
    }
    for (const state of batch.threads)
      this.remember(threadKey(state.tenantId, state.threadId), state);
    this.recorded = batch.notifications.map((n) => n.item);
  }

  /** The batch's changes: fold states, notification items, thread users, bindings. */
  private fold(events: readonly RecordedEvent[]): SurfaceBatch {
    const touched = new Map<string, NotificationThread>();
    const notifications: SurfaceBatch['notifications'][number][] = [];
    const users: SurfaceBatch['users'][number][] = [];
    const bindings: BindingRow[] = [];
    for (const recorded of events) {
      if (recorded.stream.startsWith(BINDING_STREAM_PREFIX)) {
        const binding = channelBoundOf(recorded);
        const tenantId = recorded.metadata.tenantId;
        if (binding && typeof tenantId === 'string') {
          bindings.push({
            stream: recorded.stream,
            tenantId,
            binding,
            boundAt: recorded.recordedAt,
            position: recorded.position,
          });
        }
        continue;
      }
      if (!recorded.stream.startsWith(RUN_STREAM_PREFIX)) continue;
      const event = { ...recorded, data: recorded.data as Record<string, unknown> };
      const owner = threadOf(event);
      if (!owner) continue;
      const key = threadKey(owner.tenantId, owner.threadId);
      const state = touched.get(key) ?? this.load(key, owner.tenantId, owner.threadId);
      touched.set(key, state);
      const item = foldNotification(state, event);
      if (item) notifications.push({ tenantId: owner.tenantId, item });
      // Recorded for each start that names one: the store keeps each user of a thread once.
      const user = threadUserOf(event);
      if (user !== null) users.push({ tenantId: owner.tenantId, user, threadId: owner.threadId });
    }
    return {
      threads: [...touched.values()],
      notifications,
      users,
      bindings,
      position: events[events.length - 1].position,
    };
  }

  private load(key: string, tenantId: string, threadId: string): NotificationThread {
    return (
      this.cache.get(key) ??
      this.store.notificationThread(tenantId, threadId) ??
      emptyNotificationThread(tenantId, threadId)
    );
  }

  private remember(key: string, state: NotificationThread): void {
    this.cache.delete(key);
    this.cache.set(key, state);
    if (this.cache.size > CACHE_SIZE) this.cache.delete(this.cache.keys().next().value as string);
  }
}
