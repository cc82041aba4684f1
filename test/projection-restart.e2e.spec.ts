/**
 * The read models survive a crash mid-projection: the built service is killed (SIGKILL)
 * while it rebuilds its read models from a long log; started again, it resumes from its
 * checkpoint, follows new appends, and ends with exactly the read models a rebuild from an
 * empty store produces.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { runStream, sealBatch } from '@runledger/domain';
import { SQLITE_FILE, SqliteEventStore } from '@runledger/event-store';
import { makeTempDir, request, startService, type RunningService } from './support/service-process';

jest.setTimeout(300_000);

const API_KEY = 'e2e-projection-key-0123456789abcdef';
const API_KEYS = `${API_KEY}=e2e:append,read,admin`;
const TENANT = 'e2e';
const THREADS = 4;
const CALLS_PER_THREAD = 6000;
const BATCH = 1000;
const OUTPUT = 'x'.repeat(512);

const threadIds = Array.from({ length: THREADS }, (_, i) => `restart-thread-${i}`);
const runIds = threadIds.map((threadId) => `${threadId}-run`);

/** Each thread's run: a start, then tool calls (start and finish) with a message now and then. */
function runEvents(
  t: number,
): { id: string; type: string; data: object; metadata: Record<string, unknown> }[] {
  const events: { id: string; type: string; data: object; metadata: Record<string, unknown> }[] =
    [];
  const id = () => `00000000-0000-7000-8${t}00-${String(events.length).padStart(12, '0')}`;
  events.push({
    id: id(),
    type: 'run.started',
    data: { threadId: threadIds[t], agent: 'coder', source: 'api', title: `Thread ${t}` },
    metadata: {},
  });
  for (let c = 0; c < CALLS_PER_THREAD; c += 1) {
    const toolCallId = `call-${c}`;
    events.push({
      id: id(),
      type: 'tool.started',
      data: { toolCallId, toolName: 'grep', input: { q: c } },
      metadata: {},
    });
    events.push({
      id: id(),
      type: 'tool.finished',
      data: { toolCallId, failed: c % 97 === 0, errorText: 'no match', output: OUTPUT },
      metadata: {},
    });
    if (c % 50 === 0) {
      events.push({
        id: id(),
        type: 'message.added',
        data: { messageId: `say-${c}`, role: 'assistant', text: `done ${c}` },
        metadata: {},
      });
    }
  }
  return events;
}

/** Writes the runs straight into the log file the service will open, threads interleaved. */
async function writeLog(dataDir: string): Promise<number> {
  const log = new SqliteEventStore({ file: join(dataDir, SQLITE_FILE), synchronous: 'NORMAL' });
  const all = threadIds.map((_, t) => runEvents(t));
  const prev: ({ revision: number; hash: string } | null)[] = threadIds.map(() => null);
  let head = 0;
  try {
    for (let from = 0; all.some((events) => from < events.length); from += BATCH) {
      for (let t = 0; t < THREADS; t += 1) {
        const slice = all[t].slice(from, from + BATCH);
        if (slice.length === 0) continue;
        const context = { tenantId: TENANT, runId: runIds[t], threadId: threadIds[t] };
        const sealed = sealBatch(prev[t], context, slice);
        const result = await log.append(runStream(TENANT, runIds[t]), sealed);
        prev[t] = { revision: result.lastRevision, hash: sealed.at(-1)!.metadata.hash as string };
        head = result.position;
      }
    }
  } finally {
    await log.close();
  }
  return head;
}

async function projectorPosition(service: RunningService): Promise<number> {
  const res = await request(service.baseUrl, '/metrics');
  const match = /^runledger_projector_position (\d+)/m.exec(await res.text());
  return match ? Number(match[1]) : 0;
}

/** Every thread as a reader sees it once the projection passed `minPosition`. */
async function readThreads(service: RunningService, minPosition: number) {
  const threads: Record<string, unknown> = {};
  for (const threadId of threadIds) {
    const view = await request(
      service.baseUrl,
      `/v1/threads/${threadId}?limit=500&minPosition=${minPosition}`,
      { key: API_KEY },
    );
    expect(view.status).toBe(200);
    const exported = await request(
      service.baseUrl,
      `/v1/threads/${threadId}/export?minPosition=${minPosition}`,
      { key: API_KEY, timeoutMs: 120_000 },
    );
    expect(exported.status).toBe(200);
    const messages = (await exported.text())
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as unknown);
    threads[threadId] = { view: await view.json(), messages };
  }
  return threads;
}

describe('a crash in the middle of a projection', () => {
  it('resumes from the checkpoint, follows new appends, and equals a rebuild', async () => {
    const dataDir = makeTempDir();
    const head = await writeLog(dataDir);
    const env = { READ_WAIT_MS: '60000', LOG_LEVEL: 'warn' };

    const first = await startService({ dataDir, apiKeys: API_KEYS, env });
    let position = 0;
    while (position < head / 4) position = await projectorPosition(first);
    expect(position).toBeLessThan(head);
    await first.kill('SIGKILL');

    const second = await startService({ dataDir, apiKeys: API_KEYS, env });
    const resumedAt = await projectorPosition(second);
    expect(resumedAt).toBeGreaterThanOrEqual(position);
    const more = await request(second.baseUrl, `/v1/runs/${runIds[0]}/events`, {
      key: API_KEY,
      body: {
        events: [
          { type: 'tool.started', data: { toolCallId: 'late', toolName: 'ls', input: {} } },
          {
            type: 'message.added',
            data: { messageId: 'late-say', role: 'user', text: 'still here' },
          },
        ],
      },
    });
    expect(more.status).toBe(201);
    const last = ((await more.json()) as { position: number }).position;
    const resumed = await readThreads(second, last);
    await second.kill('SIGTERM');

    for (const suffix of ['', '-wal', '-shm']) {
      rmSync(join(dataDir, `read-models.db${suffix}`), { force: true });
    }
    const third = await startService({ dataDir, apiKeys: API_KEYS, env });
    const rebuilt = await readThreads(third, last);
    await third.kill('SIGTERM');

    expect(rebuilt).toEqual(resumed);
    const view = (resumed[threadIds[0]] as { view: { messageCount: number; status: string } }).view;
    expect(view.status).toBe('running');
    expect(view.messageCount).toBeGreaterThan(CALLS_PER_THREAD / 20);
  });
});
