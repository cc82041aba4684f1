import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { StoreUnavailableError, type EventStore } from './event-store.port';
import { SqliteEventStore, type SqliteSynchronous, type SqliteWriter } from './sqlite.event-store';

export interface StoreSettings {
  /** When set, the log lives in EventStoreDB/KurrentDB; otherwise in DATA_DIR's SQLite file. */
  eventStoreUrl?: string;
  dataDir: string;
  sqliteSynchronous: SqliteSynchronous;
  /** Where a SQLite log's appends are written (default: on the caller's thread). */
  sqliteWriter?: SqliteWriter;
}

export const SQLITE_FILE = 'runledger.db';

/** The one place that chooses the adapter, for the service and for the CLI alike. */
export function openEventStore(settings: StoreSettings): EventStore {
  if (settings.eventStoreUrl) {
    // Loaded only here: the EventStoreDB client (gRPC) takes ~0.2 s to load, which the
    // projector's worker thread would otherwise pay on every start over a SQLite log.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { EsdbEventStore } = require('./esdb.event-store') as typeof import('./esdb.event-store');
    return EsdbEventStore.connect(settings.eventStoreUrl);
  }
  mkdirSync(settings.dataDir, { recursive: true });
  return new SqliteEventStore({
    file: join(settings.dataDir, SQLITE_FILE),
    synchronous: settings.sqliteSynchronous,
    writer: settings.sqliteWriter,
  });
}

export interface StoreWait {
  /** How long to keep retrying an unreachable store; 0 tries once. */
  timeoutMs: number;
  /** Told before each wait, so the process can say what it is waiting for. */
  onRetry?: (retry: { attempt: number; delayMs: number; error: StoreUnavailableError }) => void;
}

const FIRST_DELAY_MS = 250;
const MAX_DELAY_MS = 5000;

/**
 * Waits until the store answers, so a process started beside its store (compose, a pod
 * restarted with the cluster) comes up when the store does instead of exiting. Only an
 * unreachable store is waited for, with doubling delays up to 5 s; any other failure (a bad
 * connection string, refused credentials) is the operator's to fix and is thrown at once.
 */
export async function waitForStore(
  store: Pick<EventStore, 'ping'>,
  { timeoutMs, onRetry }: StoreWait,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let delayMs = FIRST_DELAY_MS;
  for (let attempt = 1; ; attempt++) {
    try {
      await store.ping();
      return;
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new StoreUnavailableError(
          `the event store did not answer in ${attempt} attempt(s) over ${timeoutMs} ms (STORE_STARTUP_TIMEOUT_MS): ${error.message}`,
          { cause: error },
        );
      }
      const wait = Math.min(delayMs, left);
      onRetry?.({ attempt, delayMs: wait, error });
      await new Promise((resolve) => setTimeout(resolve, wait));
      delayMs = Math.min(delayMs * 2, MAX_DELAY_MS);
    }
  }
}

/** `openEventStore`, then `waitForStore`; the store is closed again when it never answers. */
export async function openEventStoreWhenReady(
  settings: StoreSettings,
  wait: StoreWait,
): Promise<EventStore> {
  const store = openEventStore(settings);
  try {
    await waitForStore(store, wait);
    return store;
  } catch (error) {
    await store.close();
    throw error;
  }
}
