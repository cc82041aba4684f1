/**
 * The one log follower (the shape of Emmett's processors and Eventuous's subscriptions):
 * subscribe from a checkpoint, gather events into batches, hand each batch to a handler,
 * yield the event loop while catching up, and wake whoever waits for a position.
 *
 * The handler owns its checkpoint: it commits a batch's work and the batch's last position
 * together (one transaction, an acknowledged publish), so a crash replays at most the batch
 * in flight. Batches are handled one at a time, in position order.
 */
import { nextTurn } from '@runledger/domain/time-slices';
import {
  UnreadableEventError,
  type EventStoreReader,
  type RecordedEvent,
  type Subscription,
} from './event-store.port';
import { PositionGate } from './position-gate';

export interface BatchHandler {
  /** The position the handler has durably passed (0: nothing yet); read at `start()`. */
  checkpoint(): number;
  /**
   * Handles a batch (position order) and commits its checkpoint with it. May take several
   * turns of the event loop; a throw stops the processor, nothing of the batch counted.
   * `stopping` is aborted by `stop()`: a handler that waits (a retry) gives up by throwing,
   * which then only means the batch was not handled.
   */
  handle(batch: readonly RecordedEvent[], stopping: AbortSignal): Promise<void> | void;
  /**
   * Sees each event as it is taken from the subscription, before its batch is handled: CPU
   * work done here overlaps the handling of the batches before it (see `batchesAhead`).
   */
  taken?(event: RecordedEvent): void;
  /**
   * An event the log cannot read (a damaged row), once every batch before it was handled: a
   * handler that can record it and go on (the mirror parks it) commits its position as passed
   * and resolves, and the events after it follow. Without this, the subscription fails as on
   * any read error: resubscribed with `resubscribeMs` (the processor waits at the event until
   * it is mended), or the processor fails without them. When it throws, the same, on its error:
   * it is offered the event again at the next subscription.
   */
  unreadable?(error: UnreadableEventError, stopping: AbortSignal): Promise<void> | void;
}

export interface ProcessorObserver {
  /** After each handled batch: how many events, the new position, the last event's time. */
  committed(events: number, position: number, lastRecordedAt: string): void;
  /** A batch the handler could not handle (or a lost subscription); the processor stops. */
  failed(error: unknown, position: number): void;
  /** The subscription failed and is opened again after `retryInMs` (with `resubscribeMs`). */
  resubscribing?(error: unknown, position: number, retryInMs: number): void;
}

export interface ProcessorOptions {
  /** Only streams whose name starts with this. */
  streamPrefix?: string;
  /** Only these types' events come with their data (the store's `dataTypes`). */
  dataTypes?: readonly string[];
  /** Most events per batch. */
  batchSize?: number;
  /**
   * A batch is handled once its events' `size` reaches this (events without one count 0):
   * a batch is held in memory whole, and a thousand events may each be a megabyte.
   */
  maxBatchSize?: number;
  /** Longest a batch gathers before it is handled, so readers see progress while catching up. */
  maxBatchMs?: number;
  /**
   * Under steady load only: while events keep arriving faster than `eventsPerSecond`, a batch
   * gathers until `intervalMs` after the last one was handled, where it would otherwise be
   * handled (and committed) almost per event. Below that rate every event is handled at once,
   * so light traffic sees no added delay; full batches never wait.
   */
  gather?: { eventsPerSecond: number; intervalMs: number };
  /**
   * Waits before resubscribing after the subscription failed, the last repeated; without
   * them a failed subscription stops the processor.
   */
  resubscribeMs?: readonly number[];
  /**
   * Full batches that may wait behind the one being handled before reading pauses (0: the
   * next batch gathers only while the current one is handled).
   */
  batchesAhead?: number;
}

/**
 * The projector's gathering: from 1,000 events/s on, a commit at most every 50 ms. A commit
 * rewrites the header rows and index pages it touches, so at a commit per few events the
 * commits cost more than the folding; below that rate nothing waits. Not for a follower that
 * handles its batches on the HTTP event loop: a gathered batch is one longer stretch there.
 */
export const GATHER_UNDER_LOAD = Object.freeze({ eventsPerSecond: 1000, intervalMs: 50 });

/** Events taken from the subscription between two turns of the event loop. */
const YIELD_EVERY = 500;

/** Size of a batch's events (about their JSON's length) at which it is handled: 8 MiB. */
const MAX_BATCH_SIZE = 8 * 1024 * 1024;

