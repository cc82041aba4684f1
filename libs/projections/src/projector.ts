/**
 * Follows the log from the read models' checkpoint and folds every run event into its
 * thread with the pure folds of libs/domain. Events are taken in batches: each batch's
 * thread updates and the new checkpoint commit in one transaction, so a crash never leaves
 * a view ahead of, or behind, its checkpoint.
 */
import {
  RUN_STREAM_PREFIX,
  applyToThread,
  emptyThread,
  threadOf,
  type ProjectedEvent,
  type ThreadState,
} from '@runledger/domain';
import type { EventStoreReader, RecordedEvent, Subscription } from '@runledger/event-store';
import type { ReadModelStore } from './read-model.store';

export interface ProjectorObserver {
  /** After each committed batch: how many events, the new position, the last event's time. */
  committed(events: number, position: number, lastRecordedAt: string): void;
  /** A batch that could not be applied; the projector stops and reports it. */
  failed(error: unknown, position: number): void;
}

export interface ProjectorOptions {
  /**
   * Most events folded per transaction. Large on purpose: while catching up, every commit
   * rewrites each touched thread whole, so fewer, larger commits make a rebuild faster; live
   * events are committed as soon as the log goes quiet, whatever this is.
   */
  batchSize?: number;
  /** Longest a batch collects before it is committed, so readers see progress during a rebuild. */
  maxBatchMs?: number;
  /** Thread states kept parsed between batches (the hot set of a rebuild or of live traffic). */
  cacheSize?: number;
}

/** Events folded between two turns of the event loop while catching up. */
const YIELD_EVERY = 1000;

export class ProjectionBehindError extends Error {
  constructor(
    readonly position: number,
    readonly minPosition: number,
  ) {
    super(`the projection is at position ${position}, not yet at ${minPosition}`);
    this.name = 'ProjectionBehindError';
  }
}

export class Projector {
  private position: number;
  private subscription: Subscription | null = null;
  private running: Promise<void> | null = null;
  private batch: ProjectedEvent[] = [];
  private flushScheduled = false;
  private batchStartedAt = 0;
  private yielding = false;
  private failure: unknown = null;
  private readonly cache = new Map<string, ThreadState>();
  private readonly waiters = new Set<{ min: number; resolve: () => void }>();
  private readonly batchSize: number;
  private readonly maxBatchMs: number;
  private readonly cacheSize: number;

  constructor(
    private readonly log: EventStoreReader,
    private readonly readModels: ReadModelStore,
    private readonly observer: ProjectorObserver,
    options: ProjectorOptions = {},
  ) {
    this.batchSize = options.batchSize ?? 25_000;
    this.maxBatchMs = options.maxBatchMs ?? 250;
    this.cacheSize = options.cacheSize ?? 2000;
    this.position = readModels.checkpoint();
  }

  /** Position of the last event folded into the read models. */
  current(): number {
    return this.position;
  }

  start(): void {
    if (this.running) return;
    this.subscription = this.log.subscribeToAll({
      fromPosition: this.position === 0 ? 'start' : this.position,
      streamPrefix: RUN_STREAM_PREFIX,
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

  /**
   * Resolves once the projection has passed `minPosition`; rejects after `timeoutMs`. Only run
   * streams are projected, so a position of another stream (a consumed receipt) counts as
   * passed once the last run event before it is folded.
   */
  async waitFor(minPosition: number, timeoutMs: number): Promise<void> {
    if (this.position >= minPosition) return;
    const deadline = Date.now() + timeoutMs;
    const target = await this.positionToPass(minPosition);
    if (this.position >= target) return;
    await new Promise<void>((resolve, reject) => {
      const waiter = {
        min: target,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new ProjectionBehindError(this.position, minPosition));
      }, deadline - Date.now());
      this.waiters.add(waiter);
    });
  }

  /**
   * The run event the projection must fold to have passed `minPosition`: the last one at or
   * before it, or `minPosition` itself while the log has not reached it (a run event may
   * still land there). The log head is read first: every event up to it is already written.
   */
  private async positionToPass(minPosition: number): Promise<number> {
    const head = await this.log.headPosition();
    if (minPosition > head) return minPosition;
    const runHead = await this.log.headPosition({ streamPrefix: RUN_STREAM_PREFIX });
    return Math.min(minPosition, runHead);
  }

  private async follow(subscription: Subscription): Promise<void> {
    let sinceYield = 0;
    try {
      for await (const event of subscription) {
        if (this.batch.length === 0) this.batchStartedAt = Date.now();
        this.batch.push(toProjected(event));
        if (
          this.batch.length >= this.batchSize ||
          Date.now() - this.batchStartedAt >= this.maxBatchMs
        ) {
          this.flush();
        } else {
          this.scheduleIdleFlush();
        }
        sinceYield += 1;
        if (sinceYield >= YIELD_EVERY) {
          // A catch-up never waits on I/O; yield so HTTP and health checks are served meanwhile.
          sinceYield = 0;
          this.yielding = true;
          await new Promise((resolve) => setImmediate(resolve));
          this.yielding = false;
        }
      }
    } catch (error) {
      this.failure = error;
      this.observer.failed(error, this.position);
    }
  }

  /** Commits once the subscription waits for new events: the log is quiet. */
  private scheduleIdleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      // Our own yield is not quiet: look again after it, or the batch would wait for the next event.
      if (this.yielding) this.scheduleIdleFlush();
      else this.flush();
    });
  }

  private flush(): void {
    if (this.batch.length === 0 || this.failure !== null) return;
    const batch = this.batch;
    this.batch = [];
    const touched = new Map<string, ThreadState>();
    for (const event of batch) {
      const owner = threadOf(event);
      if (!owner) continue;
      const key = `${owner.tenantId}\u0000${owner.threadId}`;
      const state = touched.get(key) ?? this.load(key, owner.tenantId, owner.threadId);
      applyToThread(state, event);
      touched.set(key, state);
    }
    const last = batch[batch.length - 1];
    try {
      this.readModels.commit([...touched.values()], last.position);
    } catch (error) {
      // Nothing of the batch is committed; the cached states ran ahead of the store.
      this.cache.clear();
      this.failure = error;
      this.observer.failed(error, this.position);
      void this.subscription?.close();
      return;
    }
    for (const [key, state] of touched) this.remember(key, state);
    this.position = last.position;
    this.observer.committed(batch.length, this.position, last.recordedAt);
    for (const waiter of this.waiters) {
      if (this.position >= waiter.min) {
        this.waiters.delete(waiter);
        waiter.resolve();
      }
    }
  }

  private load(key: string, tenantId: string, threadId: string): ThreadState {
    return (
      this.cache.get(key) ??
      this.readModels.thread(tenantId, threadId) ??
      emptyThread(tenantId, threadId)
    );
  }

  private remember(key: string, state: ThreadState): void {
    this.cache.delete(key);
    this.cache.set(key, state);
    if (this.cache.size > this.cacheSize)
      this.cache.delete(this.cache.keys().next().value as string);
  }
}

export function toProjected(event: RecordedEvent): ProjectedEvent {
  return {
    id: event.id,
    type: event.type,
    data: event.data as Record<string, unknown>,
    metadata: event.metadata,
    revision: event.revision,
    position: event.position,
    recordedAt: event.recordedAt,
  };
}
