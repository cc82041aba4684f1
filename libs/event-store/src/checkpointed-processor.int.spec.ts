/**
 * The one log follower, over a real SQLite log: every event handled once, in order, in
 * bounded batches, from the handler's checkpoint; waiters woken; a failed subscription
 * resumed without gap or repeat; a failed handler stops it where it stood.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointedProcessor, type BatchHandler } from './checkpointed-processor';
import { PositionNotReachedError } from './position-gate';
import type { RecordedEvent, SubscribeOptions, Subscription } from './event-store.port';
import { SqliteEventStore } from './sqlite.event-store';

const dir = mkdtempSync(join(tmpdir(), 'runledger-processor-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let file = 0;

function openLog(): SqliteEventStore {
  file += 1;
  return new SqliteEventStore({ file: join(dir, `log-${file}.db`), synchronous: 'NORMAL' });
}

async function append(log: SqliteEventStore, stream: string, count: number): Promise<number> {
  const result = await log.append(
    stream,
    Array.from({ length: count }, (_, i) => ({
      id: `${stream}-${Date.now()}-${Math.random()}-${i}`,
      type: 'test.happened',
      data: { i },
      metadata: {},
    })),
  );
  return result.position;
}

/** A handler that keeps what it was given, and its checkpoint, in memory. */
class Recorder implements BatchHandler {
  readonly handled: number[] = [];
  readonly batchSizes: number[] = [];
  saved = 0;
  failOn: number | null = null;

  checkpoint(): number {
    return this.saved;
  }

  async handle(batch: readonly RecordedEvent[]): Promise<void> {
    if (this.failOn !== null && batch.some((e) => e.position === this.failOn)) {
      throw new Error(`cannot handle position ${this.failOn}`);
    }
    await new Promise((resolve) => setImmediate(resolve));
    this.batchSizes.push(batch.length);
    this.handled.push(...batch.map((e) => e.position));
    this.saved = batch[batch.length - 1].position;
  }
}

const quiet = { committed: () => undefined, failed: () => undefined };

