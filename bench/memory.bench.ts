/**
 * Bounded memory: the built api (`node dist/services/api/src/main.js`, as `npm start` runs it) holding 100 threads of 10,000 tool calls each (2,000,100
 * events), its read models rebuilt from the log at start-up, then every thread read page by
 * page back to its first message. The server's RSS and heap are sampled throughout. Target:
 * RSS under a stated bound (MEMORY_BOUND_MIB) whatever the number and length of threads,
 * since no thread is held in memory: the read models are SQLite rows behind page caches of
 * bounded size.
 *
 * The log is written straight into the store's file with better-sqlite3, as the
 * projections bench's fixture does: 100 runs, one per thread, their calls interleaved as
 * concurrent agents' appends are; each call a tool.started and a tool.finished with an
 * output of `BENCH_MEMORY_OUTPUT_BYTES` (default 1,024). `BENCH_MEMORY_CALLS` sets the calls
 * per thread for a short run.
 */
import Database from 'better-sqlite3';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { eventIdScope, runStream } from '@runledger/domain';
import { SqliteEventStore } from '@runledger/event-store';
import { assertBuilt, startService, type RunningService } from '../test/support/service-process';
import { count } from './lib/format';
import { codeRevision, describeMachine } from './lib/machine';
import type { Bench, Section } from './lib/section';

const THREADS = 100;
const CALLS = Number(process.env.BENCH_MEMORY_CALLS ?? 10_000);
const OUTPUT_BYTES = Number(process.env.BENCH_MEMORY_OUTPUT_BYTES ?? 1024);
const MEMORY_BOUND_MIB = 512;
const TENANT = 'bench';
const API_KEY = 'benchkey-0123456789abcdef';
const HEADERS = { authorization: `Bearer ${API_KEY}` };
const PAGE = 500;
const SAMPLE_MS = 1000;
const REBUILD_TIMEOUT_MS = 60 * 60_000;
const BASE_TIME_MS = Date.UTC(2026, 0, 5, 8, 0, 0);

const mib = (bytes: number) => bytes / 2 ** 20;

interface Log {
  file: string;
  events: number;
  bytes: number;
  seconds: number;
}

function threadId(t: number): string {
  return `memory-thread-${t}`;
}

/** 100 runs, one a thread, their calls interleaved; committed in large transactions. */
export async function writeLog(dataDir: string): Promise<Log> {
  const began = performance.now();
  const file = join(dataDir, 'runledger.db');
  await new SqliteEventStore({ file, synchronous: 'NORMAL' }).close();
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = OFF');
  const insert = db.prepare<[string, number, string, string, string, string, string, string]>(
    'INSERT INTO events (stream, revision, id_scope, id, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
  );
  const output = 'o'.repeat(OUTPUT_BYTES);
  const hash = 'a'.repeat(64);
  let position = 0;
  const put = (t: number, revision: number, type: string, data: object) => {
    position += 1;
    const runId = `memory-run-${t}`;
    const stream = runStream(TENANT, runId);
    const metadata = { tenantId: TENANT, runId, threadId: threadId(t), prevHash: hash, hash };
    const id = `00000000-0000-7000-8000-${position.toString(16).padStart(12, '0')}`;
    const time = new Date(BASE_TIME_MS + position * 10).toISOString();
    insert.run(
      stream,
      revision,
      eventIdScope(stream),
      id,
      type,
      JSON.stringify(data),
      JSON.stringify(metadata),
      time,
    );
  };
  db.transaction(() => {
    for (let t = 0; t < THREADS; t += 1) {
      put(t, 0, 'run.started', { threadId: threadId(t), agent: 'coder', source: 'api' });
    }
  })();
  const callsPerTransaction = 250;
  for (let from = 0; from < CALLS; from += callsPerTransaction) {
    db.transaction(() => {
      for (let call = from; call < Math.min(CALLS, from + callsPerTransaction); call += 1) {
        for (let t = 0; t < THREADS; t += 1) {
          const toolCallId = `call-${call}`;
          put(t, 1 + 2 * call, 'tool.started', {
            toolCallId,
            toolName: 'read_file',
            input: { path: `src/file-${call}.ts` },
          });
          put(t, 2 + 2 * call, 'tool.finished', { toolCallId, failed: false, output });
        }
      }
    })();
  }
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  return {
    file,
    events: position,
    bytes: statSync(file).size,
    seconds: (performance.now() - began) / 1000,
  };
}