export class CheckpointedProcessor {
  /** The last event taken from the subscription (handled or waiting in a batch). */
  private taken = 0;
  private stopped = true;
  private subscription: Subscription | null = null;
  private wakeRetry: (() => void) | null = null;
  private running: Promise<void> | null = null;
  private batch: RecordedEvent[] = [];
  private batchStartedAt = 0;
  private batchBytes = 0;
  private lastFlushAt = 0;
  /** The arrival rate of the last whole rate window (events/s), and the window being counted. */
  private arrivalRate = 0;
  private rateWindowStart = 0;
  private rateWindowEvents = 0;
  private handling: Promise<void> = Promise.resolve();
  /** Batches queued or being handled. */
  private pending = 0;
  private wakeReader: (() => void) | null = null;
  private restarting = false;
  private stopping = new AbortController();
  private idleScheduled = false;
  private intervalTimer: NodeJS.Timeout | null = null;
  private yielding = false;
  private failure: unknown = null;
  private readonly gate: PositionGate;
  private readonly batchSize: number;
  private readonly maxBatchSize: number;
  private readonly maxBatchMs: number;
  private readonly gather: { eventsPerSecond: number; intervalMs: number } | null;
  private readonly batchesAhead: number;

  constructor(
    private readonly log: EventStoreReader,
    private readonly handler: BatchHandler,
    private readonly observer: ProcessorObserver,
    private readonly options: ProcessorOptions = {},
  ) {
    this.batchSize = options.batchSize ?? 1000;
    this.maxBatchSize = options.maxBatchSize ?? MAX_BATCH_SIZE;
    this.maxBatchMs = options.maxBatchMs ?? 100;
    this.gather = options.gather ?? null;
    this.batchesAhead = options.batchesAhead ?? 0;
    this.gate = new PositionGate(log, options.streamPrefix, handler.checkpoint());
  }

  /** Position of the last event handled. */
  current(): number {
    return this.gate.current();
  }

  start(): void {
    if (this.running) return;
    this.failure = null;
    this.stopped = false;
    this.stopping = new AbortController();
    this.restarting = false;
    this.gate.moveTo(this.handler.checkpoint());
    this.taken = this.gate.current();
    this.running = this.run();
  }

  /** Stops following; the batch gathered so far is handled first. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort(new Error('the processor is stopping'));
    this.wakeRetry?.();
    if (this.intervalTimer !== null) {
      // stop() handles the gathered batch itself, now.
      clearTimeout(this.intervalTimer);
      this.intervalTimer = null;
      this.idleScheduled = false;
    }
    await this.subscription?.close();
    await this.running;
    this.subscription = null;
    this.running = null;
    await this.flush();
  }

  private async run(): Promise<void> {
    const waits = this.options.resubscribeMs ?? [];
    let failures = 0;
    while (!this.stopped && this.failure === null) {
      const subscription = this.log.subscribeToAll({
        fromPosition: this.taken === 0 ? 'start' : this.taken,
        streamPrefix: this.options.streamPrefix,
        dataTypes: this.options.dataTypes,
      });
      this.subscription = subscription;
      const before = this.taken;
      const error = await this.follow(subscription);
      if (this.restarting && !this.stopped) {
        this.restarting = false;
        continue;
      }
      if (error === null || this.stopped) return;
      const unpassed = await this.passUnreadable(error);
      if (unpassed === null) {
        failures = 0;
        continue;
      }
      if (this.failure !== null || this.stopped) return;
      if (waits.length === 0) {
        this.fail(unpassed);
        return;
      }
      if (this.taken > before) failures = 0;
      const wait = waits[Math.min(failures, waits.length - 1)];
      this.observer.resubscribing?.(unpassed, this.taken, wait);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, wait);
        timer.unref();
        this.wakeRetry = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wakeRetry = null;
      failures += 1;
    }
  }

  /** True while events are gathered or batches wait for, or are in, the handler. */
  busy(): boolean {
    return this.batch.length > 0 || this.pending > 0;
  }

  /**
   * Closes the subscription and follows again from the last handled position: for a
   * subscription that went quiet without failing. Only while idle (false when busy), so
   * nothing is handled twice.
   */
  resubscribe(): boolean {
    if (this.stopped || this.subscription === null || this.busy()) return false;
    this.restarting = true;
    this.taken = this.gate.current();
    void this.subscription.close().catch(() => undefined);
    return true;
  }

  /** Resolves once the processor has passed `minPosition`; rejects after `timeoutMs`. */
  waitFor(minPosition: number, timeoutMs: number): Promise<void> {
    return this.gate.waitFor(minPosition, timeoutMs);
  }

  /** Follows until the subscription ends (null) or fails (its error). */
  private async follow(subscription: Subscription): Promise<unknown> {
    let sinceYield = 0;
    try {
      for await (const page of subscription) {
        for (const event of page) {
          if (this.failure !== null || this.restarting) return null;
          // Bounded while the handler is slow (a broker down): batches flushed because the log
          // went quiet count too, besides the one gathering. Awaited only when there is
          // something to wait for: an await an event costs a catch-up microtasks an event.
          if (this.pending > this.batchesAhead + 1) {
            await this.whilePending(this.batchesAhead + 1);
            if (this.failure !== null || this.restarting) return null;
          }
          if (this.take(event)) {
            // Back-pressure: no more is read while more full batches wait than allowed.
            void this.flush();
            if (this.pending > this.batchesAhead) await this.whilePending(this.batchesAhead);
          }
          sinceYield += 1;
          if (sinceYield >= YIELD_EVERY) {
            // A catch-up read never waits on I/O; yield so HTTP and health checks are served.
            sinceYield = 0;
            this.yielding = true;
            await nextTurn();
            this.yielding = false;
          }
        }
      }
      return null;
    } catch (error) {
      return error;
    }
  }

