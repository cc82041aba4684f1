/**
 * Runs the mirror inside a Nest app (the api when KAFKA_BROKERS is set, or services/mirror
 * alone): opens DATA_DIR/mirror.db and the Kafka sink, follows the log, and turns what the
 * follower reports into logs (with event ids and positions) and metrics. Answers the
 * operational questions: is publishing healthy, which events are parked, re-drive one.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { EVENT_STORE, lagProblem, type EventStore, type FollowerLag } from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import { errorText } from './error-text';
import type { EventSink } from './event-sink.port';
import { KafkaEventSink, topicMaxMessageBytes } from './kafka.event-sink';
import {
  MirrorFollower,
  ParkedEventNotFoundError,
  StillParkedError,
  type MirrorObserver,
  type PublishFailure,
} from './mirror.follower';
import { MirrorStore, type ParkedEvent, type ParkRequest } from './mirror.store';
import type { MirrorFormat } from './run-event.codec';

export const MIRROR_FILE = 'mirror.db';
export const MIRROR_SETTINGS = Symbol('MIRROR_SETTINGS');
const LAG_REFRESH_MS = 1000;

export interface MirrorSettings {
  dataDir: string;
  brokers: readonly string[];
  topic: string;
  partitions: number;
  format: MirrorFormat;
  /** Publishing failing this long turns readiness to not-ready. */
  stallMs: number;
  /** The oldest unpublished run event waiting longer than this turns readiness to not-ready. */
  readyMaxLagMs: number;
  /** Cap of the retry backoff. */
  retryMaxMs: number;
  watchdogMs: number;
  /** EVENT_MAX_BYTES: the topic is made to take a record of an event that size. */
  eventMaxBytes: number;
  /** Tests substitute a sink; production uses Kafka. */
  sink?: EventSink;
}

