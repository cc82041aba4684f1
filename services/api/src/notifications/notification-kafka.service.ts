/**
 * Publishes the notification items to Kafka when KAFKA_BROKERS is set (to
 * KAFKA_NOTIFICATIONS_TOPIC), woken by every commit of the client surface; logs each
 * failure with the position it is stuck on. Without brokers it does nothing.
 */
import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import { KafkaEventSink } from '@runledger/mirror';
import { Metrics } from '@runledger/observability';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { SurfaceService } from '../surface/surface.service';
import { NotificationPublisher } from './notification-publisher';

@Injectable()
export class NotificationKafka implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger('notifications-kafka');
  private publisher: NotificationPublisher | null = null;
  private sink: KafkaEventSink | null = null;
  private stopListening: (() => void) | null = null;

  constructor(
    private readonly surface: SurfaceService,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly metrics: Metrics,
  ) {}

  onApplicationBootstrap(): void {
    const { brokers, notificationsTopic, partitions, retryMaxMs } = this.config.mirror;
    if (!brokers || brokers.length === 0) return;
    this.sink = new KafkaEventSink({
      brokers,
      topic: notificationsTopic,
      partitions,
      clientId: 'runledger-notifications',
    });
    this.publisher = new NotificationPublisher(
      this.surface.store,
      this.sink,
      {
        published: () => undefined,
        failed: (error, attempt, position, retryInMs) => {
          this.metrics.notificationPublishFailures.inc();
          this.logger.warn({
            msg: 'publishing notifications to Kafka failed; retrying',
            topic: notificationsTopic,
            position,
            attempt,
            retryInMs,
            error: String(error),
          });
        },
      },
      { topic: notificationsTopic, retryMaxMs },
    );
    this.stopListening = this.surface.onCommit(() => this.publisher?.poke());
    this.publisher.start();
  }

  /** Before the application's shutdown hooks, so the surface's store is still open while it stops. */
  async onModuleDestroy(): Promise<void> {
    this.stopListening?.();
    await this.publisher?.stop();
    await this.sink?.close();
  }
}
