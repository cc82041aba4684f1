/**
 * "What needs me" on Kafka: every notification item, in position order, on its own topic
 * (KAFKA_NOTIFICATIONS_TOPIC), so a consumer subscribes to the narrow set instead of
 * filtering every run event. Key: `<tenant>:<threadId>` (one thread's items keep their order);
 * value: the item as JSON with its tenant; headers `notification: blocked|finished`, tenant,
 * thread, position. At-least-once, like the mirror: the checkpoint moves only after the
 * broker acknowledged, a failure is retried with capped backoff and reported, never skipped.
 * Consumers dedupe by (tenant, position).
 */
import type { Notification } from '@runledger/domain';
import type { EventSink, MirrorMessage } from '@runledger/mirror';
import type { SurfaceStore } from '../surface/surface.store';

export interface PublisherObserver {
  published(items: number, position: number): void;
  failed(error: unknown, attempt: number, position: number, retryInMs: number): void;
}

export interface PublisherOptions {
  /** KAFKA_NOTIFICATIONS_TOPIC: how far it was published is kept per topic. */
  topic: string;
  batchSize?: number;
  retryInitialMs?: number;
  retryMaxMs?: number;
}

export function notificationMessage(tenantId: string, item: Notification): MirrorMessage {
  return {
    eventId: item.eventId,
    position: item.position,
    key: `${tenantId}:${item.threadId}`,
    value: Buffer.from(JSON.stringify({ tenantId, ...item })),
    headers: {
      notification: item.kind,
      'tenant-id': tenantId,
      'thread-id': item.threadId,
      position: String(item.position),
      'content-type': 'application/json',
    },
  };
}

export class NotificationPublisher {
  private position: number;
  private stopped = true;
  private loop: Promise<void> | null = null;
  private wake: (() => void) | null = null;
  /** Ends a backoff early; only stop() calls it, so new items never cut a backoff short. */
  private interruptBackoff: (() => void) | null = null;
  private readonly batchSize: number;
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  private readonly topic: string;

  constructor(
    private readonly store: SurfaceStore,
    private readonly sink: EventSink,
    private readonly observer: PublisherObserver,
    options: PublisherOptions,
  ) {
    this.topic = options.topic;
    this.batchSize = options.batchSize ?? 200;
    this.retryInitialMs = options.retryInitialMs ?? 100;
    this.retryMaxMs = options.retryMaxMs ?? 5000;
    this.position = store.published(this.topic);
  }

  /** Position of the last item the broker acknowledged. */
  current(): number {
    return this.position;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.loop = this.run();
  }

  /** New items may be there: look now. */
  poke(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.poke();
    this.interruptBackoff?.();
    await this.loop;
    this.loop = null;
  }

  private async run(): Promise<void> {
    let attempt = 0;
    while (!this.stopped) {
      try {
        const batch = this.store.notificationsAfter(this.position, this.batchSize);
        if (batch.length === 0) {
          await new Promise<void>((resolve) => (this.wake = resolve));
          continue;
        }
        const last = batch[batch.length - 1].item.position;
        await this.sink.publish(
          batch.map(({ tenantId, item }) => notificationMessage(tenantId, item)),
        );
        this.store.savePublished(this.topic, last);
        this.position = last;
        attempt = 0;
        this.observer.published(batch.length, last);
      } catch (error) {
        attempt += 1;
        const retryInMs = Math.min(this.retryMaxMs, this.retryInitialMs * 2 ** (attempt - 1));
        this.observer.failed(error, attempt, this.position, retryInMs);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, retryInMs);
          this.interruptBackoff = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    }
  }
}
