/**
 * How far a follower is behind, over a real SQLite log, and readiness's verdict on it: the
 * wait of the oldest event not yet handled, so a quiet log never reads as lag.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { CAUGHT_UP, followerLag, lagProblem } from './follower-lag';
import type { RecordedEvent } from './event-store.port';
import { SqliteEventStore } from './sqlite.event-store';

const dir = mkdtempSync(join(tmpdir(), 'runledger-lag-'));
let log: SqliteEventStore;
let file = 0;

beforeEach(() => {
  file += 1;
  log = new SqliteEventStore({ file: join(dir, `log-${file}.db`), synchronous: 'NORMAL' });
});
afterEach(() => log.close());
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function append(stream: string, count: number): Promise<RecordedEvent[]> {
  await log.append(
    stream,
    Array.from({ length: count }, () => ({
      id: randomUUID(),
      type: 'test.happened',
      data: {},
      metadata: {},
    })),
  );
  return log.readStream(stream);
}

const at = (event: RecordedEvent, plusMs: number) => Date.parse(event.recordedAt) + plusMs;

describe('followerLag', () => {
  it('is nothing on an empty log, and nothing for a follower at the head', async () => {
    expect(await followerLag(log, 0, 'run-')).toEqual(CAUGHT_UP);
    const events = await append('run-a', 3);
    expect(await followerLag(log, events[2].position, 'run-', at(events[2], 3_600_000))).toEqual(
      CAUGHT_UP,
    );
  });

  it('is the wait of the oldest event not yet handled, and the positions back to the head', async () => {
    const events = await append('run-a', 5);
    const lag = await followerLag(log, events[1].position, 'run-', at(events[2], 4_000));
    expect(lag).toEqual({ events: events[4].position - events[1].position, seconds: 4 });
  });

  it('after a quiet spell, one new event is a new wait, not the length of the spell', async () => {
    const [first] = await append('run-a', 1);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const [, second] = await append('run-a', 1);
    const lag = await followerLag(log, first.position, 'run-', at(second, 250));
    expect(lag.seconds).toBeCloseTo(0.25, 3);
    expect(at(second, 250) - Date.parse(first.recordedAt)).toBeGreaterThan(1300);
  });

  it('counts only the streams the follower follows', async () => {
    const runs = await append('run-a', 2);
    await append('receipt-x', 2);
    expect(await followerLag(log, runs[1].position, 'run-', Date.now() + 60_000)).toEqual(
      CAUGHT_UP,
    );
  });

  it('without a prefix, counts every stream (a follower of the whole log)', async () => {
    const runs = await append('run-a', 2);
    const receipts = await append('receipt-x', 2);
    expect(await followerLag(log, runs[1].position, undefined, at(receipts[0], 5_000))).toEqual({
      events: receipts[1].position - runs[1].position,
      seconds: 5,
    });
  });
});

describe('a follower held at an unreadable event', () => {
  it('is measured from that event, and is not ready at once, naming it', async () => {
    const events = await append('run-a', 3);
    const raw = new Database(join(dir, `log-${file}.db`));
    raw.prepare("UPDATE events SET data = '{broken' WHERE position = ?").run(events[1].position);
    raw.close();
    const lag = await followerLag(log, events[0].position, 'run-', at(events[1], 7_000));
    expect(lag).toMatchObject({
      events: events[2].position - events[0].position,
      seconds: 7,
      unreadable: { position: events[1].position },
    });
    expect(await lagProblem(() => Promise.resolve(lag), 60_000)).toMatch(
      new RegExp(
        `^held at an unreadable event: event ${events[1].id} .*position ${events[1].position}`,
      ),
    );
  });
});

describe('lagProblem', () => {
  it('is ready up to the bound and says how far behind past it', async () => {
    const lag = { events: 12, seconds: 2 };
    expect(await lagProblem(() => Promise.resolve(lag), 2000)).toBeNull();
    expect(await lagProblem(() => Promise.resolve(lag), 1999)).toBe(
      'behind the log: the oldest event not yet handled has waited 2.0 s (over 1999 ms), 12 positions back',
    );
  });

  it('is not ready, and says why, when the log cannot be read', async () => {
    const failing = () => Promise.reject(new Error('store unreachable'));
    expect(await lagProblem(failing, 1000)).toBe(
      'lag unknown: the log could not be read (Error: store unreachable)',
    );
  });
});