describe('CheckpointedProcessor', () => {
  it('handles every event of the followed streams once, in order, in bounded batches, then follows live', async () => {
    const log = openLog();
    await append(log, 'run-a', 1200);
    await append(log, 'other-x', 5);
    const head = await append(log, 'run-b', 300);
    const recorder = new Recorder();
    const processor = new CheckpointedProcessor(log, recorder, quiet, {
      streamPrefix: 'run-',
      batchSize: 250,
    });
    let ticks = 0;
    const ticker = setInterval(() => (ticks += 1), 1);
    processor.start();
    await processor.waitFor(head, 10_000);
    clearInterval(ticker);
    const live = await append(log, 'run-a', 3);
    await processor.waitFor(live, 5_000);
    await processor.stop();
    await log.close();

    const expected = (await openAndReadAll(file)).filter((e) => e.stream.startsWith('run-'));
    expect(recorder.handled).toEqual(expected.map((e) => e.position));
    expect(Math.max(...recorder.batchSizes)).toBeLessThanOrEqual(250);
    expect(processor.current()).toBe(live);
    // The catch-up left room for timers: it is not one long synchronous stretch.
    expect(ticks).toBeGreaterThan(0);
  });

  it('gathering: the first event after a quiet spell is handled at once, the trickle after it waits for the interval', async () => {
    const log = openLog();
    const recorder = new Recorder();
    const processor = new CheckpointedProcessor(log, recorder, quiet, {
      streamPrefix: 'run-',
      // Any rate counts as load here, and the interval outlasts the test.
      gather: { eventsPerSecond: 0, intervalMs: 60_000 },
    });
    processor.start();
    try {
      const first = await append(log, 'run-a', 1);
      // At once: not a minute later.
      await processor.waitFor(first, 5_000);
      const trickle: number[] = [];
      for (let i = 0; i < 20; i += 1) {
        trickle.push(await append(log, 'run-a', 1));
        await new Promise((resolve) => setImmediate(resolve));
      }
      await expect(processor.waitFor(trickle[0], 300)).rejects.toBeInstanceOf(
        PositionNotReachedError,
      );
    } finally {
      // Stopping handles what was gathered, without waiting out the interval.
      await processor.stop();
      await log.close();
    }
    expect(recorder.batchSizes).toEqual([1, 20]);
  });

  it('gathering starts only once events arrive faster than its rate, and light traffic never waits', async () => {
    const log = openLog();
    const recorder = new Recorder();
    const processor = new CheckpointedProcessor(log, recorder, quiet, {
      streamPrefix: 'run-',
      gather: { eventsPerSecond: 20, intervalMs: 500 },
    });
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    const oneByOne = async (n: number) => {
      let last = 0;
      for (let i = 0; i < n; i += 1) last = await append(log, 'run-a', 1);
      return last;
    };
    processor.start();
    try {
      // Light: one event every 600 ms, each handled well within the interval.
      for (let i = 0; i < 3; i += 1) {
        await processor.waitFor(await oneByOne(1), 400);
        await sleep(600);
      }
      const light = recorder.batchSizes.length;
      // A burst: the window it falls in was quiet, so its events are handled as they come.
      await processor.waitFor(await oneByOne(30), 5_000);
      const burst = recorder.batchSizes.length - light;
      // The window after the burst measures its rate: from here on batches gather.
      await sleep(500);
      await processor.waitFor(await oneByOne(15), 5_000);
      const loaded = recorder.batchSizes.length - light - burst;
      expect(light).toBe(3);
      expect(burst).toBeGreaterThanOrEqual(10);
      expect(loaded).toBeLessThanOrEqual(3);
    } finally {
      await processor.stop();
      await log.close();
    }
  });

  it('starts after the handler checkpoint: a restart repeats nothing', async () => {
    const log = openLog();
    const first = await append(log, 'run-a', 40);
    const recorder = new Recorder();
    const one = new CheckpointedProcessor(log, recorder, quiet, { streamPrefix: 'run-' });
    one.start();
    await one.waitFor(first, 5_000);
    await one.stop();
    const second = await append(log, 'run-a', 10);
    const two = new CheckpointedProcessor(log, recorder, quiet, { streamPrefix: 'run-' });
    two.start();
    await two.waitFor(second, 5_000);
    await two.stop();
    await log.close();
    expect(new Set(recorder.handled).size).toBe(50);
    expect(recorder.handled).toEqual([...recorder.handled].sort((a, b) => a - b));
  });

  it('counts a position of another stream as passed once the followed events before it are handled', async () => {
    const log = openLog();
    const runHead = await append(log, 'run-a', 3);
    const receipt = await append(log, 'receipt-1', 1);
    const processor = new CheckpointedProcessor(log, new Recorder(), quiet, {
      streamPrefix: 'run-',
    });
    processor.start();
    try {
      await processor.waitFor(receipt, 2_000);
      expect(processor.current()).toBe(runHead);
      await expect(processor.waitFor(receipt + 1, 100)).rejects.toBeInstanceOf(
        PositionNotReachedError,
      );
    } finally {
      await processor.stop();
      await log.close();
    }
  });

  it('stops where it stood when the handler fails, and says so', async () => {
    const log = openLog();
    const before = await append(log, 'run-a', 5);
    const bad = await append(log, 'run-a', 1);
    await append(log, 'run-a', 5);
    const recorder = new Recorder();
    recorder.failOn = bad;
    const failures: [unknown, number][] = [];
    const processor = new CheckpointedProcessor(
      log,
      recorder,
      { committed: () => undefined, failed: (error, position) => failures.push([error, position]) },
      { streamPrefix: 'run-', batchSize: 1 },
    );
    processor.start();
    await expect(processor.waitFor(bad, 1_000)).rejects.toBeInstanceOf(PositionNotReachedError);
    await processor.stop();
    await log.close();
    expect(processor.current()).toBe(before);
    expect(failures).toEqual([[expect.any(Error), before]]);
    expect(recorder.handled.at(-1)).toBe(before);
  });

  it('resubscribes after a failed subscription, from the last event taken: no gap, no repeat', async () => {
    const log = openLog();
    const head = await append(log, 'run-a', 30);
    let failuresLeft = 2;
    const flaky = Object.create(log) as SqliteEventStore;
    flaky.subscribeToAll = (options?: SubscribeOptions): Subscription => {
      const inner = log.subscribeToAll(options);
      const fail = failuresLeft > 0;
      failuresLeft -= 1;
      let given = 0;
      return {
        close: () => inner.close(),
        async *[Symbol.asyncIterator]() {
          for await (const page of inner) {
            for (const event of page) {
              if (fail && given === 7) throw new Error('connection reset');
              given += 1;
              yield [event];
            }
          }
        },
      };
    };
    const recorder = new Recorder();
    const retries: number[] = [];
    const processor = new CheckpointedProcessor(
      flaky,
      recorder,
      { ...quiet, resubscribing: (_error, position) => retries.push(position) },
      { streamPrefix: 'run-', batchSize: 4, resubscribeMs: [1] },
    );
    processor.start();
    await processor.waitFor(head, 5_000);
    await processor.stop();
    await log.close();
    expect(retries).toHaveLength(2);
    expect(recorder.handled).toHaveLength(30);
    expect(new Set(recorder.handled).size).toBe(30);
  });
});