@Injectable()
export class MirrorService
  implements OnApplicationBootstrap, OnApplicationShutdown, MirrorObserver
{
  readonly store: MirrorStore;
  private readonly sink: EventSink;
  private readonly follower: MirrorFollower;
  private readonly logger = new Logger('mirror');
  private lagTimer: NodeJS.Timeout | null = null;
  /** Why the sink could not be made ready (connected, its topic there), until it could. */
  private unprepared: { since: number; error: unknown } | null = null;
  private prepareTimer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    @Inject(EVENT_STORE) private readonly log: EventStore,
    @Inject(MIRROR_SETTINGS) private readonly settings: MirrorSettings,
    private readonly metrics: Metrics,
  ) {
    mkdirSync(settings.dataDir, { recursive: true });
    this.store = new MirrorStore(join(settings.dataDir, MIRROR_FILE), { topic: settings.topic });
    this.sink =
      settings.sink ??
      new KafkaEventSink({
        brokers: settings.brokers,
        topic: settings.topic,
        partitions: settings.partitions,
        maxMessageBytes: topicMaxMessageBytes(settings.eventMaxBytes),
        log: (level, message, extra) =>
          level === 'error'
            ? this.logger.error({ msg: message, ...extra })
            : this.logger.warn({ msg: message, ...extra }),
      });
    this.follower = new MirrorFollower(log, this.store, this.sink, this, {
      format: settings.format,
      stallMs: settings.stallMs,
      retryMaxMs: settings.retryMaxMs,
      watchdogMs: settings.watchdogMs,
    });
  }

  onApplicationBootstrap(): void {
    this.metrics.mirrorPosition.set(this.follower.current());
    this.metrics.mirrorParkedNow.set(this.store.parkedCount());
    this.metrics.exportMirrorUp();
    this.metrics.mirrorUp.set(1);
    this.follower.start();
    void this.prepare();
    this.logger.log({
      msg: 'mirroring run events to Kafka',
      brokers: this.settings.brokers.join(','),
      topic: this.settings.topic,
      format: this.settings.format,
      fromPosition: this.follower.current(),
    });
    this.lagTimer = setInterval(() => {
      this.lag().catch((error: unknown) =>
        this.logger.warn({ msg: 'could not read the log to measure lag', error: String(error) }),
      );
    }, LAG_REFRESH_MS);
    this.lagTimer.unref();
  }

  /**
   * Connects and makes the topic ready from start-up on, so consumers can subscribe before the
   * first event, and a destination that cannot be reached (a mistyped KAFKA_BROKERS, a topic
   * the broker refuses) shows in readiness at once, not only once an event waits on it.
   * Tried again every MIRROR_RETRY_MAX_MS until it succeeds.
   */
  private async prepare(): Promise<void> {
    if (!this.sink.prepare) return;
    try {
      await this.sink.prepare();
      if (this.unprepared !== null) {
        this.logger.log({
          msg: 'Kafka is ready',
          afterMs: Date.now() - this.unprepared.since,
        });
      }
      this.unprepared = null;
    } catch (error) {
      if (this.closed) return;
      if (this.unprepared === null) {
        this.logger.warn({
          msg: 'could not connect to Kafka or make its topic ready; trying again',
          retryInMs: this.settings.retryMaxMs,
          error: errorText(error),
        });
      }
      this.unprepared = { since: this.unprepared?.since ?? Date.now(), error };
      this.prepareTimer = setTimeout(() => void this.prepare(), this.settings.retryMaxMs);
      this.prepareTimer.unref();
    }
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.lagTimer) clearInterval(this.lagTimer);
    this.closed = true;
    if (this.prepareTimer) clearTimeout(this.prepareTimer);
    await this.follower.stop();
    await this.sink.close();
    this.store.close();
  }

  /** Null while healthy; else why readiness should answer not-ready. */
  async problem(): Promise<string | null> {
    const failing = this.follower.problem();
    if (failing !== null) return failing;
    if (this.unprepared !== null) {
      const seconds = Math.round((Date.now() - this.unprepared.since) / 1000);
      return `cannot connect to Kafka or make topic ${this.settings.topic} ready (for ${seconds} s): ${errorText(this.unprepared.error)}`;
    }
    const behind = await lagProblem(() => this.lag(), this.settings.readyMaxLagMs);
    return behind && `publishing is ${behind}`;
  }

  position(): number {
    return this.follower.current();
  }

  listParked(tenantId: string | null, afterPosition?: number, limit?: number): ParkedEvent[] {
    return this.store.listParked(tenantId, afterPosition, limit);
  }

  /** The parked event with this id that the tenant may see (null: any tenant's). */
  parkedEvent(eventId: string, tenantId: string | null): ParkedEvent | null {
    return this.store.parked(eventId, tenantId);
  }

  /** Re-drives a parked event; see MirrorFollower.retryParked. */
  async retryParked(eventId: string, tenantId: string | null): Promise<ParkedEvent> {
    try {
      const { event, published } = await this.follower.retryParked(eventId, tenantId);
      // One re-drive already published it: this call attempted nothing.
      if (!published) return event;
      this.metrics.mirrorRetries.inc();
      this.metrics.mirrorPublished.inc();
      this.logger.log({
        msg: 'parked event re-driven',
        eventId,
        position: event.position,
        attempts: event.attempts,
      });
      return event;
    } catch (error) {
      // A publish refused again, or one that failed on the way (the broker down), was attempted.
      const attempted =
        error instanceof StillParkedError
          ? error.published
          : !(error instanceof ParkedEventNotFoundError);
      if (attempted) this.metrics.mirrorRetries.inc();
      this.logger.warn({ msg: 'parked event re-drive failed', eventId, error: String(error) });
      throw error;
    } finally {
      this.metrics.mirrorParkedNow.set(this.store.parkedCount());
    }
  }

  /** The watchdog's check, run now (tests; an operator's nudge). */
  checkWatchdog(): Promise<boolean> {
    return this.follower.checkWatchdog();
  }

  published(events: number, position: number): void {
    this.metrics.mirrorPublished.inc(events);
    this.metrics.mirrorPosition.set(position);
  }

  publishFailed(failure: PublishFailure): void {
    this.metrics.mirrorFailures.inc();
    // Every failure is followed by exactly one more attempt of the same events.
    this.metrics.mirrorRetries.inc();
    this.metrics.mirrorUp.set(0);
    // Every failure is logged: a quiet retry loop is how events went missing unnoticed.
    this.logger.error({
      msg: 'publishing to Kafka failed; retrying the same events (nothing is skipped)',
      eventId: failure.eventId,
      position: failure.position,
      batchSize: failure.batchSize,
      attempt: failure.attempt,
      retryInMs: failure.retryInMs,
      error: errorText(failure.error),
    });
  }

  recovered(failures: number, outageMs: number): void {
    this.metrics.mirrorUp.set(1);
    this.logger.log({
      msg: 'publishing to Kafka works again',
      failures,
      outageSeconds: outageMs / 1000,
      position: this.follower.current(),
    });
  }

  parked(event: ParkRequest): void {
    this.metrics.mirrorParked.inc();
    this.metrics.mirrorParkedNow.set(this.store.parkedCount());
    this.logger.error({
      msg: 'run event parked: it was not published; the events after it still are (re-drive: POST /v1/admin/mirror/parked/{eventId}/retry)',
      eventId: event.eventId,
      position: event.position,
      stream: event.stream,
      type: event.type,
      tenantId: event.tenantId,
      reason: event.reason,
    });
  }

  resubscribed(reason: string, fromPosition: number): void {
    this.metrics.mirrorResubscriptions.inc();
    this.logger.warn({ msg: 'following the log again from the checkpoint', reason, fromPosition });
  }

  watchdogFailed(error: unknown): void {
    this.logger.warn({
      msg: 'the watchdog could not read the log; it looks again at its next period',
      error: errorText(error),
    });
  }

  /** Measures the lag now, and sets its gauges. */
  private async lag(): Promise<FollowerLag> {
    const lag = await this.follower.lag();
    this.metrics.mirrorLagEvents.set(lag.events);
    this.metrics.mirrorLagSeconds.set(lag.seconds);
    return lag;
  }
}
