/**
 * Provides the EventStore port under EVENT_STORE, built by whichever factory the app
 * chooses (SQLite by default, EventStoreDB when configured), and closes it on shutdown.
 */
import {
  Inject,
  Injectable,
  Module,
  type DynamicModule,
  type InjectionToken,
  type ModuleMetadata,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { EVENT_STORE, type EventStore } from './event-store.port';

@Injectable()
class EventStoreCloser implements OnApplicationShutdown {
  constructor(@Inject(EVENT_STORE) private readonly store: EventStore) {}

  async onApplicationShutdown(): Promise<void> {
    await this.store.close();
  }
}

export interface EventStoreModuleOptions {
  imports?: ModuleMetadata['imports'];
  inject?: InjectionToken[];
  useFactory: (...deps: never[]) => EventStore | Promise<EventStore>;
}

@Module({})
export class EventStoreModule {
  static forRootAsync(options: EventStoreModuleOptions): DynamicModule {
    return {
      module: EventStoreModule,
      global: true,
      imports: options.imports ?? [],
      providers: [
        { provide: EVENT_STORE, useFactory: options.useFactory, inject: options.inject ?? [] },
        EventStoreCloser,
      ],
      exports: [EVENT_STORE],
    };
  }
}
