/**
 * Starts the api service: validated configuration first (a bad value stops here, naming
 * the variable), then the app, then one line saying where it listens and how to call it.
 */
import type { AddressInfo } from 'node:net';
import { ConsoleLogger } from '@nestjs/common';
import { createApp } from './app';
import { provisionDevKey } from './auth/api-keys';
import { ConfigError, loadConfig, type AppConfig } from './config/config';
import { mirrorStatusLine } from './mirror/mirror.imports';

const LEVELS = ['error', 'warn', 'log', 'debug', 'verbose'] as const;

async function main(): Promise<void> {
  let config: AppConfig;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`runledger: ${error.message}`);
      process.exit(1);
    }
    throw error;
  }
  const logger = new ConsoleLogger('runledger', {
    json: true,
    logLevels: LEVELS.slice(0, LEVELS.indexOf(config.logLevel) + 1),
  });
  const dev = config.apiKeys === undefined ? provisionDevKey(config.dataDir) : undefined;
  const keys = config.apiKeys ?? [dev!.key];
  const app = await createApp(config, keys, logger);
  app.enableShutdownHooks();
  await app.listen(config.port, config.host);
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

main().catch((error: unknown) => {
  console.error('runledger failed to start:', error);
  process.exit(1);
});
