/**
 * The mirror's follower, a handler on the log's one follower (CheckpointedProcessor): reads
 * the run streams of the log from its checkpoint, encodes each event and publishes it through
 * a sink, and moves the checkpoint only after the sink acknowledged (at-least-once:
 * consumers dedupe by tenant and event id). docs/architecture.md, "Why it exists", is why it
 * is built this way:
 *  - a publish failure is retried with capped exponential backoff, forever, counted and
 *    logged with the event's id and position; the checkpoint never skips ahead;
 *  - an event that cannot be encoded, that the broker refuses as it is, or that the log
 *    cannot read (a damaged row), is parked (kept in mirror.db with its reason, re-drivable)
 *    and the events after it still flow;
 *  - a watchdog notices a subscription that went quiet while run events wait in the log,
 *    and resubscribes from the checkpoint.
 */
import { RUN_STREAM_PREFIX, parseStreamName, runStream } from '@runledger/domain';
import {
  CheckpointedProcessor,
  UnreadableEventError,
  followerLag,
  type BatchHandler,
  type EventStoreReader,
  type FollowerLag,
  type RecordedEvent,
} from '@runledger/event-store';
import { errorText } from './error-text';
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
  /** The watchdog could not look at the log (it looks again at its next period). */
  watchdogFailed?(error: unknown): void;
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
    /** Whether it was published again and refused, rather than not publishable at all. */
    readonly published: boolean,
  ) {
    super(`event ${eventId} is still parked: ${reason}`);
    this.name = 'StillParkedError';
  }
}

/** Full batches encoded ahead of the one being published. */
const BATCHES_AHEAD = 3;

/** An event taken from the subscription, with its record or why it has none. */
interface Encoded {
  message?: MirrorMessage;
  refusal?: string;
}

