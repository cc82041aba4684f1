/**
 * Composes the standalone mirror service (`npm run start:mirror`): the log, the metrics, the
 * mirror itself, the notification items' topic (where Kafka is, so is "what needs me"), its
 * probes and the admin routes for parked events, behind the same access guard and API keys
 * as the api. Configuration is the api's one schema.
 */
import { Module, type DynamicModule } from '@nestjs/common';
import { APP_FILTER, APP_GUARD } from '@nestjs/core';
import { EventStoreModule } from '@runledger/event-store';
import { MirrorModule, type MirrorSettings } from '@runledger/mirror';
import { ObservabilityModule } from '@runledger/observability';
import { AccessGuard, AccessPolicy } from '../../api/src/auth/access.guard';
import { ApiKeyTable } from '../../api/src/auth/api-keys';
import { APP_CONFIG, type ApiKey, type AppConfig } from '../../api/src/config/config';
import { openConfiguredStore } from '../../api/src/config/process-config';
import { MirrorAdminController } from '../../api/src/mirror/mirror-admin.controller';
import { MirrorErrorFilter } from './mirror-error.filter';
import { HealthController } from '../../api/src/health/health.controller';
import { NotificationKafka } from '../../api/src/notifications/notification-kafka.service';
import { SurfaceService, SURFACE_FILE_NAME } from '../../api/src/surface/surface.service';

/** The mirror's own notification view, apart from an api's on the same DATA_DIR. */
export const MIRROR_SURFACE_FILE = 'mirror-client-surface.db';

@Module({})
export class MirrorAppModule {
  static create(
    config: AppConfig,
    settings: MirrorSettings,
    keys: readonly ApiKey[],
  ): DynamicModule {
    return {
      module: MirrorAppModule,
      imports: [
        EventStoreModule.forRootAsync({ useFactory: () => openConfiguredStore(config, 'reader') }),
        ObservabilityModule,
        MirrorModule.forRoot(settings),
      ],
      controllers: [HealthController, MirrorAdminController],
      providers: [
        { provide: APP_CONFIG, useValue: config },
        { provide: SURFACE_FILE_NAME, useValue: MIRROR_SURFACE_FILE },
        SurfaceService,
        NotificationKafka,
        { provide: ApiKeyTable, useValue: new ApiKeyTable(keys) },
        AccessPolicy,
        { provide: APP_GUARD, useClass: AccessGuard },
        { provide: APP_FILTER, useClass: MirrorErrorFilter },
      ],
    };
  }
}
