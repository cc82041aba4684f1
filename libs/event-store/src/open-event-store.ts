import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { EventStore } from './event-store.port';
import { EsdbEventStore } from './esdb.event-store';
import { SqliteEventStore, type SqliteSynchronous } from './sqlite.event-store';

export interface StoreSettings {
  /** When set, the log lives in EventStoreDB/KurrentDB; otherwise in DATA_DIR's SQLite file. */
  eventStoreUrl?: string;
  dataDir: string;
  sqliteSynchronous: SqliteSynchronous;
}

export const SQLITE_FILE = 'runledger.db';

/** The one place that chooses the adapter, for the service and for the CLI alike. */
export function openEventStore(settings: StoreSettings): EventStore {
  if (settings.eventStoreUrl) return EsdbEventStore.connect(settings.eventStoreUrl);
  mkdirSync(settings.dataDir, { recursive: true });
  return new SqliteEventStore({
    file: join(settings.dataDir, SQLITE_FILE),
    synchronous: settings.sqliteSynchronous,
  });
}