export class MirrorFollower implements BatchHandler {
  private readonly processor: CheckpointedProcessor;
  private position: number;
  private stopped = true;
  /** Encoded as taken, by position, until their batch is committed. */
  private readonly encoded = new Map<number, Encoded>();
  /** Consecutive attempts that failed for a reason other than publishing. */
  private unexpected = 0;
  private failingSince: number | null = null;
  private failures = 0;
  private lastFailure: PublishFailure | null = null;
  /** The publish waiting for the destination's answer: since when, and its first event. */
  private waiting: { since: number; eventId: string; position: number } | null = null;
  private delivered = 0;
  private stoppedBy: string | null = null;
  private watchdog: NodeJS.Timeout | null = null;
  private suspect: { position: number; delivered: number } | null = null;
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
    this.batchBytes = options.batchBytes ?? 512 * 1024;
    this.retryInitialMs = options.retryInitialMs ?? 100;
    this.retryMaxMs = options.retryMaxMs ?? 5000;
    this.watchdogMs = options.watchdogMs ?? 5000;
    this.now = options.now ?? Date.now;
    this.position = store.checkpoint();
    this.processor = new CheckpointedProcessor(
      log,
      this,
      {
        // The handler tells its own progress: it commits byte-bounded parts of a batch.
        committed: () => undefined,
        // The handler retries until acknowledged or stopped and subscriptions are resumed, so
        // this is a bug; the mirror then reports itself not ready rather than lag quietly.
        failed: (error, position) => {
          this.stoppedBy = `the follower stopped at position ${position}: ${errorText(error)}`;
        },
        // The store ended the subscription with an error (EventStoreDB dropped it): follow
        // again after what was already taken.
        resubscribing: (error, position) =>
          this.observer.resubscribed(`the subscription failed: ${errorText(error)}`, position),
      },
      {
        streamPrefix: RUN_STREAM_PREFIX,
        batchSize: options.batchSize ?? 500,
        batchesAhead: BATCHES_AHEAD,
        resubscribeMs: [this.retryInitialMs * 10],
      },
    );
  }

  /** Position of the last event acknowledged by the broker or parked. */
  current(): number {
    return this.position;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.stoppedBy = null;
    this.processor.start();
    this.watchdog = setInterval(() => {
      this.checkWatchdog().catch((error: unknown) => this.observer.watchdogFailed?.(error));
    }, this.watchdogMs);
    this.watchdog.unref();
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.watchdog) clearInterval(this.watchdog);
    await this.processor.stop();
    this.encoded.clear();
  }

  checkpoint(): number {
    this.position = this.store.checkpoint();
    return this.position;
  }

  taken(event: RecordedEvent): void {
    // Encoded as taken, while the handler awaits the broker: the CPU work of the next
    // batches overlaps the network wait of the current one.
    this.encoded.set(event.position, this.encode(event));
    this.delivered += 1;
  }

  /** Null while healthy; else why the mirror should not count as ready. */
  problem(): string | null {
    if (this.stoppedBy !== null) return this.stoppedBy;
    if (this.failingSince === null || this.lastFailure === null) return this.unanswered();
    const failingMs = this.now() - this.failingSince;
    if (failingMs < this.options.stallMs) return this.unanswered();
    const { eventId, position, error } = this.lastFailure;
    return `publishing has failed for ${Math.round(failingMs / 1000)} s (${this.failures} failures; stuck on event ${eventId} at position ${position}): ${errorText(error)}`;
  }

  /** A destination that takes the connection but never answers (a frozen broker) fails nothing. */
  private unanswered(): string | null {
    if (this.waiting === null) return null;
    const { since, eventId, position } = this.waiting;
    const waitedMs = this.now() - since;
    if (waitedMs < this.options.stallMs) return null;
    return `no acknowledgement from the destination for ${Math.round(waitedMs / 1000)} s (waiting on event ${eventId} at position ${position})`;
  }

  /** Mirror lag: how many log positions and how long the oldest unpublished run event waits. */
  lag(): Promise<FollowerLag> {
    return followerLag(this.log, this.position, RUN_STREAM_PREFIX, this.now());
  }

  /**
   * The watchdog's look, also callable directly: when the follower is idle yet a run event
   * after what the subscription delivered has waited through a whole period, the
   * subscription is stalled; resubscribe from the checkpoint. True when it resubscribed.
   */
  async checkWatchdog(): Promise<boolean> {
    if (this.stopped || this.processor.busy()) {
      this.suspect = null;
      return false;
    }
    const [next] = await this.log.readAll({
      fromPosition: this.position + 1,
      maxCount: 1,
      streamPrefix: RUN_STREAM_PREFIX,
    });
    if (!next || this.processor.busy()) {
      this.suspect = null;
      return false;
    }
    const suspect = this.suspect;
    if (suspect && suspect.position === next.position && suspect.delivered === this.delivered) {
      this.suspect = null;
      if (!this.processor.resubscribe()) return false;
      this.observer.resubscribed(
        `run event ${next.id} at position ${next.position} waited a whole watchdog period (${this.watchdogMs} ms) undelivered`,
        this.position,
      );
      return true;
    }
    this.suspect = { position: next.position, delivered: this.delivered };
    return false;
  }

  /**
   * Re-drives a parked event: encodes and publishes it again, alone. Resolves with the
   * updated record once the broker acknowledged, and whether this call published it (an
   * event already re-driven is answered as it is); StillParkedError when it is refused again.
   */
  async retryParked(
    eventId: string,
    tenantId: string | null,
  ): Promise<{ event: ParkedEvent; published: boolean }> {
    const parked = this.store.parked(eventId, tenantId);
    if (!parked) throw new ParkedEventNotFoundError(eventId);
    const { position } = parked;
    if (parked.redrivenAt !== null) return { event: parked, published: false };
    let event: RecordedEvent | undefined;
    try {
      [event] = await this.log.readAll({ fromPosition: parked.position, maxCount: 1 });
    } catch (error) {
      if (!(error instanceof UnreadableEventError)) throw error;
      const reason = unreadableReason(error);
      this.store.recordAttempt(position, reason);
      throw new StillParkedError(eventId, reason, false);
    }
    if (!event || event.id !== eventId) {
      const reason = `the log holds no event ${eventId} at position ${parked.position}`;
      this.store.recordAttempt(position, reason);
      throw new StillParkedError(eventId, reason, false);
    }
    let message: MirrorMessage;
    try {
      message = encodeRunEvent(event, this.options.format);
      await this.sink.publish([message]);
    } catch (error) {
      if (error instanceof UnencodableEventError || error instanceof RejectedMessageError) {
        const reason = reasonOf(error);
        this.store.recordAttempt(position, reason);
        throw new StillParkedError(eventId, reason, error instanceof RejectedMessageError);
      }
      throw error;
    }
    this.store.markRedriven(position);
    return { event: this.store.parkedAt(position) ?? parked, published: true };
  }

  /**
   * An event the log cannot read is parked as an unencodable one is, its position committed:
   * nothing of it can be published until it is mended, and the events after it must not wait
   * for that (re-drive it once mended).
   */
  unreadable(error: UnreadableEventError): void {
    const { id, stream, type, position } = error.event;
    const request: ParkRequest = {
      eventId: id,
      position,
      stream,
      type,
      tenantId: parseStreamName(stream)?.tenantId ?? null,
      reason: unreadableReason(error),
    };
    this.store.commit([request], position);
    this.position = position;
    this.observer.parked(request);
  }

  /** Publishes the batch in parts of at most `batchBytes`, each committed once acknowledged. */
  async handle(batch: readonly RecordedEvent[], stopping: AbortSignal): Promise<void> {
    for (let from = 0; from < batch.length;) {
      from = await this.handlePart(batch, from, stopping);
    }
  }

  private encode(event: RecordedEvent): Encoded {
    try {
      return { message: encodeRunEvent(event, this.options.format) };
    } catch (error) {
      if (!(error instanceof UnencodableEventError)) throw error;
      return { refusal: reasonOf(error) };
    }
  }

  /**
   * Publishes and commits the events from `from` on that fit one publish; returns where the
   * next part starts. Anything but a publish failure (mirror.db not writable, a bug) is
   * retried too: the follower must not die quietly, which is how a mirror once dropped every
   * later event. Counted and logged like a publish failure; the same events are taken
   * again after the backoff.
   */
  private async handlePart(
    batch: readonly RecordedEvent[],
    from: number,
    stopping: AbortSignal,
  ): Promise<number> {
    for (;;) {
      stopping.throwIfAborted();
      const messages: MirrorMessage[] = [];
      const parked: ParkRequest[] = [];
      let bytes = 0;
      let next = from;
      while (next < batch.length) {
        const event = batch[next];
        const { message, refusal } = this.encoded.get(event.position) ?? this.encode(event);
        if (message) {
          if (messages.length > 0 && bytes + message.value.length > this.batchBytes) break;
          bytes += message.value.length;
          messages.push(message);
        } else {
          parked.push(parkRequest(event, refusal ?? 'unencodable'));
        }
        next += 1;
      }
      const part = batch.slice(from, next);
      const last = part[part.length - 1];
      try {
        const unencodable = parked.length;
        await this.publishWithRetry(messages, parked, part, stopping);
        // Parked rows and checkpoint first: should that commit fail, the part is published
        // again (a duplicate), rather than a parked event being forgotten.
        this.store.commit(parked, last.position);
        for (const event of part) this.encoded.delete(event.position);
        this.position = last.position;
        for (const request of parked) this.observer.parked(request);
        const refused = parked.length - unencodable;
        this.observer.published(messages.length - refused, last.position, last.recordedAt);
        // Healthy again only once a part is published and committed.
        this.unexpected = 0;
        this.succeeded();
        return next;
      } catch (error) {
        if (stopping.aborted) throw error;
        this.unexpected += 1;
        const retryInMs = this.backoff(this.unexpected);
        this.failed({
          error,
          attempt: this.unexpected,
          eventId: part[0].id,
          position: part[0].position,
          batchSize: 0,
          retryInMs,
        });
        await sleep(retryInMs, stopping);
      }
    }
  }

  private backoff(attempt: number): number {
    return Math.min(this.retryMaxMs, this.retryInitialMs * 2 ** Math.min(attempt - 1, 20));
  }

  /**
   * Publishes until acknowledged; throws once stopping. A refused batch is sent again one
   * message at a time, so only the refused messages are parked.
   */
  private async publishWithRetry(
    messages: MirrorMessage[],
    parked: ParkRequest[],
    part: readonly RecordedEvent[],
    stopping: AbortSignal,
  ): Promise<void> {
    for (let attempt = 1; ; attempt += 1) {
      stopping.throwIfAborted();
      try {
        if (messages.length > 0) await this.acknowledged(messages, stopping);
        return;
      } catch (error) {
        if (stopping.aborted) throw error;
        if (error instanceof RejectedMessageError) {
          if (messages.length === 1) {
            parked.push(parkMessage(messages[0], part, reasonOf(error)));
            return;
          }
          // Find the refused ones: one by one, in order (each alone still retried on failure).
          for (const message of messages) {
            await this.publishWithRetry([message], parked, part, stopping);
          }
          return;
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
        await sleep(retryInMs, stopping);
      }
    }
  }

  /**
   * Publishes and waits for the destination's answer, or for the stop: a destination that
   * never answers must not hold a shutdown. A publish given up on was not checkpointed, so
   * its events are published again when the mirror starts next (at least once).
   */
  private async acknowledged(messages: MirrorMessage[], stopping: AbortSignal): Promise<void> {
    this.waiting = {
      since: this.now(),
      eventId: messages[0].eventId,
      position: messages[0].position,
    };
    try {
      await untilStopped(this.sink.publish(messages), stopping);
    } finally {
      this.waiting = null;
    }
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
}

/**
 * The work's outcome, or the stop's reason once stopping: whatever the work settles to later
 * is handled here and goes nowhere, as the caller has given up on it.
 */
function untilStopped<T>(work: Promise<T>, stopping: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const stop = () => reject(stopping.reason);
    if (stopping.aborted) stop();
    stopping.addEventListener('abort', stop, { once: true });
    work.then(
      (value) => {
        stopping.removeEventListener('abort', stop);
        resolve(value);
      },
      (error: unknown) => {
        stopping.removeEventListener('abort', stop);
        reject(error);
      },
    );
  });
}

