/**
 * No stalls: a run of 300,000 events is audited and replayed by the built service while it
 * rebuilds its read models from the same log, and the service's own event-loop delay (its
 * `runledger_event_loop_delay_seconds` metric, the maximum since the previous scrape) stays
 * under 200 ms. Measured inside the service's process, so the test runner's own work (the
 * NDJSON it reads, its garbage collection) is not charged to the service. Readiness follows
 * the rebuild: not ready while the read models (thread views, notifications) are behind the
 * log, ready once caught up; and a thread or list the rebuild has not reached yet is 503, never
 * "not found" or short.
 */
import { join } from 'node:path';
import { runStream, sealBatch } from '@runledger/domain';
import { SQLITE_FILE, SqliteEventStore } from '@runledger/event-store';
import {
  cleanUpServices,
  makeTempDir,
  request,
  startService,
  type RunningService,
} from './support/service-process';

const EVENTS = 300_000;
const BATCH = 2000;
const RUN_ID = 'long-run';
const THREAD_ID = 'long-thread';
/** A second run, in a thread of its own, written after the long one: the rebuild's last. */
const LATE_RUN_ID = 'late-run';
const LATE_THREAD_ID = 'late-thread';
const KEY = 'key-long-run-0123456789';
const MAX_DELAY_SECONDS = 0.2;

afterAll(cleanUpServices);

/** Writes the run straight into the log file the app then opens: a valid hash chain. */
async function writeRun(dataDir: string): Promise<void> {
  const log = new SqliteEventStore({ file: join(dataDir, SQLITE_FILE), synchronous: 'NORMAL' });
  const context = { tenantId: 'tenant-a', runId: RUN_ID, threadId: THREAD_ID };
  let prev: { revision: number; hash: string } | null = null;
  try {
    for (let from = 0; from < EVENTS; from += BATCH) {
      const events = Array.from({ length: Math.min(BATCH, EVENTS - from) }, (_, i) => {
        const n = from + i;
        return n === 0
          ? {
              id: `00000000-0000-7000-8000-${String(n).padStart(12, '0')}`,
              type: 'run.started',
              data: { threadId: THREAD_ID, agent: 'coder', source: 'api' },
              metadata: {},
            }
          : {
              id: `00000000-0000-7000-8000-${String(n).padStart(12, '0')}`,
              type: 'message.added',
              data: {
                messageId: `m${n % 5000}`,
                role: n % 2 === 0 ? 'user' : 'assistant',
                text: `line ${n}`,
              },
              metadata: {},
            };
      });
      const sealed = sealBatch(prev, context, events);
      const result = await log.append(runStream(context.tenantId, RUN_ID), sealed);
      const last = sealed[sealed.length - 1];
      prev = { revision: result.lastRevision, hash: last.metadata.hash as string };
    }
    const late = { tenantId: 'tenant-a', runId: LATE_RUN_ID, threadId: LATE_THREAD_ID };
    await log.append(
      runStream(late.tenantId, LATE_RUN_ID),
      sealBatch(null, late, [
        {
          id: '00000000-0000-7000-9000-000000000000',
          type: 'run.started',
          data: { threadId: LATE_THREAD_ID, agent: 'coder', source: 'api' },
          metadata: {},
        },
      ]),
    );
  } finally {
    await log.close();
  }
}

/** The service's longest event-loop delay since the previous scrape, in seconds. */
async function loopDelaySinceLastScrape(service: RunningService): Promise<number> {
  const res = await request(service.baseUrl, '/metrics');
  const text = await res.text();
  const match = /^runledger_event_loop_delay_seconds\{stat="max"\} (\S+)$/m.exec(text);
  if (!match) throw new Error(`no event-loop delay metric in /metrics:\n${text.slice(0, 500)}`);
  return Number(match[1]);
}

it('audits and replays a run of 300,000 events while the read models rebuild, the loop never held 200 ms', async () => {
  const dataDir = makeTempDir('runledger-long-run-');
  await writeRun(dataDir);
  const service = await startService({
    dataDir,
    apiKeys: `${KEY}=tenant-a:append,read`,
    readyTimeoutMs: 120_000,
  });
  // Not ready while it rebuilds, with the default READY_MAX_LAG_MS, however young the log.
  const rebuilding = await request(service.baseUrl, '/health/ready');
  expect(rebuilding.status).toBe(503);
  expect(await rebuilding.json()).toMatchObject({
    status: 'not_ready',
    checks: {
      store: 'ok',
      projector: expect.stringMatching(/^projector rebuilding the read models/),
      // Notifications and bindings are refolded from the log too: a prefix of the truth.
      clientSurface: expect.stringMatching(
        /^client surface rebuilding the notifications and bindings from the log/,
      ),
    },
  });
  // Every thread and list read is 503 until the views are whole: a list short of threads or
  // notifications, or a thread short of its newest messages, would read as the truth.
  for (const path of [
    `/v1/threads/${LATE_THREAD_ID}`,
    `/v1/threads/${THREAD_ID}`,
    '/v1/threads',
    '/v1/notifications',
    '/v1/bindings',
  ]) {
    const notYet = await request(service.baseUrl, path, { key: KEY });
    expect({ path, status: notYet.status }).toEqual({ path, status: 503 });
    expect(await notYet.json()).toMatchObject({
      error: 'projection_behind',
      rebuildTarget: expect.any(Number),
    });
  }
  // Start-up (Nest's module graph, the OpenAPI document) is not a request being held.
  await loopDelaySinceLastScrape(service);

  const audit = await request(service.baseUrl, `/v1/runs/${RUN_ID}/audit`, {
    key: KEY,
    timeoutMs: 300_000,
  });
  expect(audit.status).toBe(200);
  expect(await audit.json()).toMatchObject({ runId: RUN_ID, count: EVENTS, verified: true });

  const replay = await request(service.baseUrl, `/v1/runs/${RUN_ID}/replay`, {
    key: KEY,
    timeoutMs: 300_000,
  });
  expect(replay.status).toBe(200);
  let lines = 0;
  for await (const chunk of replay.body as AsyncIterable<Uint8Array>) {
    for (const byte of chunk) if (byte === 0x0a) lines += 1;
  }
  expect(lines).toBe(EVENTS);

  expect(await loopDelaySinceLastScrape(service)).toBeLessThan(MAX_DELAY_SECONDS);

  const deadline = Date.now() + 120_000;
  let ready = await request(service.baseUrl, '/health/ready');
  while (ready.status !== 200 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    ready = await request(service.baseUrl, '/health/ready');
  }
  expect(await ready.json()).toMatchObject({
    status: 'ready',
    checks: { projector: 'ok', clientSurface: 'ok' },
  });
  const late = await request(service.baseUrl, `/v1/threads/${LATE_THREAD_ID}`, { key: KEY });
  expect(late.status).toBe(200);
  const unknown = await request(service.baseUrl, '/v1/threads/no-such-thread', { key: KEY });
  expect(unknown.status).toBe(404);
}, 600_000);
