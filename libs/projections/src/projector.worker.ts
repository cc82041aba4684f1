/**
 * The projector's worker thread (started by ProjectorThread): follows the log with its own
 * connection, folds into the read models with its own connection, and reports each commit
 * to the thread that started it. Folding and row writes never hold the HTTP event loop.
 */
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { openEventStore } from '@runledger/event-store/open-event-store';
import { SqliteEventStore } from '@runledger/event-store/sqlite.event-store';
import { Projector } from './projector';
import { ReadModelStore } from './read-model.store';
import type { FromProjector, ProjectorWorkerData, ToProjector } from './projector-thread';

function post(message: FromProjector): void {
  parentPort!.postMessage(message);
}

/**
 * Background work: on Linux a thread has a nice value of its own, and this one yields the
 * CPU to the HTTP loop whenever both want it (a start-up rebuild on a 2-core host). Elsewhere
 * the call would lower the whole process, so it is left alone.
 */
const BACKGROUND_NICE = 10;
if (process.platform === 'linux') setPriority(BACKGROUND_NICE);

const { store: settings, readModelsFile, options } = workerData as ProjectorWorkerData;
const log = openEventStore(settings);
const readModels = new ReadModelStore(readModelsFile);
const projector = new Projector(
  log,
  readModels,
  {
    committed: (events, position, lastRecordedAt) =>
      post({ type: 'committed', events, position, lastRecordedAt }),
    failed: (error, position) =>
      post({
        type: 'failed',
        position,
        message: error instanceof Error ? error.message : String(error),
        stack: error instanceof Error ? error.stack : undefined,
      }),
  },
  options,
);

parentPort!.on('message', (message: ToProjector) => {
  if (message.type === 'commit') {
    if (log instanceof SqliteEventStore) log.committedElsewhere();
    return;
  }
  projector
    .stop()
    .then(async () => {
      readModels.close();
      await log.close();
    })
    .then(
      () => post({ type: 'stopped' }),
      (error: unknown) =>
        post({
          type: 'failed',
          position: projector.current(),
          message: `stopping: ${String(error)}`,
          stack: error instanceof Error ? error.stack : undefined,
        }),
    )
    .finally(() => parentPort!.close());
});

projector.start();
post({ type: 'started' });
