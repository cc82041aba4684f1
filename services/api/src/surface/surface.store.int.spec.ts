/**
 * The notification view's store on a real file: "what needs me" for one user reads the same
 * items whichever way the store takes to them (from the user's few threads, or walking the
 * tenant's notifications for a user in many).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Notification } from '@runledger/domain';
import Database from 'better-sqlite3';
import { SurfaceStore } from './surface.store';

const dir = mkdtempSync(join(tmpdir(), 'runledger-surface-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function item(threadId: string, position: number): Notification {
  return {
    threadId,
    runId: `run-${threadId}`,
    kind: 'blocked',
    state: 'blocked',
    title: null,
    summary: `approval requested in ${threadId}`,
    position,
    event: 'approval.requested',
    eventId: `e-${position}`,
    recordedAt: new Date(position * 1000).toISOString(),
  };
}

it("answers a user's notifications in position order, in few threads or many, and none for a stranger", () => {
  const store = new SurfaceStore(join(dir, 'client-surface.db'));
  try {
    // 3,000 threads, a notification each; "many" is in every other one, "few" in two.
    const threads = Array.from({ length: 3000 }, (_, i) => `t-${i}`);
    store.commit({
      threads: [],
      notifications: threads.map((threadId, i) => ({ tenantId: 'a', item: item(threadId, i + 1) })),
      users: [
        ...threads
          .filter((_, i) => i % 2 === 0)
          .map((threadId) => ({ tenantId: 'a', user: 'many', threadId })),
        { tenantId: 'a', user: 'few', threadId: 't-2999' },
        { tenantId: 'a', user: 'few', threadId: 't-10' },
        { tenantId: 'b', user: 'few', threadId: 't-11' },
      ],
      bindings: [],
      position: 3000,
    });
    const positions = (user: string, after: number, limit: number) =>
      store.notifications('a', { user, after, limit }).map((n) => n.position);

    expect(positions('few', 0, 10)).toEqual([11, 3000]);
    expect(positions('few', 11, 10)).toEqual([3000]);
    expect(positions('many', 0, 3)).toEqual([1, 3, 5]);
    expect(positions('many', 2995, 10)).toEqual([2997, 2999]);
    expect(positions('nobody', 0, 10)).toEqual([]);
  } finally {
    store.close();
  }
});

it('drops what an earlier version folded, to be refolded from the log, keeping how far Kafka was sent', () => {
  const file = join(dir, 'earlier.db');
  const first = new SurfaceStore(file);
  first.commit({
    threads: [],
    notifications: [{ tenantId: 'a', item: item('t-1', 5) }],
    users: [{ tenantId: 'a', user: 'ana', threadId: 't-1' }],
    bindings: [],
    position: 5,
  });
  first.savePublished('notifications', 5);
  first.close();
  const raw = new Database(file);
  raw.pragma('user_version = 0');
  raw.close();
  const reopened = new SurfaceStore(file);
  try {
    expect(reopened.isEmpty()).toBe(true);
    expect(reopened.notifications('a', { after: 0, limit: 10 })).toEqual([]);
    expect(reopened.published('notifications')).toBe(5);
  } finally {
    reopened.close();
  }
});

it('keeps how far Kafka was sent per topic; a file from before gives its one position to the first topic', () => {
  const file = join(dir, 'published.db');
  new SurfaceStore(file).close();
  const raw = new Database(file);
  raw
    .prepare("INSERT INTO checkpoints (name, position) VALUES ('notifications-published', 9)")
    .run();
  raw.close();
  const store = new SurfaceStore(file);
  try {
    expect(store.published('first')).toBe(9);
    expect(store.published('second')).toBe(0);
    store.savePublished('second', 4);
    expect([store.published('first'), store.published('second')]).toEqual([9, 4]);
  } finally {
    store.close();
  }
});
