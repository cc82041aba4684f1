/**
 * The real runledger api, built by createApp exactly as main.ts builds it (minus the
 * logger), on a SQLite file in BENCH_DATA_DIR with synchronous=FULL.
 */
import type { AddressInfo } from 'node:net';
import { createApp } from '../../services/api/src/app';
import { loadConfig } from '../../services/api/src/config/config';
import { serveParent } from '../lib/child-server';

async function main(): Promise<void> {
  const dataDir = process.env.BENCH_DATA_DIR;
  const keys = process.env.BENCH_API_KEYS;
  if (!dataDir || !keys) throw new Error('BENCH_DATA_DIR and BENCH_API_KEYS must be set');
  const config = loadConfig({
    DATA_DIR: dataDir,
    RUNLEDGER_API_KEYS: keys,
    SQLITE_SYNCHRONOUS: 'FULL',
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'error',
    // One key drives the load: the per-user rate limits would refuse almost all of it.
    RATE_LIMIT_CALLS: '100000',
    RATE_LIMIT_COSTLY: '100000',
    // The service's default unless a comparison run sets it (BACKGROUND_THREADS=off).
    ...(process.env.BACKGROUND_THREADS
      ? { BACKGROUND_THREADS: process.env.BACKGROUND_THREADS }
      : {}),
  });
  const app = await createApp(config, config.apiKeys ?? []);
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as AddressInfo;
  serveParent(address.port, () => app.close());
}

main().catch((error: unknown) => {
  console.error('runledger bench server failed:', error);
  process.exit(1);
});