interface Sample {
  rssMiB: number;
  heapMiB: number;
}

/** The process's resident set (every thread) from /proc, and its main heap from /metrics. */
async function measure(service: RunningService): Promise<Sample> {
  const status = readFileSync(`/proc/${service.process.pid}/status`, 'utf8');
  const rssKiB = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN);
  const metrics = await fetch(`${service.baseUrl}/metrics`).then((r) => r.text());
  const heap = Number(/^runledger_nodejs_heap_size_used_bytes (\S+)/m.exec(metrics)?.[1] ?? NaN);
  return { rssMiB: rssKiB / 1024, heapMiB: mib(heap) };
}

/** Samples the server's memory every second until `work` is done; answers the peak. */
async function sampled(service: RunningService, work: () => Promise<void>): Promise<Sample> {
  const peak: Sample = { rssMiB: 0, heapMiB: 0 };
  let done = false;
  const sampler = (async () => {
    while (!done) {
      const now = await measure(service);
      peak.rssMiB = Math.max(peak.rssMiB, now.rssMiB);
      peak.heapMiB = Math.max(peak.heapMiB, now.heapMiB);
      await new Promise((resolve) => setTimeout(resolve, SAMPLE_MS));
    }
  })();
  try {
    await work();
  } finally {
    done = true;
    await sampler;
  }
  return peak;
}

async function projectorPosition(baseUrl: string): Promise<number> {
  const text = await fetch(`${baseUrl}/metrics`).then((r) => r.text());
  const match = /^runledger_projector_position (\d+)/m.exec(text);
  return match ? Number(match[1]) : 0;
}

