import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { ChainVerifier, receiptStream, runStream, sealBatch } from '@runledger/domain';
import { loopTurns } from '../../domain/src/testing/loop-turns';
import { describeEventStoreContract } from './event-store.contract';
import {
  EventIdConflictError,
  StoreUnavailableError,
  UnreadableEventError,
} from './event-store.port';
import { SqliteEventStore } from './sqlite.event-store';

/** Characters of every string in a value, as a structured clone copies them. */
function stringChars(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (Array.isArray(value)) return value.reduce((sum: number, item) => sum + stringChars(item), 0);
  if (typeof value === 'object' && value !== null && !ArrayBuffer.isView(value)) {
    return Object.values(value).reduce((sum: number, item) => sum + stringChars(item), 0);
  }
  return 0;
}

/** The `n`th event of a test's stream: its id numbered by `n`, its data `{ n }` unless given. */
function event(n: number, data: Record<string, unknown> = { n }, type = 'message.added') {
  return {
    id: `00000000-0000-7000-8000-${String(n).padStart(12, '0')}`,
    type,
    data,
    metadata: {},
  };
}

const dir = mkdtempSync(join(tmpdir(), 'runledger-sqlite-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describeEventStoreContract(
  'SQLite',
  async () => new SqliteEventStore({ file: join(dir, 'events.db') }),
);

describeEventStoreContract(
  'SQLite with a writer thread',
  async () => new SqliteEventStore({ file: join(dir, 'events-threaded.db'), writer: 'thread' }),
  { timeoutMs: 60_000 },
);

describe('a stored event whose JSON does not parse', () => {
  const file = join(dir, 'damaged.db');
  const events = Array.from({ length: 6 }, (_, n) => event(n));
  let store: SqliteEventStore;
  let bad: { id: string; position: number };
  beforeAll(async () => {
    store = new SqliteEventStore({ file });
    await store.append(runStream('acme', 'damaged'), events);
    const db = new Database(file);
    bad = db.prepare('SELECT id, position FROM events WHERE revision = 3').get() as typeof bad;
    db.prepare("UPDATE events SET data = '{broken' WHERE revision = 3").run();
    db.close();
  });
  afterAll(() => store.close());

  const unreadable = (from: () => Promise<unknown>) =>
    from().then(
      () => {
        throw new Error('read it');
      },
      (error: unknown) => error,
    );

  it('ends a page before it, and a read that starts at it names it', async () => {
    const stream = runStream('acme', 'damaged');
    expect((await store.readStream(stream)).map((e) => e.revision)).toEqual([0, 1, 2]);
    expect((await store.readAll()).map((e) => e.revision)).toEqual([0, 1, 2]);
    const error = await unreadable(() => store.readStream(stream, { fromRevision: 3 }));
    expect(error).toBeInstanceOf(UnreadableEventError);
    expect(error).toMatchObject({
      event: { id: bad.id, stream, revision: 3, position: bad.position, type: 'message.added' },
      message: expect.stringContaining('does not parse'),
    });
    expect(await unreadable(() => store.readAll({ fromPosition: bad.position }))).toBeInstanceOf(
      UnreadableEventError,
    );
    expect(await unreadable(() => store.readByIds(stream, [bad.id]))).toBeInstanceOf(
      UnreadableEventError,
    );
    // The events after it are read as before.
    expect((await store.readStream(stream, { fromRevision: 4 })).map((e) => e.revision)).toEqual([
      4, 5,
    ]);
  });

  it('names it to a reader resuming from the event before it, rather than answer no progress', async () => {
    const stream = runStream('acme', 'damaged');
    const [before] = await store.readStream(stream, { fromRevision: 2, maxCount: 1 });
    const resumed = (held: number) => ({ fromPosition: held, heldPosition: held });
    // From the event before it, which the reader holds: nothing past it but the unreadable one.
    for (const filter of [{}, { stream }]) {
      const error = await unreadable(() =>
        store.readAll({ ...resumed(before.position), ...filter }),
      );
      expect(error).toMatchObject({ event: { revision: 3, position: bad.position } });
    }
    // From further back the page still ends before it, holding what is new.
    expect(
      (await store.readAll({ ...resumed(before.position - 1), stream })).map((e) => e.revision),
    ).toEqual([1, 2]);
    // Resumed from it (a reader that showed it in its place), the log reads on past it.
    expect((await store.readAll(resumed(bad.position))).map((e) => e.revision)).toEqual([4, 5]);
    // A reader that holds nothing yet still gets what comes before it.
    expect((await store.readAll({ fromPosition: before.position })).map((e) => e.revision)).toEqual(
      [2],
    );
  });

  it('gives a subscription every event before it, then fails naming it', async () => {
    const seen: number[] = [];
    const error = await unreadable(async () => {
      for await (const page of store.subscribeToAll({ fromPosition: 'start' })) {
        for (const event of page) seen.push(event.revision);
      }
    });
    expect(seen).toEqual([0, 1, 2]);
    expect(error).toMatchObject({ event: { revision: 3, position: bad.position } });
  });
});

describe('a stored event whose metadata is JSON but not an object', () => {
  it.each(['null', '[]', '5'])(
    'is unreadable, named, as one that does not parse (%s)',
    async (json) => {
      const file = join(dir, `metadata-${json.length}-${json.charCodeAt(0)}.db`);
      const store = new SqliteEventStore({ file });
      try {
        const stream = runStream('acme', 'metadata');
        await store.append(
          stream,
          [0, 1].map((n) => event(n)),
        );
        const db = new Database(file);
        db.prepare('UPDATE events SET metadata = ? WHERE revision = 1').run(json);
        db.close();
        expect((await store.readStream(stream)).map((e) => e.revision)).toEqual([0]);
        const error = await store.readStream(stream, { fromRevision: 1 }).then(
          () => null,
          (caught: unknown) => caught,
        );
        expect(error).toBeInstanceOf(UnreadableEventError);
        expect(error).toMatchObject({
          event: { revision: 1 },
          message: expect.stringContaining('metadata'),
        });
      } finally {
        await store.close();
      }
    },
  );
});

describe('SQLite subscriptions', () => {
  it('read large events about a megabyte at a time and go on at once, every event in order with its size', async () => {
    // A poll interval longer than the test: only reading on at once can deliver them all.
    const store = new SqliteEventStore({ file: join(dir, 'large.db'), pollIntervalMs: 600_000 });
    const text = 'x'.repeat(2 ** 18);
    const events = Array.from({ length: 12 }, (_, n) => event(n, { n, text }));
    await store.append(runStream('acme', 'large'), events);
    const subscription = store.subscribeToAll({ fromPosition: 'start' });
    try {
      const seen: { n: number; size: number }[] = [];
      const pages: number[] = [];
      // Whether other work had a turn since the page before.
      const { turns, mark } = loopTurns();
      for await (const page of subscription) {
        mark();
        pages.push(page.length);
        for (const event of page) {
          seen.push({ n: (event.data as { n: number }).n, size: event.size ?? 0 });
        }
        if (seen.length >= events.length) break;
      }
      expect(seen.map((event) => event.n)).toEqual(events.map((_, n) => n));
      for (const event of seen) expect(event.size).toBeGreaterThan(2 ** 18);
      // A read stops once the events after its first hold 1 MiB of JSON: five of these events,
      // never the twelve.
      expect(Math.max(...pages)).toBe(5);
      expect(turns).toEqual(pages.map(() => true));
    } finally {
      await subscription.close();
      await store.close();
    }
  }, 10_000);
});

describe('SQLite stream reads without the data of some types', () => {
  it("count the data they skip in a page's budget: SQLite walks it to reach the metadata after it", async () => {
    const store = new SqliteEventStore({ file: join(dir, 'data-of.db') });
    try {
      const text = 'x'.repeat(2 ** 18);
      const events = Array.from({ length: 12 }, (_, n) => event(n, { n, text }, 'model.call'));
      await store.append(runStream('acme', 'data-of'), events);
      const page = await store.readStream(runStream('acme', 'data-of'), {
        maxChars: 2 ** 20,
        dataTypes: [],
      });
      // As many as when read whole: five of these events after 1 MiB, never the twelve.
      expect(page.map((event) => event.data)).toEqual([null, null, null, null, null]);
    } finally {
      await store.close();
    }
  });
});

describe('SQLite reads at once', () => {
  it('are answered in the turn they were asked while they are small, and spread over turns once they are not', async () => {
    const store = new SqliteEventStore({ file: join(dir, 'read-turns.db') });
    try {
      const text = 'x'.repeat(2 ** 18);
      await store.append(
        runStream('acme', 'large'),
        Array.from({ length: 12 }, (_, n) => event(n, { n, text })),
      );
      await store.append(runStream('acme', 'small'), [
        { id: '00000000-0000-7000-8000-100000000000', type: 'run.started', data: {}, metadata: {} },
      ]);
      // Read in a later turn, a small read left a client that half-closed its socket unanswered.
      let turned = false;
      setImmediate(() => (turned = true));
      expect(await store.readStream(runStream('acme', 'small'))).toHaveLength(1);
      expect(turned).toBe(false);

      await new Promise((resolve) => setImmediate(resolve));
      // Twenty pages of 3 MiB were read back to back in one turn; now a turn reads a slice.
      const { turns, mark } = loopTurns();
      await Promise.all(
        Array.from({ length: 20 }, () => store.readStream(runStream('acme', 'large')).then(mark)),
      );
      expect(turns.filter(Boolean).length).toBeGreaterThan(5);
    } finally {
      await store.close();
    }
  });
});

describe('SQLite appends of large events', () => {
  it.each([['inline'], ['thread']] as const)(
    'serialize a batch of megabyte events in slices, so a small append made after it is not held behind it (%s writer)',
    async (writer) => {
      const store = new SqliteEventStore({ file: join(dir, `sliced-${writer}.db`), writer });
      try {
        const text = 'x'.repeat(2 ** 20);
        const large = Array.from({ length: 25 }, (_, n) => event(n, { n, text }));
        const small = [{ ...large[0], id: '00000000-0000-7000-8000-100000000000', data: {} }];
        const [big, quick] = await Promise.all([
          store.append(runStream('acme', 'large'), large),
          store.append(runStream('acme', 'small'), small),
        ]);
        expect(quick.position).toBeLessThan(big.events[0].position);
        expect((await store.readStream(runStream('acme', 'large'))).length).toBe(25);
      } finally {
        await store.close();
      }
    },
    30_000,
  );
});

describe('SQLite with a writer thread', () => {
  it('answers every append of a burst with its own outcome, in order, and close waits for all of them', async () => {
    const file = join(dir, 'burst.db');
    const store = new SqliteEventStore({ file, writer: 'thread', maxGroupSize: 7 });
    const stream = runStream('acme', 'burst');
    const appends = Array.from({ length: 50 }, (_, n) =>
      store.append(stream, [event(n)], { expectedRevision: n === 0 ? 'no_stream' : 'any' }),
    );
    // Refused inside a group that also writes: only this append fails.
    const refused = store.append(stream, [event(1000)], { expectedRevision: 'no_stream' });
    const late = store.append(stream, [event(50)]);
    const closing = store.close();
    const results = await Promise.all(appends);
    expect(results.map((result) => result.firstRevision)).toEqual(
      Array.from({ length: 50 }, (_, n) => n),
    );
    await expect(refused).rejects.toMatchObject({
      name: 'WrongExpectedRevisionError',
      actual: expect.any(Number),
    });
    await expect(late).resolves.toMatchObject({ firstRevision: 50 });
    await closing;
    const reopened = new SqliteEventStore({ file });
    try {
      expect((await reopened.readStream(stream)).map((e) => e.data)).toEqual(
        Array.from({ length: 51 }, (_, n) => ({ n })),
      );
    } finally {
      await reopened.close();
    }
  }, 60_000);

  /** Another connection holds the log's write lock: the writer's next commit waits on it. */
  function holdWriteLock(file: string): Database.Database {
    const lock = new Database(file, { timeout: 0 });
    lock.exec('BEGIN IMMEDIATE');
    return lock;
  }
  /** Long enough for the appends made before it to reach the writer as a group of their own. */
  const pause = (ms = 50) => new Promise<void>((resolve) => setTimeout(resolve, ms));

  it('answers each group sent while a commit waits with its own outcomes, once the commit ends', async () => {
    const file = join(dir, 'queued.db');
    const store = new SqliteEventStore({ file, writer: 'thread', maxGroupSize: 7 });
    const stream = runStream('acme', 'queued');
    await store.append(stream, [event(0)]);
    const lock = holdWriteLock(file);
    try {
      const first = store.append(stream, [event(1)]);
      await pause(200);
      // Three more groups reach the writer while it waits on the lock, one refused.
      const second = [store.append(stream, [event(2)]), store.append(stream, [event(3)])];
      await pause();
      const refused = store.append(stream, [event(99)], { expectedRevision: 1 }).catch((e) => e);
      const third = store.append(stream, [event(4)], { expectedRevision: 'any' });
      await pause();
      const fourth = Array.from({ length: 9 }, (_, n) => store.append(stream, [event(5 + n)]));
      await pause();
      lock.exec('ROLLBACK');
      const answered = await Promise.all([first, ...second, third, ...fourth]);
      expect(answered.map((result) => result.firstRevision)).toEqual(
        Array.from({ length: 13 }, (_, n) => n + 1),
      );
      expect(await refused).toMatchObject({ name: 'WrongExpectedRevisionError', actual: 3 });
      expect((await store.readStream(stream)).map((e) => e.data)).toEqual(
        Array.from({ length: 14 }, (_, n) => ({ n })),
      );
    } finally {
      if (lock.inTransaction) lock.exec('ROLLBACK');
      lock.close();
      await store.close();
    }
  }, 60_000);

  it('fails every group a failed commit took, and only those: the next commit writes', async () => {
    const file = join(dir, 'busy.db');
    const store = new SqliteEventStore({ file, writer: 'thread' });
    const stream = runStream('acme', 'busy');
    await store.append(stream, [event(0)]);
    const lock = holdWriteLock(file);
    try {
      // The first commit waits out the writer's busy timeout (5 s) and fails; the two groups
      // sent meanwhile are taken into the next one, which fails the same way.
      const failed = [];
      for (let n = 1; n <= 3; n += 1) {
        failed.push(store.append(stream, [event(n)]).catch((e: unknown) => e));
        await pause(n === 1 ? 200 : 50);
      }
      for (const error of await Promise.all(failed)) {
        expect(error).toBeInstanceOf(StoreUnavailableError);
        expect(String(error)).toMatch(/SQLite commit failed: .*database is locked/);
      }
      await expect(store.ping()).rejects.toThrow(/commit failed/);
      lock.exec('ROLLBACK');
      await expect(store.append(stream, [event(4)])).resolves.toMatchObject({ firstRevision: 1 });
      await expect(store.ping()).resolves.toBeUndefined();
      expect((await store.readStream(stream)).map((e) => e.data)).toEqual([{ n: 0 }, { n: 4 }]);
    } finally {
      if (lock.inTransaction) lock.exec('ROLLBACK');
      lock.close();
      await store.close();
    }
  }, 60_000);

  it('answers a retried batch with its originals and a changed one with a conflict, as inline', async () => {
    const store = new SqliteEventStore({ file: join(dir, 'idempotent.db'), writer: 'thread' });
    try {
      const stream = runStream('acme', 'retry');
      const first = await store.append(stream, [event(1), event(2)]);
      const again = await store.append(stream, [event(1), event(2)]);
      expect(again).toEqual({ ...first, idempotent: true });
      await expect(
        store.append(stream, [{ ...event(1), data: { n: 'changed' } }]),
      ).rejects.toBeInstanceOf(EventIdConflictError);
    } finally {
      await store.close();
    }
  }, 60_000);

  it('moves long data to the thread as bytes and stores the very text: read back, retried, changed', async () => {
    const store = new SqliteEventStore({ file: join(dir, 'wire.db'), writer: 'thread' });
    try {
      const stream = runStream('acme', 'wire');
      const text = 'é😀"\\\n\u0001 '.repeat(20_000);
      const long = { ...event(1), data: { n: 1, text } };
      const first = await store.append(stream, [long, event(2)]);
      const [read] = await store.readStream(stream, { maxCount: 1 });
      expect(read.data).toEqual({ n: 1, text });
      await expect(store.append(stream, [long, event(2)])).resolves.toEqual({
        ...first,
        idempotent: true,
      });
      await expect(
        store.append(stream, [{ ...long, data: { n: 1, text: `${text}!` } }]),
      ).rejects.toBeInstanceOf(EventIdConflictError);
    } finally {
      await store.close();
    }
  }, 60_000);

  it('copies a few characters per event to the thread however large the batch: medium data and metadata move as bytes', async () => {
    const store = new SqliteEventStore({ file: join(dir, 'wire-batch.db'), writer: 'thread' });
    // The characters of every string in each message the writer thread is sent: those are
    // copied by postMessage on this thread, where moved buffers are not.
    const sent: number[] = [];
    const original = Worker.prototype.postMessage;
    const post = jest.spyOn(Worker.prototype, 'postMessage').mockImplementation(function (
      this: Worker,
      message,
      transfer,
    ) {
      sent.push(stringChars(message));
      original.call(this, message, transfer);
    });
    try {
      const stream = runStream('acme', 'wire-batch');
      // 8 MiB of data in 16 KiB texts and 2 MiB of metadata: each event under the 64 Ki
      // characters that once decided whether data went as bytes.
      const events = Array.from({ length: 512 }, (_, n) => ({
        ...event(n),
        data: { n, text: 'é'.repeat(16 * 1024) },
        metadata: { note: 'm'.repeat(4 * 1024) },
      }));
      await store.append(stream, events);
      const [read] = await store.readStream(stream, { maxCount: 1 });
      expect(read.data).toEqual(events[0].data);
      expect(read.metadata).toEqual(events[0].metadata);
      // A group whose strings are copied costs the loop about 3.5 ms a MiB: at most a few
      // hundred characters of each event are copied, not the 10 MiB of the batch.
      expect(sent.length).toBeGreaterThan(0);
      expect(Math.max(...sent)).toBeLessThan(512 * 1024);
    } finally {
      post.mockRestore();
      await store.close();
    }
  }, 60_000);

  it('refuses appends and fails ping once its writer is gone, instead of leaving them waiting', async () => {
    const store = new SqliteEventStore({ file: join(dir, 'gone.db'), writer: 'thread' });
    const stream = runStream('acme', 'gone');
    await store.append(stream, [event(1)]);
    const { worker } = (
      store as unknown as { writer: { worker: { terminate(): Promise<number> } } }
    ).writer;
    await worker.terminate();
    await expect(store.append(stream, [event(2)])).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(store.ping()).rejects.toThrow(/writer thread exited/);
    await store.close();
  }, 60_000);
});

describe('SQLite event ids', () => {
  it('are unique per tenant: a tenant cannot record one id in two of its runs', async () => {
    const store = new SqliteEventStore({ file: join(dir, 'ids.db') });
    try {
      const id = '00000000-0000-7000-8000-000000000001';
      const one = { id, type: 't', data: {}, metadata: {} };
      await store.append(runStream('acme', 'r1'), [one]);
      await expect(store.append(runStream('acme', 'r2'), [one])).rejects.toThrow(
        EventIdConflictError,
      );
      await expect(store.append(runStream('globex', 'r2'), [one])).resolves.toMatchObject({
        idempotent: false,
      });
    } finally {
      await store.close();
    }
  });
});

describe('a log written before streams were scoped by tenant', () => {
  /** The layout of every release before tenant-scoped streams, with what the service wrote. */
  function writeLegacyLog(file: string): void {
    const db = new Database(file);
    db.exec(`
      CREATE TABLE events (
        position    INTEGER PRIMARY KEY AUTOINCREMENT,
        stream      TEXT    NOT NULL,
        revision    INTEGER NOT NULL,
        id          TEXT    NOT NULL UNIQUE,
        type        TEXT    NOT NULL,
        data        TEXT    NOT NULL,
        metadata    TEXT    NOT NULL,
        recorded_at TEXT    NOT NULL,
        UNIQUE (stream, revision)
      );
    `);
    const insert = db.prepare(
      'INSERT INTO events (stream, revision, id, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
    const context = { tenantId: 'acme-eu', runId: 'run-1', threadId: 'th-1' };
    const sealed = sealBatch(null, context, [
      {
        id: 'e1',
        type: 'run.started',
        data: { threadId: 'th-1', agent: 'a', source: 'api' },
        metadata: {},
      },
      {
        id: 'e2',
        type: 'message.added',
        data: { messageId: 'm', role: 'user', text: 'hi' },
        metadata: {},
      },
    ]);
    sealed.forEach((e, revision) =>
      insert.run(
        'run-run-1',
        revision,
        e.id,
        e.type,
        JSON.stringify(e.data),
        JSON.stringify(e.metadata),
        '2026-01-01T00:00:00.000Z',
      ),
    );
    insert.run(
      'receipt-rid-1',
      0,
      'c1',
      'receipt.consumed',
      '{}',
      JSON.stringify({ tenantId: 'acme-eu' }),
      '2026-01-01T00:00:01.000Z',
    );
    insert.run('checkpoint-x', 0, 'o1', 'other', '{}', '{}', '2026-01-01T00:00:02.000Z');
    db.close();
  }

  it('is upgraded on open: streams move into their tenant, positions and the hash chain are kept', async () => {
    const file = join(dir, 'legacy.db');
    writeLegacyLog(file);
    const store = new SqliteEventStore({ file });
    try {
      const run = await store.readStream(runStream('acme-eu', 'run-1'));
      expect(run.map((e) => [e.id, e.revision, e.position])).toEqual([
        ['e1', 0, 1],
        ['e2', 1, 2],
      ]);
      const verifier = new ChainVerifier('run-1');
      for (const e of run) verifier.add(e);
      expect(verifier.verdict()).toMatchObject({ verified: true, count: 2 });
      expect(await store.readStream('run-run-1')).toEqual([]);
      expect(await store.readStream(receiptStream('acme-eu', 'rid-1'))).toHaveLength(1);
      expect(await store.readStream('checkpoint-x')).toHaveLength(1);
      // Appends continue after the kept positions, and the old ids stay taken in their tenant.
      const next = await store.append(runStream('acme-eu', 'run-1'), [
        { id: 'e3', type: 't', data: {}, metadata: {} },
      ]);
      expect(next).toMatchObject({ firstRevision: 2, position: 5 });
      await expect(
        store.append(runStream('acme-eu', 'run-2'), [
          { id: 'e1', type: 't', data: {}, metadata: {} },
        ]),
      ).rejects.toThrow(EventIdConflictError);
    } finally {
      await store.close();
    }
    // A second open finds the new layout and changes nothing.
    const again = new SqliteEventStore({ file });
    try {
      expect(await again.readStream(runStream('acme-eu', 'run-1'))).toHaveLength(3);
    } finally {
      await again.close();
    }
  });
});
