/**
 * Start-up against a store that is not there yet: the process waits for an unreachable
 * store with growing delays, gives up with a message naming the setting, and never waits
 * on a failure that waiting cannot fix.
 */
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StoreUnavailableError } from './event-store.port';
import { openEventStoreWhenReady, waitForStore } from './open-event-store';

/** A port nothing listens on: bound, then released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('waiting for the event store at start-up', () => {
  it('retries an unreachable KurrentDB with growing delays, then names the setting', async () => {
    const port = await closedPort();
    const retries: number[] = [];
    const opening = openEventStoreWhenReady(
      {
        eventStoreUrl: `kurrentdb://127.0.0.1:${port}?tls=false`,
        dataDir: mkdtempSync(join(tmpdir(), 'runledger-wait-')),
        sqliteSynchronous: 'FULL',
      },
      { timeoutMs: 1500, onRetry: ({ delayMs }) => retries.push(delayMs) },
    );
    await expect(opening).rejects.toThrow(StoreUnavailableError);
    await expect(opening).rejects.toThrow(/STORE_STARTUP_TIMEOUT_MS/);
    expect(retries.length).toBeGreaterThanOrEqual(2);
    expect(retries[1]).toBeGreaterThan(retries[0]);
  }, 20_000);

  it('comes up once the store answers', async () => {
    let failures = 2;
    const store = {
      ping: async () => {
        if (failures-- > 0) throw new StoreUnavailableError('connection refused');
      },
    };
    const attempts: number[] = [];
    await waitForStore(store, {
      timeoutMs: 10_000,
      onRetry: ({ attempt }) => attempts.push(attempt),
    });
    expect(attempts).toEqual([1, 2]);
  });

  it('does not wait on a failure that waiting cannot fix', async () => {
    const store = {
      ping: async () => {
        throw new Error('access denied');
      },
    };
    const attempts: number[] = [];
    await expect(
      waitForStore(store, { timeoutMs: 10_000, onRetry: ({ attempt }) => attempts.push(attempt) }),
    ).rejects.toThrow('access denied');
    expect(attempts).toEqual([]);
  });

  it('opens the embedded SQLite store at once', async () => {
    const store = await openEventStoreWhenReady(
      { dataDir: mkdtempSync(join(tmpdir(), 'runledger-wait-')), sqliteSynchronous: 'FULL' },
      { timeoutMs: 0 },
    );
    await store.close();
  });
});
