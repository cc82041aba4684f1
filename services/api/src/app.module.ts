/**
 * Composes the api service: configuration, access, the event store, the run log and the
 * operational endpoints; and the Kafka mirror when KAFKA_BROKERS is set.
 */
import { Module, type DynamicModule } from '@nestjs/common';
import { APP_FILTER, APP_GUARD } from '@nestjs/core';
import { EventStoreModule } from '@runledger/event-store';
import { ObservabilityModule } from '@runledger/observability';
import { AccessGuard, AccessPolicy } from './auth/access.guard';
import { ApiKeyTable } from './auth/api-keys';
import { APP_CONFIG, type ApiKey, type AppConfig } from './config/config';
import { openConfiguredStore } from './config/process-config';
import { HealthController } from './health/health.controller';
import { ErrorFilter } from './http/error.filter';
import { MirrorAdminController } from './mirror/mirror-admin.controller';
import { mirrorImports } from './mirror/mirror.imports';
import { RATE_LIMIT_PROVIDERS } from './limits/rate-limit.guard';
import { BodyRejections } from './runs/body-rejections';
import { RunLogService } from './runs/run-log.service';
import { RunsController } from './runs/runs.controller';
import { CommandsController } from './commands/commands.controller';
import { CommandsService } from './commands/commands.service';
import { PolicyService } from './commands/policy.service';
import { ProjectionsService } from './threads/projections.service';
import { ThreadsController } from './threads/threads.controller';
import { ThreadsService } from './threads/threads.service';
import { SseFanout } from './streams/sse-fanout.service';
import { StreamsController } from './streams/streams.controller';
import { StreamTokensController } from './streams/stream-tokens.controller';
import { StreamTokens } from './streams/stream-tokens.service';
import { StreamSlots } from './streams/stream-slots';
import { NotificationsController } from './notifications/notifications.controller';
import { NotificationsService } from './notifications/notifications.service';
import { NotificationKafka } from './notifications/notification-kafka.service';
import { SurfaceService } from './surface/surface.service';
import { ThreadDirectory } from './surface/thread-directory.service';
import { BindingsController } from './bindings/bindings.controller';
import { BindingsService } from './bindings/bindings.service';
import { PromptController } from './prompt/prompt.controller';
import { PromptService } from './prompt/prompt.service';

@Module({})
export class AppModule {
  static create(config: AppConfig, keys: readonly ApiKey[]): DynamicModule {
    return {
      module: AppModule,
      imports: [
        EventStoreModule.forRootAsync({
          useFactory: () => openConfiguredStore(config, 'appender'),
        }),
        ObservabilityModule,
        ...mirrorImports(config), // the Kafka mirror, when KAFKA_BROKERS is set
      ],
      controllers: [
        RunsController,
        ThreadsController,
        CommandsController,
        HealthController,
        StreamsController,
        StreamTokensController,
        MirrorAdminController,
        NotificationsController,
        BindingsController,
        PromptController,
      ],
      providers: [
        { provide: APP_CONFIG, useValue: config },
        { provide: ApiKeyTable, useValue: new ApiKeyTable(keys) },
        AccessPolicy,
        RunLogService,
        ProjectionsService,
        ThreadsService,
        PolicyService,
        CommandsService,
        BodyRejections,
        SseFanout,
        StreamTokens,
        StreamSlots,
        SurfaceService,
        NotificationsService,
        NotificationKafka,
        ThreadDirectory,
        BindingsService,
        PromptService,
        { provide: APP_GUARD, useClass: AccessGuard },
        ...RATE_LIMIT_PROVIDERS, // after the AccessGuard: limits need the principal
        { provide: APP_FILTER, useClass: ErrorFilter },
      ],
    };
  }
}
