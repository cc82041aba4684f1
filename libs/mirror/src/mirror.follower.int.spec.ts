/**
 * The follower's rules on a real SQLite log and mirror.db, with a scripted sink standing in
 * for the broker (the real broker: services/api/src/mirror/mirror.kafka.spec.ts): failures
 * are retried and never skipped, the checkpoint moves only on acknowledgement, unencodable
 * events are parked while the rest flows, and a stalled subscription is noticed.
 */
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runStream } from '@runledger/domain';
import {
  SqliteEventStore,
  type EventStoreReader,
  type SubscribeOptions,
  type Subscription,
} from '@runledger/event-store';
import { RejectedMessageError, type EventSink } from './event-sink.port';
import {
  MirrorFollower,
  StillParkedError,
  type MirrorObserver,
  type PublishFailure,
} from './mirror.follower';
import { MirrorStore, type ParkRequest } from './mirror.store';
import type { MirrorMessage } from './run-event.codec';

class ScriptedSink implements EventSink {
  readonly acknowledged: MirrorMessage[] = [];
  /** Errors to throw on the next publishes, in order. */
  readonly failures: unknown[] = [];
  calls = 0;

  async publish(messages: readonly MirrorMessage[]): Promise<void> {
    this.calls += 1;
    const failure = this.failures.shift();
    if (failure !== undefined) throw failure;
    this.acknowledged.push(...messages);
  }

  async close(): Promise<void> {}
}

class RecordingObserver implements MirrorObserver {
  readonly failures: PublishFailure[] = [];
  readonly parkedEvents: ParkRequest[] = [];
  readonly resubscriptions: string[] = [];
  recoveries = 0;
  published(): void {}
  publishFailed(failure: PublishFailure): void {
    this.failures.push(failure);
  }
  recovered(): void {
    this.recoveries += 1;
  }
  parked(event: ParkRequest): void {
    this.parkedEvents.push(event);
  }
  resubscribed(reason: string): void {
    this.resubscriptions.push(reason);
  }
}

