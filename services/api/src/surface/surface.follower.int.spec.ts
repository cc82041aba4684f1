/**
 * The client surface's follower over a real log file: it reads every event back on the api's
 * event loop, and of most of them only what the notification fold needs.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runStream, type Notification } from '@runledger/domain';
import { SqliteEventStore } from '@runledger/event-store';
import Database from 'better-sqlite3';
import { SurfaceFollower } from './surface.follower';
import { SurfaceStore } from './surface.store';

const dir = mkdtempSync(join(tmpdir(), 'runledger-surface-follower-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("folds a run without reading its messages' and model calls' data: a damaged one does not stop it", async () => {
  const logFile = join(dir, 'runledger.db');
  const log = new SqliteEventStore({ file: logFile });
  const surface = new SurfaceStore(join(dir, 'client-surface.db'));
  const metadata = { tenantId: 'acme', runId: 'r1', threadId: 't1' };
  const event = (type: string, data: object) => ({
    id: randomUUID(),
    type,
    data,
    metadata,
  });
  const appended = await log.append(runStream('acme', 'r1'), [
    event('run.started', { threadId: 't1', agent: 'coder', source: 'api', title: 'Ship it' }),
    event('model.call', { callId: 'c1', model: 'm', messages: [{ role: 'user', content: 'x' }] }),
    event('message.added', { messageId: 'm1', role: 'assistant', text: 'Deploying.' }),
    event('approval.requested', {
      approvalId: 'ap1',
      toolCallId: 'call-1',
      toolName: 'deploy',
      input: { env: 'prod' },
    }),
  ]);
  const raw = new Database(logFile);
  raw.prepare("UPDATE events SET data = '{broken' WHERE revision IN (1, 2)").run();
  raw.close();

  const notified: Notification[] = [];
  const failures: unknown[] = [];
  const follower = new SurfaceFollower(log, surface, {
    committed: (_position, notifications) => notified.push(...notifications),
    failed: (error) => failures.push(error),
  });
  follower.start();
  try {
    await follower.waitFor(appended.position, 5000);
    expect(failures).toEqual([]);
    expect(notified).toEqual([
      expect.objectContaining({ kind: 'blocked', title: 'Ship it', approvalId: 'ap1' }),
    ]);
  } finally {
    await follower.stop();
    surface.close();
    await log.close();
  }
});