/** A wait that stopping cuts short. */
function sleep(ms: number, stopping: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      stopping.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    stopping.addEventListener('abort', done);
  });
}

function parkMessage(
  message: MirrorMessage,
  part: readonly RecordedEvent[],
  reason: string,
): ParkRequest {
  const event = part.find((e) => e.id === message.eventId && e.position === message.position);
  return {
    eventId: message.eventId,
    position: message.position,
    stream: event?.stream ?? runStream(message.headers['tenant-id'] ?? '', message.key),
    type: message.headers['event-type'],
    tenantId: message.headers['tenant-id'] || null,
    reason,
  };
}

function parkRequest(event: RecordedEvent, reason: string): ParkRequest {
  const tenant = event.metadata.tenantId;
  return {
    eventId: event.id,
    position: event.position,
    stream: event.stream,
    type: event.type,
    // An event without its stamp still belongs to the tenant its stream is named for: only
    // that tenant's admin may see it, or learn its run id.
    tenantId:
      typeof tenant === 'string' && tenant !== ''
        ? tenant
        : (parseStreamName(event.stream)?.tenantId ?? null),
    reason,
  };
}

function unreadableReason(error: UnreadableEventError): string {
  return `unreadable: ${error.reason}`;
}

function reasonOf(error: UnencodableEventError | RejectedMessageError): string {
  return error instanceof UnencodableEventError
    ? `unencodable: ${error.reason}`
    : `refused by the broker: ${error.reason}`;
}