let dir: string;
let log: SqliteEventStore;
let store: MirrorStore;
const followers: MirrorFollower[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'runledger-mirror-'));
  log = new SqliteEventStore({ file: join(dir, 'runledger.db'), synchronous: 'NORMAL' });
  store = new MirrorStore(join(dir, 'mirror.db'));
});
afterEach(async () => {
  for (const follower of followers.splice(0)) await follower.stop();
  await log.close();
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

function follow(
  sink: EventSink,
  observer: MirrorObserver,
  reader: EventStoreReader = log,
  options: Partial<ConstructorParameters<typeof MirrorFollower>[4]> = {},
): MirrorFollower {
  const follower = new MirrorFollower(reader, store, sink, observer, {
    format: 'protobuf',
    stallMs: 50,
    retryInitialMs: 5,
    retryMaxMs: 20,
    watchdogMs: 60_000,
    ...options,
  });
  followers.push(follower);
  follower.start();
  return follower;
}

async function appendRun(runId: string, count: number, tenantId: string | null = 'tenant-a') {
  const metadata = tenantId ? { tenantId, runId, threadId: 't' } : { runId };
  await log.append(
    // An unstamped event still lands in a run stream: the mirror must park it, not skip it.
    runStream(tenantId ?? 'unstamped', runId),
    Array.from({ length: count }, (_, i) => ({
      id: `${runId}-${i}`,
      type: 'message.added',
      data: { messageId: `m${i}`, role: 'user', text: `${i}` },
      metadata,
    })),
  );
}

async function until(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('MirrorFollower', () => {
  it('retries a failing sink with capped backoff, never skipping, and moves the checkpoint only on acknowledgement', async () => {
    const sink = new ScriptedSink();
    const observer = new RecordingObserver();
    sink.failures.push(...Array.from({ length: 8 }, () => new Error('broker unreachable')));
    await appendRun('r1', 20);
    const follower = follow(sink, observer);

    await until(() => observer.failures.length >= 3);
    expect(store.checkpoint()).toBe(0);
    expect(follower.current()).toBe(0);
    await until(() => follower.problem() !== null);
    expect(follower.problem()).toMatch(/stuck on event r1-0 at position 1.*broker unreachable/);

    await until(() => sink.acknowledged.length === 20);
    expect(sink.acknowledged.map((m) => m.eventId)).toEqual(
      Array.from({ length: 20 }, (_, i) => `r1-${i}`),
    );
    expect(observer.failures).toHaveLength(8);
    expect(observer.failures.map((f) => f.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(Math.max(...observer.failures.map((f) => f.retryInMs))).toBe(20);
    expect(observer.failures.every((f) => f.eventId === 'r1-0' && f.position === 1)).toBe(true);
    expect(observer.recoveries).toBe(1);
    expect(follower.problem()).toBeNull();
    expect(store.checkpoint()).toBe(20);
  });

  it('resumes from the stored checkpoint', async () => {
    await appendRun('r1', 10);
    const first = follow(new ScriptedSink(), new RecordingObserver());
    await until(() => store.checkpoint() === 10);
    await first.stop();
    await appendRun('r2', 5);
    const sink = new ScriptedSink();
    follow(sink, new RecordingObserver());
    await until(() => sink.acknowledged.length === 5);
    expect(sink.acknowledged.map((m) => m.eventId)).toEqual([0, 1, 2, 3, 4].map((i) => `r2-${i}`));
  });

  it('survives a checkpoint commit that fails: the batch is published again, nothing is lost', async () => {
    const failing = new MirrorStore(join(dir, 'failing-mirror.db'));
    let refusals = 2;
    const commit = failing.commit.bind(failing);
    failing.commit = (parked, position, at) => {
      if (refusals > 0) {
        refusals -= 1;
        throw new Error('SQLITE_FULL: database or disk is full');
      }
      commit(parked, position, at);
    };
    const sink = new ScriptedSink();
    const observer = new RecordingObserver();
    await appendRun('r1', 4);
    const follower = new MirrorFollower(log, failing, sink, observer, {
      format: 'protobuf',
      stallMs: 50,
      retryInitialMs: 5,
      retryMaxMs: 20,
    });
    followers.push(follower);
    follower.start();
    await until(() => failing.checkpoint() === 4);
    expect(observer.failures.map((f) => String(f.error))).toEqual([
      expect.stringContaining('SQLITE_FULL'),
      expect.stringContaining('SQLITE_FULL'),
    ]);
    expect(new Set(sink.acknowledged.map((m) => m.eventId))).toEqual(
      new Set(['r1-0', 'r1-1', 'r1-2', 'r1-3']),
    );
    expect(follower.problem()).toBeNull();
    await follower.stop();
    failing.close();
  });

  it('parks an event it cannot encode, in the same commit as the checkpoint, and the events after it flow', async () => {
    const sink = new ScriptedSink();
    const observer = new RecordingObserver();
    await appendRun('r1', 3);
    await appendRun('bad', 1, null);
    await appendRun('r2', 3);
    const follower = follow(sink, observer);
    await until(() => sink.acknowledged.length === 6 && store.checkpoint() === 7);
    // Its tenant is the one its stream is named for: no other tenant's admin sees it.
    expect(observer.parkedEvents).toEqual([
      expect.objectContaining({ eventId: 'bad-0', position: 4, tenantId: 'unstamped' }),
    ]);
    expect(store.listParked('tenant-a')).toEqual([]);
    expect(store.listParked(null)).toEqual([
      expect.objectContaining({
        eventId: 'bad-0',
        reason: 'unencodable: metadata.tenantId is missing',
        redrivenAt: null,
      }),
    ]);
    // Still unencodable: a retry says so and keeps it parked, counting the attempt.
    await expect(follower.retryParked('bad-0', null)).rejects.toBeInstanceOf(StillParkedError);
    expect(store.parked('bad-0', null)?.attempts).toBe(2);
  });

  it('parks an event the log cannot read (a damaged row), the events after it flow, and re-drives it once mended', async () => {
    const sink = new ScriptedSink();
    const observer = new RecordingObserver();
    await appendRun('r1', 5);
    const raw = new Database(join(dir, 'runledger.db'));
    const original = raw.prepare('SELECT data FROM events WHERE position = 3').get() as {
      data: string;
    };
    raw.prepare("UPDATE events SET data = '{broken' WHERE position = 3").run();
    const follower = follow(sink, observer);
    await until(() => store.checkpoint() === 5);
    expect(sink.acknowledged.map((m) => m.eventId)).toEqual(['r1-0', 'r1-1', 'r1-3', 'r1-4']);
    expect(store.listParked('tenant-a')).toEqual([
      expect.objectContaining({
        eventId: 'r1-2',
        position: 3,
        reason: expect.stringMatching(/^unreadable: .*does not parse/),
      }),
    ]);
    expect(observer.parkedEvents.map((p) => p.eventId)).toEqual(['r1-2']);
    await expect(follower.retryParked('r1-2', 'tenant-a')).rejects.toBeInstanceOf(StillParkedError);
    raw.prepare('UPDATE events SET data = ? WHERE position = 3').run(original.data);
    raw.close();
    expect((await follower.retryParked('r1-2', 'tenant-a')).published).toBe(true);
    expect(sink.acknowledged.map((m) => m.eventId).pop()).toBe('r1-2');
  });

  it('parks only the message the broker refuses out of a refused batch, and re-drives it', async () => {
    const sink = new ScriptedSink();
    const observer = new RecordingObserver();
    await appendRun('r1', 5);
    // A broker that refuses any batch holding r1-2 (a record over its limit) until redrive.
    let redrive = false;
    const refuseR12: EventSink = {
      publish: async (messages) => {
        if (!redrive && messages.some((m) => m.eventId === 'r1-2')) {
          throw new RejectedMessageError('MESSAGE_TOO_LARGE', ['r1-2']);
        }
        return sink.publish(messages);
      },
      close: async () => {},
    };
    const follower = follow(refuseR12, observer);
    await until(() => store.checkpoint() === 5);
    expect(sink.acknowledged.map((m) => m.eventId)).toEqual(['r1-0', 'r1-1', 'r1-3', 'r1-4']);
    expect(store.listParked('tenant-a').map((p) => p.eventId)).toEqual(['r1-2']);
    expect(store.listParked('tenant-b')).toEqual([]);

    redrive = true;
    const { event: result, published } = await follower.retryParked('r1-2', 'tenant-a');
    expect(published).toBe(true);
    expect(result.redrivenAt).not.toBeNull();
    expect(sink.acknowledged.map((m) => m.eventId).pop()).toBe('r1-2');
    expect(store.listParked(null)).toEqual([]);
    // Re-driven already: answered as it is, published no second time.
    const again = await follower.retryParked('r1-2', 'tenant-a');
    expect(again).toEqual({ event: result, published: false });
    expect(sink.acknowledged.filter((m) => m.eventId === 'r1-2')).toHaveLength(1);
  });

  it("parks two tenants' events that share an id each in its own row, and re-drives each tenant's own", async () => {
    const sink = new ScriptedSink();
    const observer = new RecordingObserver();
    // Event ids are unique per tenant only: both runs hold an event r1-2.
    await appendRun('r1', 3, 'tenant-a');
    await appendRun('r1', 3, 'tenant-b');
    let redrive = false;
    const refuseR12: EventSink = {
      publish: async (messages) => {
        if (!redrive && messages.some((m) => m.eventId === 'r1-2')) {
          throw new RejectedMessageError('MESSAGE_TOO_LARGE', ['r1-2']);
        }
        return sink.publish(messages);
      },
      close: async () => {},
    };
    const follower = follow(refuseR12, observer);
    await until(() => store.checkpoint() === 6);
    expect(store.listParked(null).map((p) => [p.eventId, p.tenantId, p.position])).toEqual([
      ['r1-2', 'tenant-a', 3],
      ['r1-2', 'tenant-b', 6],
    ]);
    redrive = true;
    const { event: result } = await follower.retryParked('r1-2', 'tenant-b');
    expect(result).toMatchObject({ tenantId: 'tenant-b', position: 6 });
    expect(result.redrivenAt).not.toBeNull();
    expect(store.listParked(null).map((p) => [p.tenantId, p.position])).toEqual([['tenant-a', 3]]);
  });

  it('notices a subscription that went quiet while run events wait, and resubscribes from the checkpoint', async () => {
    // A subscription that delivers its first 3 events, then nothing (the stall reported of
    // event-store subscriptions); the second subscription works.
    let subscriptions = 0;
    const stalling: EventStoreReader = {
      readStream: (...args) => log.readStream(...args),
      readByIds: (...args) => log.readByIds(...args),
      readAll: (...args) => log.readAll(...args),
      headPosition: () => log.headPosition(),
      subscribeToAll: (options?: SubscribeOptions): Subscription => {
        subscriptions += 1;
        const inner = log.subscribeToAll(options);
        if (subscriptions > 1) return inner;
        let release: () => void = () => {};
        return {
          async *[Symbol.asyncIterator]() {
            let given = 0;
            for await (const page of inner) {
              for (const event of page) {
                if (given === 3) {
                  await new Promise<void>((resolve) => (release = resolve));
                  return;
                }
                given += 1;
                yield [event];
              }
            }
          },
          close: async () => {
            release();
            await inner.close();
          },
        };
      },
    };
    const sink = new ScriptedSink();
    const observer = new RecordingObserver();
    await appendRun('r1', 3);
    const follower = follow(sink, observer, stalling);
    await until(() => store.checkpoint() === 3);
    await appendRun('r1b', 4);
    await new Promise((r) => setTimeout(r, 50));
    expect(sink.acknowledged).toHaveLength(3);
    // First look: an undelivered run event is noted; second look, still there: resubscribe.
    expect(await follower.checkWatchdog()).toBe(false);
    expect(await follower.checkWatchdog()).toBe(true);
    expect(observer.resubscriptions).toEqual([expect.stringContaining('position 4')]);
    await until(() => sink.acknowledged.length === 7);
    expect(sink.acknowledged.map((m) => m.eventId).slice(3)).toEqual(
      [0, 1, 2, 3].map((i) => `r1b-${i}`),
    );
    // A healthy, caught-up subscription is left alone.
    expect(await follower.checkWatchdog()).toBe(false);
    expect(await follower.checkWatchdog()).toBe(false);
  });

  it('reports a broker that never answers (frozen, not down) as a problem, and stops without waiting for it', async () => {
    let acknowledge: () => void = () => {};
    const frozen: EventSink = {
      publish: () => new Promise<void>((resolve) => (acknowledge = resolve)),
      close: async () => {},
    };
    await appendRun('r1', 2);
    const follower = follow(frozen, new RecordingObserver());
    await new Promise((r) => setTimeout(r, 20));
    expect(follower.problem()).toBeNull();
    await until(() => follower.problem() !== null);
    expect(follower.problem()).toMatch(
      /no acknowledgement from the destination for \d+ s \(waiting on event r1-0 at position 1\)/,
    );
    expect(store.checkpoint()).toBe(0);

    const started = Date.now();
    await follower.stop();
    expect(Date.now() - started).toBeLessThan(1000);
    // Acknowledged after the follower gave up on it: the checkpoint stays, the events are
    // published again by the next follower (at least once).
    acknowledge();
    await new Promise((r) => setTimeout(r, 20));
    expect(store.checkpoint()).toBe(0);
  });
});

const parkedAt = (position: number): ParkRequest => ({
  eventId: `e-${position}`,
  position,
  stream: runStream('tenant-a', 'r1'),
  type: 'message.added',
  tenantId: 'tenant-a',
  reason: 'refused by the broker: MESSAGE_TOO_LARGE',
});

describe('the checkpoint of each topic', () => {
  it("is its own: a topic new to this mirror.db starts from the log's start, the others keep theirs", () => {
    const file = join(dir, 'topics.db');
    const first = new MirrorStore(file, { topic: 'runs' });
    first.commit([], 40);
    first.close();
    const other = new MirrorStore(file, { topic: 'runs.json' });
    expect(other.checkpoint()).toBe(0);
    other.commit([], 7);
    other.close();
    const again = new MirrorStore(file, { topic: 'runs' });
    expect(again.checkpoint()).toBe(40);
    again.close();
  });

  it('taken over from a mirror.db kept before, parked rows and all, by the first topic that opens it', () => {
    const file = join(dir, 'one-checkpoint.db');
    const legacy = new MirrorStore(file);
    legacy.commit([parkedAt(20)], 25);
    legacy.close();
    const adopted = new MirrorStore(file, { topic: 'runs' });
    expect(adopted.checkpoint()).toBe(25);
    expect(adopted.listParked(null).map((p) => p.position)).toEqual([20]);
    adopted.close();
    const later = new MirrorStore(file, { topic: 'another' });
    expect(later.checkpoint()).toBe(0);
    expect(later.listParked(null)).toEqual([]);
    later.close();
  });

  it('keeps parked rows per topic: one topic parking an event does not park it for another', () => {
    const file = join(dir, 'parked-topics.db');
    const small = new MirrorStore(file, { topic: 'small-records' });
    small.commit([parkedAt(4)], 9);
    small.markRedriven(4);
    small.close();
    const large = new MirrorStore(file, { topic: 'large-records' });
    expect(large.listParked(null)).toEqual([]);
    expect(large.parkedCount()).toBe(0);
    large.commit([parkedAt(4)], 9);
    large.close();
    const back = new MirrorStore(file, { topic: 'small-records' });
    expect(back.parkedAt(4)?.redrivenAt).not.toBeNull();
    expect(back.parkedCount()).toBe(0);
    back.close();
  });
});

describe('a mirror.db whose parked rows were kept without a tenant', () => {
  it('gives each the tenant its stream is named for on open: no other tenant lists it', () => {
    const file = join(dir, 'untenanted.db');
    const first = new MirrorStore(file);
    first.commit(
      [
        {
          eventId: 'e-1',
          position: 1,
          stream: runStream('tenant-a', 'r1'),
          type: 'message.added',
          tenantId: null,
          reason: 'unencodable',
        },
        {
          eventId: 'e-2',
          position: 2,
          stream: 'not-a-run-stream',
          type: 'message.added',
          tenantId: null,
          reason: 'unencodable',
        },
      ],
      2,
    );
    first.close();
    const reopened = new MirrorStore(file);
    try {
      expect(reopened.listParked('tenant-b').map((p) => p.eventId)).toEqual(['e-2']);
      expect(reopened.listParked('tenant-a').map((p) => [p.eventId, p.tenantId])).toEqual([
        ['e-1', 'tenant-a'],
        ['e-2', null],
      ]);
    } finally {
      reopened.close();
    }
  });
});

describe('a mirror.db written when parked rows were keyed by event id', () => {
  it('is re-keyed by position on open, keeping every row and the checkpoint', () => {
    const file = join(dir, 'legacy-mirror.db');
    const legacy = new Database(file);
    legacy.exec(`
      CREATE TABLE parked (
        event_id        TEXT    PRIMARY KEY,
        position        INTEGER NOT NULL,
        stream          TEXT    NOT NULL,
        type            TEXT    NOT NULL,
        tenant_id       TEXT,
        reason          TEXT    NOT NULL,
        parked_at       TEXT    NOT NULL,
        attempts        INTEGER NOT NULL,
        last_attempt_at TEXT    NOT NULL,
        redriven_at     TEXT
      );
      CREATE INDEX parked_by_position ON parked (redriven_at, position);
      INSERT INTO parked VALUES ('e-7', 7, 'run-r1', 'message.added', 'tenant-a', 'too large', 't', 1, 't', NULL);
    `);
    legacy.close();
    const upgraded = new MirrorStore(file);
    try {
      expect(upgraded.parked('e-7', 'tenant-a')).toMatchObject({ position: 7, attempts: 1 });
      upgraded.commit(
        [
          {
            eventId: 'e-7',
            position: 9,
            stream: 'run-tenant%2Db-r1',
            type: 'message.added',
            tenantId: 'tenant-b',
            reason: 'too large',
          },
        ],
        9,
      );
      expect(upgraded.listParked(null).map((p) => [p.tenantId, p.position])).toEqual([
        ['tenant-a', 7],
        ['tenant-b', 9],
      ]);
      expect(upgraded.parked('e-7', 'tenant-b')?.position).toBe(9);
    } finally {
      upgraded.close();
    }
  });
});
