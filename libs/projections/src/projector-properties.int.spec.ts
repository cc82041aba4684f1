/**
 * Rebuild equals live through the real parts (docs/architecture.md, "The read side"): random valid sequences
 * of a thread's events are appended to a SQLite log while a projector follows it live,
 * committing in batches of random sizes; then the read models are rebuilt from scratch into a
 * fresh store. The stored thread and the thread list are the same both ways, and equal the
 * pure fold of the events as the log recorded them.
 *
 * What the writer keeps of its threads between commits varies too: everything, nothing (a
 * budget of a few bytes), and a restart part-way through the live projection, after which
 * the thread is known only by its stored rows.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { runStream, type ProjectedEvent } from '@runledger/domain';
import { SqliteEventStore } from '@runledger/event-store';
import { fold, TENANT, THREAD } from '../../domain/src/projections/testing/thread-events';
import { threadSequences } from '../../domain/src/projections/testing/thread-sequences';
import { Projector } from './projector';
import { ReadModelStore } from './read-model.store';

const dir = mkdtempSync(join(tmpdir(), 'runledger-projector-properties-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let sample = 0;

/** Follows `log` into `readModels` until `head`, in batches of `batchSize`; then stops. */
async function project(
  log: SqliteEventStore,
  readModels: ReadModelStore,
  batchSize: number,
  appendAll: () => Promise<number>,
): Promise<void> {
  const failures: unknown[] = [];
  const projector = new Projector(
    log,
    readModels,
    { committed: () => undefined, failed: (error) => failures.push(error) },
    { batchSize },
  );
  projector.start();
  try {
    await projector.waitFor(await appendAll(), 10_000);
  } finally {
    await projector.stop();
  }
  expect(failures).toEqual([]);
}

describe('the projector over a real log (property)', () => {
  it('live projection, rebuild from scratch and the pure fold of the recorded log agree', async () => {
    await fc.assert(
      fc.asyncProperty(
        threadSequences,
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 1, max: 50 }),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 16 }),
        fc.constantFrom(undefined, 1),
        fc.double({ min: 0, max: 1, noNaN: true }),
        async (
          events: ProjectedEvent[],
          liveBatch,
          rebuildBatch,
          pauses,
          writerCacheBytes,
          restartAt,
        ) => {
          sample += 1;
          const log = new SqliteEventStore({
            file: join(dir, `events-${sample}.db`),
            synchronous: 'NORMAL',
          });
          const liveFile = join(dir, `live-${sample}.db`);
          let live = new ReadModelStore(liveFile, { writerCacheBytes });
          const rebuilt = new ReadModelStore(join(dir, `rebuilt-${sample}.db`), {
            writerCacheBytes,
          });
          const split = Math.floor(restartAt * events.length);
          const appendAll = (from: number, to: number) => async () => {
            let head = 0;
            for (const [i, event] of events.slice(from, to).entries()) {
              const { id, type, data, metadata } = event;
              const runId = metadata.runId as string;
              const tenantId = metadata.tenantId as string;
              head = (await log.append(runStream(tenantId, runId), [{ id, type, data, metadata }]))
                .position;
              // Now and then the projector gets a turn of the event loop mid-sequence.
              if (pauses[i % pauses.length]) await new Promise((r) => setImmediate(r));
            }
            return head;
          };
          try {
            if (split > 0) {
              await project(log, live, liveBatch, appendAll(0, split));
              live.close();
              live = new ReadModelStore(liveFile, { writerCacheBytes });
            }
            await project(log, live, liveBatch, appendAll(split, events.length));
            const head = await log.headPosition();
            await project(log, rebuilt, rebuildBatch, async () => head);

            const recorded = await log.readAll();
            const expected = JSON.parse(JSON.stringify(fold(recorded as ProjectedEvent[])));
            expect(live.thread(TENANT, THREAD)).toEqual(expected);
            expect(rebuilt.thread(TENANT, THREAD)).toEqual(expected);
            expect(rebuilt.checkpoint()).toBe(live.checkpoint());
            const list = (store: ReadModelStore) => store.listThreads(TENANT, { limit: 10 });
            expect(list(rebuilt)).toEqual(list(live));
            expect(list(live)).toHaveLength(1);
          } finally {
            live.close();
            rebuilt.close();
            await log.close();
          }
        },
      ),
      { numRuns: 40 },
    );
  }, 120_000);
});