  /** Adds the event to the gathering batch; true when the batch is full and must be handled. */
  private take(event: RecordedEvent): boolean {
    if (this.batch.length === 0) this.batchStartedAt = Date.now();
    this.countArrival();
    this.batch.push(event);
    this.batchBytes += event.size ?? 0;
    this.taken = event.position;
    this.handler.taken?.(event);
    const full =
      this.batch.length >= this.batchSize ||
      this.batchBytes >= this.maxBatchSize ||
      Date.now() - this.batchStartedAt >= this.maxBatchMs;
    if (!full) this.scheduleIdleFlush();
    return full;
  }

  /** Waits while more than `most` batches are queued or being handled. */
  private async whilePending(most: number): Promise<void> {
    while (this.pending > most) {
      await new Promise<void>((resolve) => (this.wakeReader = resolve));
    }
  }

  /**
   * Counts an event into the arrival rate, measured over windows of the gathering interval:
   * a window closes at the first event after it ends, so a quiet spell lowers the rate.
   */
  private countArrival(): void {
    if (this.gather === null) return;
    const now = Date.now();
    const elapsed = now - this.rateWindowStart;
    if (elapsed >= this.gather.intervalMs) {
      this.arrivalRate = (this.rateWindowEvents * 1000) / elapsed;
      this.rateWindowStart = now;
      this.rateWindowEvents = 0;
    }
    this.rateWindowEvents += 1;
  }

  /** Handles the gathered batch once the subscription waits for new events: the log is quiet. */
  private scheduleIdleFlush(): void {
    if (this.idleScheduled) return;
    this.idleScheduled = true;
    const flush = () => {
      this.idleScheduled = false;
      // Our own yield is not quiet: look again after it, or the batch would wait for the next event.
      if (this.yielding) this.scheduleIdleFlush();
      else void this.flush();
    };
    const wait =
      this.gather !== null && this.arrivalRate >= this.gather.eventsPerSecond
        ? this.lastFlushAt + this.gather.intervalMs - Date.now()
        : 0;
    if (wait > 0) {
      this.intervalTimer = setTimeout(() => {
        this.intervalTimer = null;
        flush();
      }, wait);
    } else {
      setImmediate(flush);
    }
  }

  /** Queues the gathered batch behind the one being handled; resolves when it is handled. */
  private flush(): Promise<void> {
    if (this.batch.length === 0) return this.handling;
    const batch = this.batch;
    this.batch = [];
    this.batchBytes = 0;
    this.lastFlushAt = Date.now();
    return this.enqueue(() => this.handleBatch(batch));
  }

  /**
   * Runs `task` behind the batches queued or being handled, counted among them while it waits
   * (back-pressure); resolves once it has run.
   */
  private enqueue(task: () => Promise<void>): Promise<void> {
    this.pending += 1;
    this.handling = this.handling.then(task).finally(() => {
      this.pending -= 1;
      this.wakeReader?.();
      this.wakeReader = null;
    });
    return this.handling;
  }

  /**
   * Hands an unreadable event to a handler that takes it, queued behind the batches before it
   * (the gathered one flushed first), so positions are passed in order. Null once it is
   * passed (the subscription is opened again after it); else the error to resubscribe on:
   * the read's, or the handler's when it could not take the event (tried again then).
   */
  private async passUnreadable(error: unknown): Promise<unknown> {
    const handler = this.handler;
    if (!(error instanceof UnreadableEventError) || handler.unreadable === undefined) return error;
    const { position, recordedAt } = error.event;
    if (position <= this.taken) return error;
    void this.flush();
    const stopping = this.stopping.signal;
    let outcome: unknown = error;
    await this.enqueue(async () => {
      if (this.failure !== null) return;
      try {
        await handler.unreadable!(error, stopping);
      } catch (failure) {
        outcome = failure;
        return;
      }
      outcome = null;
      this.gate.moveTo(position);
      this.observer.committed(0, position, recordedAt);
    });
    if (outcome === null) this.taken = position;
    return outcome;
  }

  private async handleBatch(batch: RecordedEvent[]): Promise<void> {
    if (this.failure !== null) return;
    const stopping = this.stopping.signal;
    try {
      await this.handler.handle(batch, stopping);
    } catch (error) {
      if (stopping.aborted) return;
      this.fail(error);
      void this.subscription?.close();
      return;
    }
    const last = batch[batch.length - 1];
    // Waiters resume on a later microtask, after the observer has seen the commit.
    this.gate.moveTo(last.position);
    this.observer.committed(batch.length, last.position, last.recordedAt);
  }

  private fail(error: unknown): void {
    if (this.failure !== null) return;
    this.failure = error;
    this.batch = [];
    this.batchBytes = 0;
    this.observer.failed(error, this.gate.current());
  }
}
