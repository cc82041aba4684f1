/**
 * The projector in a worker thread, over real SQLite files: appends made on this thread are
 * folded by the worker and read back through this thread's own connection; a position is
 * waited for; a stop ends the worker and a start resumes from the checkpoint; a worker that
 * cannot run is reported once, never silently lost.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runStream, sealBatch } from '@runledger/domain';
import {
  PositionNotReachedError,
  SqliteEventStore,
  type ProcessorObserver,
} from '@runledger/event-store';
import { ProjectorThread, projectorHeapMib } from './projector-thread';
import { jsonArray } from '@runledger/domain/json-array';
import { ReadModelStore } from './read-model.store';

const root = mkdtempSync(join(tmpdir(), 'runledger-projector-thread-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const tenantId = 'acme';
const runId = 'r1';
const threadId = 'thread-1';

class Log {
  private revision = -1;
  private hash = '';
  constructor(readonly store: SqliteEventStore) {}

  async append(events: { type: string; data: object }[]): Promise<number> {
    const sealed = sealBatch(
      this.revision < 0 ? null : { revision: this.revision, hash: this.hash },
      { tenantId, runId, threadId },
      events.map((event, i) => ({
        id: `00000000-0000-7000-8000-${String(this.revision + 1 + i).padStart(12, '0')}`,
        metadata: {},
        ...event,
      })),
    );
    const result = await this.store.append(runStream(tenantId, runId), sealed);
    this.revision = result.lastRevision;
    this.hash = sealed[sealed.length - 1].metadata.hash as string;
    return result.position;
  }
}

const started = { type: 'run.started', data: { threadId, agent: 'a', source: 'api' } };
const say = (n: number) => ({
  type: 'message.added',
  data: { messageId: `m${n}`, role: 'user', text: `message ${n}` },
});

function recorder() {
  const seen = { committed: [] as number[], failures: [] as unknown[] };
  const observer: ProcessorObserver = {
    committed: (_events, position) => seen.committed.push(position),
    failed: (error) => seen.failures.push(error),
  };
  return { seen, observer };
}

function setUp(name: string) {
  const dataDir = join(root, name);
  mkdirSync(dataDir);
  const store = new SqliteEventStore({
    file: join(dataDir, 'runledger.db'),
    synchronous: 'NORMAL',
  });
  const readModelsFile = join(dataDir, 'read-models.db');
  const readModels = new ReadModelStore(readModelsFile);
  const data = {
    store: { dataDir, sqliteSynchronous: 'NORMAL' as const },
    readModelsFile,
    options: {},
  };
  /** Stops the projector, then closes this thread's connections. */
  const close = async (projector: ProjectorThread) => {
    await projector.stop();
    await store.close();
    readModels.close();
  };
  return { log: new Log(store), store, readModels, data, close };
}

