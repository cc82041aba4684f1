/**
 * The real runledger api for the read-side bench, built by createApp exactly as main.ts
 * builds it (minus the logger) on the log in BENCH_DATA_DIR, like runledger.server.ts, but
 * with the per-user call budget at its maximum: the bench asks one thread hundreds of times
 * in a few seconds on purpose, and a 429 from the rate limiter is not a latency. The
 * limiter still runs and counts every call.
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
    RATE_LIMIT_CALLS: '100000',
  });
  const app = await createApp(config, config.apiKeys ?? []);
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as AddressInfo;
  serveParent(address.port, () => app.close());
}

main().catch((error: unknown) => {
  console.error('runledger reader bench server failed:', error);
  process.exit(1);
});