describe('an unreadable event (a damaged row)', () => {
  async function damagedLog(): Promise<{ log: SqliteEventStore; bad: number; head: number }> {
    const log = openLog();
    await append(log, 'run-a', 5);
    const bad = await append(log, 'run-a', 1);
    const head = await append(log, 'run-a', 5);
    const raw = new Database(join(dir, `log-${file}.db`));
    raw.prepare("UPDATE events SET data = '{broken' WHERE position = ?").run(bad);
    raw.close();
    return { log, bad, head };
  }

  it('goes to a handler that takes it, after every batch before it, and the events after it follow', async () => {
    const { log, bad, head } = await damagedLog();
    const recorder = new Recorder();
    const order: (number | string)[] = [];
    const handler: BatchHandler = {
      checkpoint: () => recorder.checkpoint(),
      handle: async (batch) => {
        await recorder.handle(batch);
        order.push(...batch.map((e) => e.position));
      },
      unreadable: async (error) => {
        await new Promise((resolve) => setImmediate(resolve));
        order.push(`unreadable ${error.event.position}`);
        recorder.saved = error.event.position;
      },
    };
    const processor = new CheckpointedProcessor(log, handler, quiet, {
      streamPrefix: 'run-',
      batchSize: 2,
      batchesAhead: 2,
      resubscribeMs: [1],
    });
    processor.start();
    await processor.waitFor(head, 5_000);
    await processor.stop();
    await log.close();
    const expected = Array.from({ length: 11 }, (_, i) =>
      i + 1 === bad ? `unreadable ${bad}` : i + 1,
    );
    expect(order).toEqual(expected);
  });

  it('offers it again at the next subscription when the handler could not take it', async () => {
    const { log, bad, head } = await damagedLog();
    const recorder = new Recorder();
    let refusals = 1;
    const reasons: unknown[] = [];
    const handler: BatchHandler = {
      checkpoint: () => recorder.checkpoint(),
      handle: (batch) => recorder.handle(batch),
      unreadable: (error) => {
        if (refusals > 0) {
          refusals -= 1;
          throw new Error('mirror.db is locked');
        }
        recorder.handled.push(error.event.position);
        recorder.saved = error.event.position;
      },
    };
    const processor = new CheckpointedProcessor(
      log,
      handler,
      { ...quiet, resubscribing: (error) => reasons.push(error) },
      { streamPrefix: 'run-', batchSize: 2, resubscribeMs: [1] },
    );
    processor.start();
    await processor.waitFor(head, 5_000);
    await processor.stop();
    await log.close();
    expect(reasons).toEqual([new Error('mirror.db is locked')]);
    expect(recorder.handled).toEqual(Array.from({ length: head }, (_, i) => i + 1));
    expect(recorder.handled[bad - 1]).toBe(bad);
  });

  it('without such a handler, holds the processor at it: nothing after it is handled', async () => {
    const { log, bad } = await damagedLog();
    const recorder = new Recorder();
    const retries: number[] = [];
    const processor = new CheckpointedProcessor(
      log,
      recorder,
      { ...quiet, resubscribing: (_error, position) => retries.push(position) },
      { streamPrefix: 'run-', batchSize: 2, resubscribeMs: [1] },
    );
    processor.start();
    await expect(processor.waitFor(bad, 300)).rejects.toBeInstanceOf(PositionNotReachedError);
    await processor.stop();
    await log.close();
    expect(recorder.handled).toEqual([1, 2, 3, 4, 5]);
    expect(retries.length).toBeGreaterThan(0);
    expect(retries.every((position) => position === bad - 1)).toBe(true);
  });
});

async function openAndReadAll(n: number): Promise<RecordedEvent[]> {
  const log = new SqliteEventStore({ file: join(dir, `log-${n}.db`), synchronous: 'NORMAL' });
  try {
    return await log.readAll();
  } finally {
    await log.close();
  }
}