describe('ProjectorThread', () => {
  it('folds appends made on this thread in its worker; this thread reads them once waitFor resolves', async () => {
    const { log, store, readModels, data, close } = setUp('live');
    const { seen, observer } = recorder();
    const projector = new ProjectorThread(store, data, readModels.checkpoint(), observer);
    await projector.start();
    try {
      await log.append([started]);
      for (let n = 0; n < 5; n += 1) {
        const position = await log.append([say(n)]);
        await projector.waitFor(position, 10_000);
        expect(projector.current()).toBeGreaterThanOrEqual(position);
        const head = readModels.head(tenantId, threadId);
        expect(head?.messageCount).toBe(n + 1);
      }
      const page = readModels.messagePage(tenantId, threadId, 10);
      expect(JSON.parse(jsonArray(page.messages).toString())).toEqual(
        [0, 1, 2, 3, 4].map((n) => expect.objectContaining({ id: `m${n}`, role: 'user' })),
      );
      expect(seen.committed.at(-1)).toBe(projector.current());
      expect(seen.failures).toEqual([]);
    } finally {
      await close(projector);
    }
  }, 60_000);

  it('answers PositionNotReachedError for a position the log has not reached, after the timeout', async () => {
    const { log, store, readModels, data, close } = setUp('behind');
    const { seen, observer } = recorder();
    const projector = new ProjectorThread(store, data, readModels.checkpoint(), observer);
    projector.start();
    try {
      const head = await log.append([started]);
      await projector.waitFor(head, 10_000);
      await expect(projector.waitFor(head + 10, 200)).rejects.toEqual(
        new PositionNotReachedError(head, head + 10),
      );
      expect(seen.failures).toEqual([]);
    } finally {
      await close(projector);
    }
  }, 60_000);

  it('stops its worker, and a new one resumes from the checkpoint without folding anything twice', async () => {
    const { log, store, readModels, data, close } = setUp('restart');
    const first = recorder();
    const projector = new ProjectorThread(store, data, readModels.checkpoint(), first.observer);
    projector.start();
    await log.append([started, say(0)]);
    await projector.waitFor(await log.append([say(1)]), 10_000);
    await projector.stop();

    // Appended while no worker runs: nothing folds it.
    const later = await log.append([say(2), say(3)]);
    expect(readModels.head(tenantId, threadId)?.messageCount).toBe(2);

    const second = recorder();
    const resumed = new ProjectorThread(store, data, readModels.checkpoint(), second.observer);
    expect(resumed.current()).toBe(readModels.checkpoint());
    resumed.start();
    try {
      await resumed.waitFor(later, 10_000);
      expect(readModels.head(tenantId, threadId)?.messageCount).toBe(4);
      const ids = (
        JSON.parse(
          jsonArray(readModels.messagePage(tenantId, threadId, 10).messages).toString(),
        ) as {
          id: string;
        }[]
      ).map((message) => message.id);
      expect(ids).toEqual(['m0', 'm1', 'm2', 'm3']);
      expect([...first.seen.failures, ...second.seen.failures]).toEqual([]);
    } finally {
      await close(resumed);
    }
  }, 60_000);

  it('folds 300 events of a megabyte each within its bounded heap: reads and batches are bounded in bytes too', async () => {
    const { log, store, readModels, data, close } = setUp('large-events');
    await log.append([started]);
    const output = 'o'.repeat(2 ** 20 - 200);
    // Appended before the worker starts: it meets them as one catch-up, as after a restart.
    let position = 0;
    for (let call = 0; call < 150; call += 1) {
      position = await log.append([
        { type: 'tool.started', data: { toolCallId: `c${call}`, toolName: 'read', input: {} } },
        { type: 'tool.finished', data: { toolCallId: `c${call}`, failed: false, output } },
      ]);
    }
    const { seen, observer } = recorder();
    const projector = new ProjectorThread(
      store,
      { ...data, heapMib: projectorHeapMib(2 ** 20) },
      readModels.checkpoint(),
      observer,
    );
    projector.start();
    try {
      await projector.waitFor(position, 60_000);
      expect(seen.failures).toEqual([]);
      const part = readModels.toolPart(tenantId, threadId, 'c149');
      expect(part).toMatchObject({ state: 'output-available', output });
      // Many commits, not one batch of 300 megabytes.
      expect(seen.committed.length).toBeGreaterThan(10);
    } finally {
      await close(projector);
    }
  }, 120_000);

  it('reports a worker that cannot open its read models as failed', async () => {
    const { store, data, close } = setUp('broken');
    const { seen, observer } = recorder();
    const broken = { ...data, readModelsFile: join(root, 'no-such-dir', 'read-models.db') };
    const projector = new ProjectorThread(store, broken, 0, observer);
    try {
      // Start settles for a worker that never follows the log too, the failure told first.
      await projector.start();
      expect(seen.failures).toHaveLength(1);
      expect(String(seen.failures[0])).toMatch(
        /unable to open database file|directory does not exist/i,
      );
      await expect(projector.waitFor(1, 100)).rejects.toBeInstanceOf(PositionNotReachedError);
    } finally {
      await close(projector);
    }
  }, 60_000);
});
