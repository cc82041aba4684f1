/**
 * The mirror's follower: reads the run streams of the log from its checkpoint, encodes each
 * event and publishes it through a sink, and moves the checkpoint only after the sink
 * acknowledged (at-least-once: consumers dedupe by event id). BACKGROUND.md §3 is why it
 * is built this way:
 *  - a publish failure is retried with capped exponential backoff, forever, counted and
 *    logged with the event's id and position; the checkpoint never skips ahead;
 *  - an event that cannot be encoded, or that the broker refuses as it is, is parked (kept
 *    in mirror.db with its reason, re-drivable) and the events after it still flow;
 *  - a watchdog notices a subscription that went quiet while run events wait in the log,
 *    and resubscribes from the checkpoint.
 */
import { RUN_STREAM_PREFIX, runStream } from '@runledger/domain';
import type { EventStoreReader, RecordedEvent, Subscription } from '@runledger/event-store';
import { RejectedMessageError, type EventSink } from './event-sink.port';
import type { MirrorStore, ParkedEvent, ParkRequest } from './mirror.store';
import {
  encodeRunEvent,
  UnencodableEventError,
  type MirrorFormat,
  type MirrorMessage,
} from './run-event.codec';

export interface PublishFailure {
  error: unknown;
  /** 1 for the first failure of this batch. */
  attempt: number;
  /** The oldest unacknowledged event: the one the mirror is stuck on. */
  eventId: string;
  position: number;
  batchSize: number;
  /** The wait before the next attempt. */
  retryInMs: number;
}

export interface MirrorObserver {
  /** After each acknowledged batch, once the checkpoint moved. */
  published(events: number, position: number, lastRecordedAt: string): void;
  publishFailed(failure: PublishFailure): void;
  /** Publishing works again after `failures` failures over `outageMs`. */
  recovered(failures: number, outageMs: number): void;
  parked(event: ParkRequest): void;
  resubscribed(reason: string, fromPosition: number): void;
}

export interface MirrorFollowerOptions {
  format: MirrorFormat;
  /** How long publishing may keep failing before `problem()` reports the mirror not ready. */
  stallMs: number;
  /** Most events per publish. */
  batchSize?: number;
  /** Most value bytes per publish (a broker refuses a record batch above its limit). */
  batchBytes?: number;
  retryInitialMs?: number;
  retryMaxMs?: number;
  /** How often the watchdog looks; a run event left undelivered for a whole period trips it. */
  watchdogMs?: number;
  now?: () => number;
}

export class ParkedEventNotFoundError extends Error {
  readonly code = 'parked_event_not_found';
  constructor(readonly eventId: string) {
    super(`no parked event ${eventId}`);
    this.name = 'ParkedEventNotFoundError';
  }
}

/** A retry that failed for the same kind of reason: the event stays parked. */
export class StillParkedError extends Error {
  readonly code = 'still_parked';
  constructor(
    readonly eventId: string,
    readonly reason: string,
  ) {
    super(`event ${eventId} is still parked: ${reason}`);
    this.name = 'StillParkedError';
  }
}

const QUEUE_HIGH_WATER = 4;

/** An event taken from the subscription, with its record or why it has none. */
interface Queued {
  event: RecordedEvent;
  message?: MirrorMessage;
  refusal?: string;
}

export class MirrorFollower {
  private position: number;
  private subscription: Subscription | null = null;
  private generation = 0;
  private queue: Queued[] = [];
  private stopped = true;
  private loop: Promise<void> | null = null;
  private wakePublisher: (() => void) | null = null;
  private wakePump: (() => void) | null = null;
  private readonly sleepers = new Set<() => void>();
  private inFlight = false;
  /** Consecutive batches that failed for a reason other than publishing. */
  private unexpected = 0;
  private failingSince: number | null = null;
  private failures = 0;
  private lastFailure: PublishFailure | null = null;
  private delivered = 0;
  private watchdog: NodeJS.Timeout | null = null;
  private suspect: { position: number; delivered: number } | null = null;
  private readonly batchSize: number;
  private readonly batchBytes: number;
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  private readonly watchdogMs: number;
  private readonly now: () => number;

