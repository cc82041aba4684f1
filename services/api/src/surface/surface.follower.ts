/**
 * Follows the whole log from the client surface's checkpoint, as the projector follows the
 * run streams: run events go through the notification fold (libs/domain), `channel.bound`
 * events become binding rows; each batch commits with its checkpoint in one transaction, so
 * a crash never leaves a notification ahead of, or behind, its checkpoint. Other streams
 * (receipts, seen cursors) only move the position.
 */
import {
  BINDING_STREAM_PREFIX,
  RUN_STREAM_PREFIX,
  channelBoundOf,
  emptyNotificationThread,
  foldNotification,
  threadOf,
  type Notification,
  type NotificationThread,
} from '@runledger/domain';
import type { EventStoreReader, RecordedEvent, Subscription } from '@runledger/event-store';
import type { BindingRow, SurfaceBatch, SurfaceStore } from './surface.store';

export interface SurfaceObserver {
  /** After each committed batch: the new position and the notification items it recorded. */
  committed(position: number, notifications: readonly Notification[]): void;
  failed(error: unknown, position: number): void;
}

/** Events folded per transaction at most, and between two turns of the event loop. */
const BATCH_SIZE = 1000;
/** Notification fold states kept parsed between batches. */
const CACHE_SIZE = 2000;

export class SurfaceFollower {
  private position: number;
  private subscription: Subscription | null = null;
  private running: Promise<void> | null = null;
  private batch: RecordedEvent[] = [];
  private flushScheduled = false;
  private failure: unknown = null;
  private readonly cache = new Map<string, NotificationThread>();

  constructor(
    private readonly log: EventStoreReader,
    private readonly store: SurfaceStore,
    private readonly observer: SurfaceObserver,
  ) {
    this.position = store.checkpoint();
  }

  current(): number {
    return this.position;
  }

  problem(): unknown {
    return this.failure;
  }

  start(): void {
    if (this.running) return;
    this.subscription = this.log.subscribeToAll({
      fromPosition: this.position === 0 ? 'start' : this.position,
    });
    this.running = this.follow(this.subscription);
  }

  async stop(): Promise<void> {
    await this.subscription?.close();
    await this.running;
    this.subscription = null;
    this.running = null;
    this.flush();
  }

  private async follow(subscription: Subscription): Promise<void> {
    try {
      for await (const event of subscription) {
        this.batch.push(event);
        if (this.batch.length >= BATCH_SIZE) {
          this.flush();
          // A catch-up never waits on I/O; yield so HTTP is served meanwhile.
          await new Promise((resolve) => setImmediate(resolve));
        } else {
          this.scheduleFlush();
        }
      }
    } catch (error) {
      this.failure = error;
      this.observer.failed(error, this.position);
    }
  }

  /** Commits once the subscription waits for new events: the log is quiet. */
  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.batch.length === 0 || this.failure !== null) return;
    const events = this.batch;
    this.batch = [];
    let batch: SurfaceBatch;
    try {
      batch = this.fold(events);
      this.store.commit(batch);
    } catch (error) {
      // Nothing of the batch is committed; the cached states may have run ahead of the store.
      this.cache.clear();
      this.failure = error;
      this.observer.failed(error, this.position);
      void this.subscription?.close();
      return;
    }
    for (const state of batch.threads)
      this.remember(`${state.tenantId}\u0000${state.threadId}`, state);
    this.position = batch.position;
    this.observer.committed(
      this.position,
      batch.notifications.map((n) => n.item),
    );
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
      const key = `${owner.tenantId}\u0000${owner.threadId}`;
      const state = touched.get(key) ?? this.load(key, owner.tenantId, owner.threadId);
      touched.set(key, state);
      const knownUsers = state.users.length;
      const item = foldNotification(state, event);
      if (item) notifications.push({ tenantId: owner.tenantId, item });
      for (const user of state.users.slice(knownUsers)) {
        users.push({ tenantId: owner.tenantId, user, threadId: owner.threadId });
      }
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
