/**
 * `npm run rebuild`: drops every read model and rebuilds it from the configured log (the
 * same environment variables as the service). Run it while the service is stopped: a
 * running service keeps its own projector, which this would race. The service also
 * rebuilds an empty read store by itself at start-up.
 */
import { join } from 'node:path';
import { Logger } from '@nestjs/common';
import { RUN_STREAM_PREFIX } from '@runledger/domain';
import { openEventStore } from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import { Projector, ReadModelStore } from '@runledger/projections';
import { ConfigError, loadConfig } from '../services/api/src/config/config';
import { jsonLogger } from '../services/api/src/config/process-config';
import { READ_MODELS_FILE, RebuildProgress } from '../services/api/src/threads/projections.service';

const POLL_MS = 50;

async function main(): Promise<void> {
  const config = loadConfig();
  // The service's log format: JSON lines, LOG_LEVEL honoured.
  Logger.overrideLogger(jsonLogger('runledger-rebuild', config));
  const log = openEventStore(config);
  const readModels = new ReadModelStore(join(config.dataDir, READ_MODELS_FILE));
  try {
    readModels.clear();
    const target = await log.headPosition({ streamPrefix: RUN_STREAM_PREFIX });
    const progress = new RebuildProgress(target, new Logger('rebuild'), new Metrics());
    let failure: unknown = null;
    const projector = new Projector(log, readModels, {
      committed: (events, position) => progress.committed(events, position),
      failed: (error, position) => {
        failure = error;
        progress.failed(error, position);
      },
    });
    projector.start();
    while (!progress.reached(projector.current()) && failure === null) {
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    await projector.stop();
    if (failure !== null) throw failure;
  } finally {
    readModels.close();
    await log.close();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error instanceof ConfigError ? `runledger rebuild: ${error.message}` : error);
    process.exit(1);
  },
);
