/**
 * Starts the api service: validated configuration first (a bad value stops here, naming
 * the variable), then the app, then one line saying where it listens and how to call it.
 */
import type { AddressInfo } from 'node:net';
import { createApp } from './app';
import { provisionDevKey, shortKeyWarning } from './auth/api-keys';
import { DataDirInUseError, DataDirLock } from './config/data-dir-lock';
import { exitOnSetting, jsonLogger, loadConfigOrExit } from './config/process-config';
import { mirrorStatusLine } from './mirror/mirror.imports';

async function main(): Promise<void> {
  const config = loadConfigOrExit('runledger');
  // Held until the process exits: `runledger rebuild` must not drop read models under us.
  const lock = holdDataDir(config.dataDir);
  const logger = jsonLogger('runledger', config);
  const dev = config.apiKeys === undefined ? provisionDevKey(config.dataDir) : undefined;
  const keys = config.apiKeys ?? [dev!.key];
  const warning = shortKeyWarning(keys);
  if (warning) console.warn(warning);
  const app = await createApp(config, keys, logger);
  app.enableShutdownHooks();
  process.once('exit', () => lock.release());
  try {
    await app.listen(config.port, config.host);
  } catch (error) {
    exitOnSetting('runledger', `HOST=${config.host} PORT=${config.port}`, error);
  }
  // The bound port, not the configured one: PORT=0 asks the OS for a free port.
  const { port } = app.getHttpServer().address() as AddressInfo;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  const store = config.eventStoreUrl ? 'EventStoreDB' : `SQLite in ${config.dataDir}`;
  console.log(`runledger listening on ${url} (store: ${store}; API docs: ${url}/docs)`);
  console.log(mirrorStatusLine(config));
  if (dev) {
    console.log(
      `authenticate with: Authorization: Bearer ${dev.key.key}  (development key for tenant "dev", all scopes, kept in ${dev.file}; set RUNLEDGER_API_KEYS to use your own)`,
    );
  } else {
    console.log('authenticate with: Authorization: Bearer <a key from RUNLEDGER_API_KEYS>');
  }
}

function holdDataDir(dataDir: string): DataDirLock {
  try {
    return DataDirLock.acquire(dataDir);
  } catch (error) {
    if (!(error instanceof DataDirInUseError))
      exitOnSetting('runledger', `DATA_DIR=${dataDir}`, error);
    console.error(`runledger: ${error.message}`);
    process.exit(1);
  }
}

main().catch((error: unknown) => {
  console.error('runledger failed to start:', error);
  process.exit(1);
});