async function waitForRebuild(baseUrl: string, head: number): Promise<void> {
  const deadline = Date.now() + REBUILD_TIMEOUT_MS;
  let last = 0;
  while ((await projectorPosition(baseUrl)) < head) {
    if (Date.now() > deadline) throw new Error(`rebuild not done in ${REBUILD_TIMEOUT_MS} ms`);
    const now = Date.now();
    if (now - last > 10_000) {
      last = now;
      console.log(
        `rebuilding: position ${count(await projectorPosition(baseUrl))} of ${count(head)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/**
 * Reads every thread page by page back to its first message; answers the messages read,
 * after checking they are as many as the threads say they hold.
 */
async function readAll(baseUrl: string): Promise<number> {
  let messages = 0;
  let held = 0;
  for (let t = 0; t < THREADS; t += 1) {
    let cursor: string | null = null;
    do {
      const query: string = `?limit=${PAGE}${cursor ? `&before=${encodeURIComponent(cursor)}` : ''}`;
      const response = await fetch(`${baseUrl}/v1/threads/${threadId(t)}${query}`, {
        headers: HEADERS,
      });
      if (response.status !== 200) throw new Error(`thread page answered ${response.status}`);
      const page = (await response.json()) as {
        messageCount: number;
        messages: unknown[];
        page: { before: string | null; hasMore: boolean };
      };
      if (cursor === null) held += page.messageCount;
      messages += page.messages.length;
      cursor = page.page.hasMore ? page.page.before : null;
    } while (cursor !== null);
  }
  if (messages !== held) throw new Error(`read ${messages} messages, the threads hold ${held}`);
  return messages;
}

async function run(): Promise<Section> {
  assertBuilt();
  const dir = mkdtempSync(join(tmpdir(), 'runledger-bench-memory-'));
  let service: RunningService | null = null;
  try {
    const dataDir = join(dir, 'data');
    mkdirSync(dataDir);
    console.log(`writing ${count(THREADS)} threads of ${count(CALLS)} tool calls…`);
    const log = await writeLog(dataDir);
    console.log(
      `${count(log.events)} events, ${mib(log.bytes).toFixed(0)} MiB in ${log.seconds.toFixed(1)} s`,
    );
    service = await startService({
      dataDir,
      apiKeys: `${API_KEY}=${TENANT}:read,admin`,
      env: { LOG_LEVEL: 'error' },
      readyTimeoutMs: 120_000,
    });
    const { baseUrl } = service;
    const idle = await measure(service);
    const rebuildStarted = performance.now();
    const rebuild = await sampled(service, () => waitForRebuild(baseUrl, log.events));
    const rebuildSeconds = (performance.now() - rebuildStarted) / 1000;
    let messages = 0;
    const readStarted = performance.now();
    const reads = await sampled(service, async () => {
      messages = await readAll(baseUrl);
    });
    const readSeconds = (performance.now() - readStarted) / 1000;
    const after = await measure(service);
    await service.kill('SIGTERM');
    service = null;
    const readModelsBytes = statSync(join(dataDir, 'read-models.db')).size;
    const peak = Math.max(rebuild.rssMiB, reads.rssMiB, after.rssMiB);
    return {
      name: 'memory',
      title: `Memory: ${count(THREADS)} threads of ${count(CALLS)} tool calls`,
      measuredAt: new Date().toISOString(),
      machine: describeMachine(),
      revision: codeRevision(),
      method: [
        `A log of ${count(log.events)} events (${mib(log.bytes).toFixed(0)} MiB) written straight into a SQLite file: ${count(THREADS)} runs, one a thread, each a run.started and ${count(CALLS)} tool calls (tool.started, then tool.finished with a ${count(OUTPUT_BYTES)}-byte output), the runs' calls interleaved. The built api (\`node dist/services/api/src/main.js\` with its defaults: projector and log writer in worker threads) starts on it with empty read models and rebuilds them; then the bench reads every thread page by page (${PAGE} messages a page, \`?before=\` cursors) back to its first message. The server's RSS (VmRSS from /proc: every thread of the process) and its main thread's heap (its /metrics) are sampled every ${SAMPLE_MS / 1000} s; the peak is reported.`,
      ],
      table: {
        columns: ['phase', 'peak RSS', 'peak heap used (main thread)', 'time'],
        rows: [
          [
            'idle, listening',
            `${idle.rssMiB.toFixed(0)} MiB`,
            `${idle.heapMiB.toFixed(0)} MiB`,
            '',
          ],
          [
            'rebuilding the read models',
            `${rebuild.rssMiB.toFixed(0)} MiB`,
            `${rebuild.heapMiB.toFixed(0)} MiB`,
            `${rebuildSeconds.toFixed(0)} s (${count(Math.round(log.events / rebuildSeconds))} events/s)`,
          ],
          [
            `reading all ${count(messages)} messages, page by page`,
            `${reads.rssMiB.toFixed(0)} MiB`,
            `${reads.heapMiB.toFixed(0)} MiB`,
            `${readSeconds.toFixed(0)} s`,
          ],
          ['after', `${after.rssMiB.toFixed(0)} MiB`, `${after.heapMiB.toFixed(0)} MiB`, ''],
        ],
      },
      targets: [
        {
          subject: `api RSS holding ${count(THREADS)} threads × ${count(CALLS)} tool calls (rebuild and full reads)`,
          target: `< ${MEMORY_BOUND_MIB} MiB`,
          measured: `${peak.toFixed(0)} MiB`,
          met: peak < MEMORY_BOUND_MIB,
        },
      ],
      notes: [
        `Read models on disk: ${mib(readModelsBytes).toFixed(0)} MiB. What bounds memory: the read models' SQLite page cache (32 MiB per connection: the projector's and the api's), the log's (SQLite's default, 2 MiB per connection), and pages read ${PAGE} messages at a time; no thread is held in memory between requests or batches.`,
      ],
    };
  } finally {
    await service?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

export const memoryBench: Bench = { name: 'memory', order: 35, run };
