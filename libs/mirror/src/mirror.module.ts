/**
 * The mirror as a Nest module: `MirrorModule.forRoot(settings)` runs the follower for the
 * app's lifetime and exports MirrorService. It needs the app's EVENT_STORE and Metrics
 * (EventStoreModule and ObservabilityModule are global).
 */
import { Module, type DynamicModule } from '@nestjs/common';
import { MIRROR_SETTINGS, MirrorService, type MirrorSettings } from './mirror.service';

@Module({})
export class MirrorModule {
  static forRoot(settings: MirrorSettings): DynamicModule {
    return {
      module: MirrorModule,
      providers: [{ provide: MIRROR_SETTINGS, useValue: settings }, MirrorService],
      exports: [MirrorService],
    };
  }
}