  constructor(
    private readonly log: EventStoreReader,
    private readonly store: MirrorStore,
    private readonly sink: EventSink,
    private readonly observer: MirrorObserver,
    private readonly options: MirrorFollowerOptions,
  ) {
    this.batchSize = options.batchSize ?? 500;
    this.batchBytes = options.batchBytes ?? 512 * 1024;
    this.retryInitialMs = options.retryInitialMs ?? 100;
    this.retryMaxMs = options.retryMaxMs ?? 5000;
    this.watchdogMs = options.watchdogMs ?? 5000;
    this.now = options.now ?? Date.now;
    this.position = store.checkpoint();
  }

  /** Position of the last event acknowledged by the broker or parked. */
  current(): number {
    return this.position;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.subscribe();
    this.loop = this.publishLoop();
    this.watchdog = setInterval(() => {
      this.checkWatchdog().catch(() => undefined);
    }, this.watchdogMs);
    this.watchdog.unref();
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.watchdog) clearInterval(this.watchdog);
    this.generation += 1;
    this.wake();
    await this.subscription?.close();
    this.subscription = null;
    await this.loop;
    this.loop = null;
    this.queue = [];
  }

  /** Null while healthy; else why the mirror should not count as ready. */
  problem(): string | null {
    if (this.failingSince === null || this.lastFailure === null) return null;
    const failingMs = this.now() - this.failingSince;
    if (failingMs < this.options.stallMs) return null;
    const { eventId, position, error } = this.lastFailure;
    return `publishing has failed for ${Math.round(failingMs / 1000)} s (${this.failures} failures; stuck on event ${eventId} at position ${position}): ${errorText(error)}`;
  }

  /** Mirror lag: how many log positions and how long the oldest unpublished run event waits. */
  async lag(): Promise<{ events: number; seconds: number }> {
    const [next] = await this.log.readAll({
      fromPosition: this.position + 1,
      maxCount: 1,
      streamPrefix: RUN_STREAM_PREFIX,
    });
    if (!next) return { events: 0, seconds: 0 };
    const head = await this.log.headPosition();
    const waited = (this.now() - Date.parse(next.recordedAt)) / 1000;
    return { events: Math.max(1, head - this.position), seconds: Math.max(0, waited) };
  }

  /**
   * The watchdog's look, also callable directly: when the publisher is idle yet a run event
   * after what the subscription delivered has waited through a whole period, the
   * subscription is stalled; resubscribe from the checkpoint. True when it resubscribed.
   */
  async checkWatchdog(): Promise<boolean> {
    if (this.stopped || this.inFlight || this.queue.length > 0) {
      this.suspect = null;
      return false;
    }
    const seen = this.position;
    const [next] = await this.log.readAll({
      fromPosition: seen + 1,
      maxCount: 1,
      streamPrefix: RUN_STREAM_PREFIX,
    });
    if (!next || this.inFlight || this.queue.length > 0) {
      this.suspect = null;
      return false;
    }
    const suspect = this.suspect;
    if (suspect && suspect.position === next.position && suspect.delivered === this.delivered) {
      this.suspect = null;
      this.resubscribe(
        `run event ${next.id} at position ${next.position} waited a whole watchdog period (${this.watchdogMs} ms) undelivered`,
      );
      return true;
    }
    this.suspect = { position: next.position, delivered: this.delivered };
    return false;
  }

  /**
   * Re-drives a parked event: encodes and publishes it again, alone. Resolves with the
   * updated record once the broker acknowledged; StillParkedError when it is refused again.
   */
  async retryParked(eventId: string, tenantId: string | null): Promise<ParkedEvent> {
    const parked = this.store.parked(eventId, tenantId);
    if (!parked) throw new ParkedEventNotFoundError(eventId);
    const { position } = parked;
    if (parked.redrivenAt !== null) return parked;
    const [event] = await this.log.readAll({ fromPosition: parked.position, maxCount: 1 });
    if (!event || event.id !== eventId) {
      const reason = `the log holds no event ${eventId} at position ${parked.position}`;
      this.store.recordAttempt(position, reason);
      throw new StillParkedError(eventId, reason);
    }
    let message: MirrorMessage;
    try {
      message = encodeRunEvent(event, this.options.format);
      await this.sink.publish([message]);
    } catch (error) {
      if (error instanceof UnencodableEventError || error instanceof RejectedMessageError) {
        const reason = reasonOf(error);
        this.store.recordAttempt(position, reason);
        throw new StillParkedError(eventId, reason);
      }
      throw error;
    }
    this.store.markRedriven(position);
    return this.store.parkedAt(position) ?? parked;
  }

  private subscribe(): void {
    const generation = (this.generation += 1);
    const subscription = this.log.subscribeToAll({
      fromPosition: this.position === 0 ? 'start' : this.position,
      streamPrefix: RUN_STREAM_PREFIX,
    });
    this.subscription = subscription;
    void this.pump(subscription, generation);
  }

  private resubscribe(reason: string): void {
    const old = this.subscription;
    this.queue = [];
    this.subscribe();
    this.observer.resubscribed(reason, this.position);
    void old?.close().catch(() => undefined);
  }

  private encode(event: RecordedEvent): Queued {
    try {
      return { event, message: encodeRunEvent(event, this.options.format) };
    } catch (error) {
      if (!(error instanceof UnencodableEventError)) throw error;
      return { event, refusal: reasonOf(error) };
    }
  }

  /** Moves events from the subscription into the queue, a bounded distance ahead. */
  private async pump(subscription: Subscription, generation: number): Promise<void> {
    try {
      for await (const event of subscription) {
        if (generation !== this.generation) return;
        // Encoded here, while the publisher awaits the broker: the CPU work of the next
        // batch overlaps the network wait of the current one.
        this.queue.push(this.encode(event));
        this.delivered += 1;
        this.wakePublisher?.();
        while (
          this.queue.length >= this.batchSize * QUEUE_HIGH_WATER &&
          generation === this.generation
        ) {
          await new Promise<void>((resolve) => (this.wakePump = resolve));
        }
        if (generation !== this.generation) return;
      }
    } catch (error) {
      if (generation !== this.generation || this.stopped) return;
      // The store ended the subscription with an error (EventStoreDB dropped it): follow
      // again from the checkpoint once the publisher has drained what it already has.
      this.observer.resubscribed(`the subscription failed: ${errorText(error)}`, this.position);
      await this.sleep(this.retryInitialMs * 10);
      if (generation === this.generation && !this.stopped) {
        while (this.queue.length > 0 || this.inFlight) await this.sleep(this.retryInitialMs);
        if (generation === this.generation && !this.stopped) this.subscribe();
      }
    }
  }

  private async publishLoop(): Promise<void> {
    while (!this.stopped) {
      if (this.queue.length === 0) {
        await new Promise<void>((resolve) => (this.wakePublisher = resolve));
        this.wakePublisher = null;
        continue;
      }
      this.inFlight = true;
      try {
        // Healthy again only once a batch is published and committed.
        if (await this.publishBatch()) {
          this.unexpected = 0;
          this.succeeded();
        }
      } catch (error) {
        // Anything else (mirror.db not writable, a bug): the loop must not die quietly, which
        // is how a mirror once dropped every later event. Counted and logged like a publish
        // failure; the same events are taken again after the backoff.
        this.unexpected += 1;
        const head = this.queue[0]?.event;
        const retryInMs = this.backoff(this.unexpected);
        this.failed({
          error,
          attempt: this.unexpected,
          eventId: head?.id ?? '',
          position: head?.position ?? this.position,
          batchSize: 0,
          retryInMs,
        });
        await this.sleep(retryInMs);
      } finally {
        this.inFlight = false;
      }
    }
  }

  private backoff(attempt: number): number {
    return Math.min(this.retryMaxMs, this.retryInitialMs * 2 ** Math.min(attempt - 1, 20));
  }

  /** True once a batch is acknowledged and committed; false when stopped or superseded. */
  private async publishBatch(): Promise<boolean> {
    const generation = this.generation;
    const messages: MirrorMessage[] = [];
    const parked: ParkRequest[] = [];
    let bytes = 0;
    let taken = 0;
    let last: RecordedEvent | null = null;
    while (taken < this.queue.length && taken < this.batchSize) {
      const { event, message, refusal } = this.queue[taken];
      if (message) {
        if (messages.length > 0 && bytes + message.value.length > this.batchBytes) break;
        bytes += message.value.length;
        messages.push(message);
      } else {
        parked.push(parkRequest(event, refusal ?? 'unencodable'));
      }
      last = event;
      taken += 1;
    }
    if (!last) return false;
    const unencodable = parked.length;
    const published = await this.publishWithRetry(messages, parked, generation);
    if (!published || generation !== this.generation) return false;
    // Parked rows and checkpoint first: should that commit fail, the batch stays queued and
    // is published again (a duplicate), rather than a parked event being forgotten.
    this.store.commit(parked, last.position);
    this.queue.splice(0, taken);
    if (this.queue.length < this.batchSize * QUEUE_HIGH_WATER) this.wakePump?.();
    this.position = last.position;
    for (const request of parked) this.observer.parked(request);
    const refused = parked.length - unencodable;
    this.observer.published(messages.length - refused, last.position, last.recordedAt);
    return true;
  }

  /**
   * Publishes until acknowledged (true) or stopped (false). A refused batch is sent again one
   * message at a time, so only the refused messages are parked.
   */
  private async publishWithRetry(
    messages: MirrorMessage[],
    parked: ParkRequest[],
    generation: number,
  ): Promise<boolean> {
    for (let attempt = 1; ; attempt += 1) {
      if (this.stopped || generation !== this.generation) return false;
      try {
        if (messages.length > 0) await this.sink.publish(messages);
        return true;
      } catch (error) {
        if (error instanceof RejectedMessageError) {
          if (messages.length === 1) {
            parked.push(this.parkMessage(messages[0], reasonOf(error)));
            return true;
          }
          // Find the refused ones: one by one, in order (each alone still retried on failure).
          for (const message of messages) {
            const alone = [message];
            if (!(await this.publishWithRetry(alone, parked, generation))) return false;
          }
          return true;
        }
        const retryInMs = this.backoff(attempt);
        this.failed({
          error,
          attempt,
          eventId: messages[0].eventId,
          position: messages[0].position,
          batchSize: messages.length,
          retryInMs,
        });
        await this.sleep(retryInMs);
      }
    }
  }

  private parkMessage(message: MirrorMessage, reason: string): ParkRequest {
    const event = this.queue.find((e) => e.event.id === message.eventId)?.event;
    return {
      eventId: message.eventId,
      position: message.position,
      stream: event?.stream ?? runStream(message.headers['tenant-id'] ?? '', message.key),
      type: message.headers['event-type'],
      tenantId: message.headers['tenant-id'] || null,
      reason,
    };
  }

  private failed(failure: PublishFailure): void {
    this.failures += 1;
    this.failingSince ??= this.now();
    this.lastFailure = failure;
    this.observer.publishFailed(failure);
  }

  private succeeded(): void {
    if (this.failingSince !== null) {
      this.observer.recovered(this.failures, this.now() - this.failingSince);
    }
    this.failingSince = null;
    this.failures = 0;
    this.lastFailure = null;
  }

  /** A wait that `stop()` cuts short. */
  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.sleepers.add(done);
    });
  }

  private wake(): void {
    this.wakePublisher?.();
    this.wakePump?.();
    for (const wake of [...this.sleepers]) wake();
  }
}

function parkRequest(event: RecordedEvent, reason: string): ParkRequest {
  const tenant = event.metadata.tenantId;
  return {
    eventId: event.id,
    position: event.position,
    stream: event.stream,
    type: event.type,
    tenantId: typeof tenant === 'string' && tenant !== '' ? tenant : null,
    reason,
  };
}

function reasonOf(error: UnencodableEventError | RejectedMessageError): string {
  return error instanceof UnencodableEventError
    ? `unencodable: ${error.reason}`
    : `refused by the broker: ${error.reason}`;
}

function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
