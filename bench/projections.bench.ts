/**
 * Read side: how fast the Projector rebuilds the thread read models from a 1,000,000-event
 * SQLite log, against a raw ordered scan of the same log in the same run; and how long
 * `GET /v1/threads/{threadId}` takes for a thread of 10,000 events, against a bare Fastify
 * route answering the same bytes. Target: rebuild ≥ 0.5× the raw scan's events/s.
 *
 * Why the baseline is fair: the raw scan reads the very same file, after the same warm-up
 * (the file is in the OS page cache for every contender; each opens a fresh connection with
 * SQLite's default page cache), with the same columns in the same order as the store's
 * subscription (`SELECT position, stream, revision, id, type, data, metadata, recorded_at
 * FROM events ORDER BY position`), and it JSON.parses `data` and `metadata` of every row —
 * the parsing any projection of these events must do at least once. What the ratio
 * measures is therefore everything the projection adds on top of reading and parsing: the
 * subscription's paging and async iteration, the event objects, the fold, serializing each
 * touched thread and writing the read models and the checkpoint. The scan without
 * JSON.parse is reported for reference only. Scans run before and after the rebuild and the
 * baseline is their median, so drift of a shared host lands on both sides.
 *
 * A floor is reported beside it: the rebuilt rows written once each by raw better-sqlite3,
 * with nothing read or folded. Reading the log (the baseline) plus that floor bounds what any
 * rebuild into these tables can reach, whatever its fold costs.
 *
 * The query baseline runs like the service in a child process of its own, and is asked by
 * the same client in alternating rounds; it answers the precomputed body that runledger
 * answered, so the ratio is what runledger adds per request: auth, Nest's pipeline, the
 * read-model lookup, JSON.parse of the stored state and serializing the view.
 *
 * The log is built straight into the store's file with better-sqlite3 (bench/lib/
 * run-log-fixture.ts) in a temp directory, used for the whole run, and deleted afterwards.
 * With BENCH_CPU_PROF=1, or when the target is missed, a second rebuild runs under the V8
 * sampling profiler and the section notes where its time went (the profile is written to
 * bench/results/profiles/).
 */
import Database from 'better-sqlite3';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { SqliteEventStore } from '@runledger/event-store';
import {
  OFF_LOOP_BATCHING,
  Projector,
  ReadModelStore,
  THREADS_CHECKPOINT,
  type ProjectorOptions,
} from '@runledger/projections';
import { PROFILE_DIR, startChildServer, type ChildServer } from './lib/child-server';
import {
  profiled,
  saveProfile,
  summarizeProfile,
  type FrameTime,
  type ProfileSummary,
} from './lib/cpu-profile';
import { count, median, ms, ratio, sleep } from './lib/format';
import { codeRevision, describeMachine, packageVersion } from './lib/machine';
import { ROOT } from './lib/report';
import { writeRunLog, type RunLog, type RunLogSpec } from './lib/run-log-fixture';
import type { Bench, Section } from './lib/section';

/** `BENCH_REBUILD_EVENTS` builds a smaller log for a short run. */
const EVENTS = Number(process.env.BENCH_REBUILD_EVENTS ?? 1_000_000);
const BIG_THREAD = 'thread-big';
const BIG_THREAD_EVENTS = 10_000;
const TENANT = 'bench';
const API_KEY = 'benchkey-0123456789abcdef';
const API_KEYS = `${API_KEY}=${TENANT}:append,read,admin`;
const CONCURRENT_RUNS = 100;
const RUNS_PER_THREAD = 2;
const TURNS: [number, number] = [9, 13];
/** Parsed scans: two before the rebuild, one between the rebuilds, one after; the baseline is their median. */
const SCANS_BEFORE = 2;
/** Above this, the app's own start-up rebuild of the 1M log would take too long to wait for. */
const APP_REBUILD_LIMIT_S = 240;
const SMALL_LOG_EVENTS = 100_000;
const REBUILD_TIMEOUT_MS = 30 * 60_000;
const QUERY_WARMUP = 20;
const QUERY_ROUNDS = 4;
const QUERY_PER_ROUND = 50;
const TARGET_RATIO = 0.5;

interface Rate {
  events: number;
  seconds: number;
  rate: number;
}

/** The baseline: every row of the log in position order, optionally with its JSON parsed. */
function rawScan(file: string, parse: boolean): Rate {
  const db = new Database(file, { fileMustExist: true });
  try {
    const rows = db
      .prepare<
        [],
        {
          position: number;
          stream: string;
          revision: number;
          id: string;
          type: string;
          data: string;
          metadata: string;
          recorded_at: string;
        }
      >(
        'SELECT position, stream, revision, id, type, data, metadata, recorded_at FROM events ORDER BY position',
      )
      .iterate();
    const started = performance.now();
    let events = 0;
    let check = 0;
    for (const row of rows) {
      events += 1;
      if (parse) {
        const data = JSON.parse(row.data) as Record<string, unknown>;
        const metadata = JSON.parse(row.metadata) as Record<string, unknown>;
        // Touch the parsed values, so no work can be skipped.
        if (data !== null && typeof metadata.threadId === 'string') check += 1;
      } else if (row.data.length > 0 && row.metadata.length > 0) {
        check += 1;
      }
    }
    const seconds = (performance.now() - started) / 1000;
    if (check !== events) throw new Error(`raw scan: ${events} rows, ${check} checked`);
    return { events, seconds, rate: events / seconds };
  } finally {
    db.close();
  }
}

interface Rebuild extends Rate {
  batches: number;
  threads: number;
  checkpoint: number;
  readModelBytes: number;
  bigState: { bytes: number; messages: number; runs: number } | null;
  /** The longest stretch without an event-loop turn during the rebuild, ms. */
  longestBlockMs: number;
}

/** Ticks every 10 ms; answers the longest gap between turns of the event loop. */
function watchEventLoop(): () => number {
  let last = performance.now();
  let longest = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 10);
  return () => {
    clearInterval(timer);
    return Math.max(longest, performance.now() - last);
  };
}

/**
 * A contender: a fresh read-model store, the real Projector and SqliteEventStore, with the
 * batching of the service's worker thread (the measured one) or of its own loop.
 */
async function rebuild(
  logFile: string,
  head: number,
  dir: string,
  options: ProjectorOptions = {},
): Promise<Rebuild> {
  mkdirSync(dir, { recursive: true });
  const readModelFile = join(dir, 'read-models.db');
  const readModels = new ReadModelStore(readModelFile);
  const log = new SqliteEventStore({ file: logFile, synchronous: 'NORMAL' });
  let batches = 0;
  let finish: () => void = () => undefined;
  let fail: (error: unknown) => void = () => undefined;
  const done = new Promise<void>((resolve, reject) => {
    finish = resolve;
    fail = reject;
  });
  const projector = new Projector(
    log,
    readModels,
    {
      committed(_events, position) {
        batches += 1;
        if (position >= head) finish();
      },
      failed(error) {
        fail(error);
      },
    },
    options,
  );
  const timeout = setTimeout(
    () => fail(new Error(`rebuild not done after ${REBUILD_TIMEOUT_MS} ms`)),
    REBUILD_TIMEOUT_MS,
  );
  let seconds: number;
  let longestBlockMs: number;
  try {
    const started = performance.now();
    const stopWatching = watchEventLoop();
    projector.start();
    await done;
    seconds = (performance.now() - started) / 1000;
    longestBlockMs = stopWatching();
  } finally {
    clearTimeout(timeout);
    await projector.stop();
    readModels.close();
    await log.close();
  }
  const check = new Database(readModelFile, { readonly: true });
  try {
    const { threads } = check.prepare('SELECT COUNT(*) AS threads FROM threads').get() as {
      threads: number;
    };
    const { position } = check
      .prepare('SELECT position FROM checkpoints WHERE name = ?')
      .get(THREADS_CHECKPOINT) as { position: number };
    const big = check
      .prepare(
        `SELECT header, message_count,
           (SELECT COALESCE(SUM(bytes), 0) FROM thread_parts m
            WHERE m.tenant_id = t.tenant_id AND m.thread_id = t.thread_id) AS message_bytes
         FROM threads t WHERE tenant_id = ? AND thread_id = ?`,
      )
      .get(TENANT, BIG_THREAD) as
      { header: string; message_count: number; message_bytes: number } | undefined;
    return {
      events: head,
      seconds,
      rate: head / seconds,
      batches,
      threads,
      checkpoint: position,
      readModelBytes: statSync(readModelFile).size,
      bigState: big
        ? {
            bytes: big.header.length + big.message_bytes,
            messages: big.message_count,
            runs: (JSON.parse(big.header) as { runs: unknown[] }).runs.length,
          }
        : null,
      longestBlockMs,
    };
  } finally {
    check.close();
  }
}

/**
 * A floor under any rebuild into these tables: the rows the measured rebuild wrote, each
 * written once by raw better-sqlite3 in the order it was created (parts by rowid, messages by
 * the position that added them), into a fresh file with the same schema (read from the
 * rebuilt file, so it cannot drift), in as many transactions as the rebuild committed, each
 * thread's header row once. No log is read, nothing is folded and no row is read back.
 */
function writeFloor(rebuiltFile: string, dir: string, events: number, batches: number): Rate {
  const source = new Database(rebuiltFile, { readonly: true });
  let schema: string[];
  let parts: unknown[][];
  let messages: unknown[][];
  let heads: unknown[][];
  try {
    schema = source
      .prepare<[], { sql: string }>(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'",
      )
      .all()
      .map((row) => row.sql);
    const rows = (sql: string) => source.prepare(sql).raw().all() as unknown[][];
    parts = rows(
      `SELECT tenant_id, thread_id, seq, part, run_id, tool_call_id, open, bytes, body
       FROM thread_parts ORDER BY rowid`,
    );
    messages = rows(
      `SELECT tenant_id, thread_id, seq, id, role, metadata, part_count, text_part
       FROM thread_messages ORDER BY json_extract(metadata, '$.position'), seq`,
    );
    heads = rows(
      `SELECT tenant_id, thread_id, status, title, last_activity_at, pending_count, position,
         message_count, header FROM threads`,
    );
  } finally {
    source.close();
  }
  mkdirSync(dir, { recursive: true });
  const db = new Database(join(dir, 'read-models.db'));
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    for (const sql of schema) db.exec(sql);
    const insert = (table: string, n: number) =>
      db.prepare(`INSERT INTO ${table} VALUES (${Array(n).fill('?').join(', ')})`);
    const part = db.prepare(
      `INSERT INTO thread_parts (tenant_id, thread_id, seq, part, run_id, tool_call_id, open, bytes, body)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    const message = insert('thread_messages', 8);
    const head = insert('threads', 9);
    const slice = <T>(all: T[], batch: number) =>
      all.slice(
        Math.floor((all.length * batch) / batches),
        Math.floor((all.length * (batch + 1)) / batches),
      );
    const commit = db.transaction((batch: number) => {
      for (const row of slice(parts, batch)) part.run(...row);
      for (const row of slice(messages, batch)) message.run(...row);
      for (const row of slice(heads, batch)) head.run(...row);
    });
    const started = performance.now();
    for (let batch = 0; batch < batches; batch += 1) commit(batch);
    const seconds = (performance.now() - started) / 1000;
    return { events, seconds, rate: events / seconds };
  } finally {
    db.close();
  }
}

// ---------------------------------------------------------------------------------------
// Queries through HTTP

interface Endpoint {
  label: string;
  path: string;
}

async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`, {
    headers: { authorization: `Bearer ${API_KEY}` },
  });
  return { status: response.status, body: await response.text() };
}

/** Until the app's start-up rebuild has passed `head`; answers the time it took. */
async function waitReady(server: ChildServer, head: number, started: number): Promise<number> {
  for (;;) {
    const { status, body } = await get(
      server.port,
      `/v1/threads/${BIG_THREAD}?minPosition=${head}`,
    );
    if (status === 200) return (performance.now() - started) / 1000;
    if (status !== 503) throw new Error(`waiting for the rebuild: ${status} ${body.slice(0, 300)}`);
    if (performance.now() - started > REBUILD_TIMEOUT_MS)
      throw new Error('the app did not rebuild in time');
    await sleep(200);
  }
}

async function timeRequests(
  port: number,
  path: string,
  n: number,
  expected: string,
  into: number[] | null,
): Promise<void> {
  for (let i = 0; i < n; i += 1) {
    const started = performance.now();
    const { status, body } = await get(port, path);
    const elapsed = performance.now() - started;
    if (status !== 200 || body.length !== expected.length)
      throw new Error(
        `GET ${path}: ${status}, ${body.length} characters (${expected.length} expected)`,
      );
    into?.push(elapsed);
  }
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

interface LatencySummary {
  p50: number;
  p99: number;
  max: number;
  n: number;
}

function summarize(values: readonly number[]): LatencySummary {
  const sorted = [...values].sort((a, b) => a - b);
  return {
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? 0,
    n: sorted.length,
  };
}

interface QueryResults {
  logEvents: number;
  sameLog: boolean;
  /** From spawning the service until it reported listening, and until it answered the query. */
  appListeningSeconds: number;
  appReadySeconds: number;
  endpoints: {
    endpoint: Endpoint;
    bytes: number;
    service: LatencySummary;
    bare: LatencySummary;
  }[];
}

async function measureQueries(
  dataDir: string,
  log: RunLog,
  sameLog: boolean,
  bodiesFile: string,
): Promise<QueryResults> {
  const endpoints: Endpoint[] = [
    {
      label: `GET /v1/threads/{id}, ${count(BIG_THREAD_EVENTS)}-event thread`,
      path: `/v1/threads/${BIG_THREAD}`,
    },
    {
      label: `GET /v1/threads/{id}/voice-seed, ${count(BIG_THREAD_EVENTS)}-event thread`,
      path: `/v1/threads/${BIG_THREAD}/voice-seed`,
    },
    {
      label: `GET /v1/threads/{id}, typical ${log.typicalThread.events}-event thread`,
      path: `/v1/threads/${log.typicalThread.threadId}`,
    },
  ];
  const servers: ChildServer[] = [];
  try {
    const started = performance.now();
    const service = await startChildServer(join(__dirname, 'servers', 'runledger.server.ts'), {
      BENCH_DATA_DIR: dataDir,
      BENCH_API_KEYS: API_KEYS,
    });
    servers.push(service);
    const appListeningSeconds = (performance.now() - started) / 1000;
    const appReadySeconds = await waitReady(service, log.head, started);
    const bodies = new Map<string, string>();
    for (const endpoint of endpoints) {
      const { status, body } = await get(service.port, endpoint.path);
      if (status !== 200) throw new Error(`GET ${endpoint.path}: ${status} ${body.slice(0, 300)}`);
      bodies.set(endpoint.path, body);
    }
    const threadId = (path: string) => path.split('/')[3];
    const precomputed = {
      threads: {} as Record<string, string>,
      seeds: {} as Record<string, string>,
    };
    for (const [path, body] of bodies) {
      if (path.endsWith('/voice-seed')) precomputed.seeds[threadId(path)] = body;
      else precomputed.threads[threadId(path)] = body;
    }
    writeFileSync(bodiesFile, JSON.stringify(precomputed));
    const bare = await startChildServer(join(__dirname, 'servers', 'static-thread.server.ts'), {
      BENCH_BODIES_FILE: bodiesFile,
    });
    servers.push(bare);
    const contenders = [bare, service];
    const latencies = new Map<string, number[]>();
    const key = (server: ChildServer, path: string) => `${server.port} ${path}`;
    for (const server of contenders) {
      for (const endpoint of endpoints) {
        const expected = bodies.get(endpoint.path) as string;
        await timeRequests(server.port, endpoint.path, QUERY_WARMUP, expected, null);
        latencies.set(key(server, endpoint.path), []);
      }
    }
    // Alternating rounds: load from elsewhere on the host lands on both servers alike.
    for (let round = 1; round <= QUERY_ROUNDS; round += 1) {
      console.log(`query round ${round}/${QUERY_ROUNDS}`);
      for (const server of round % 2 === 1 ? contenders : [...contenders].reverse()) {
        for (const endpoint of endpoints) {
          const expected = bodies.get(endpoint.path) as string;
          const into = latencies.get(key(server, endpoint.path)) as number[];
          await timeRequests(server.port, endpoint.path, QUERY_PER_ROUND, expected, into);
        }
      }
    }
    for (const server of servers.splice(0)) await server.stop();
    return {
      logEvents: log.events,
      sameLog,
      appListeningSeconds,
      appReadySeconds,
      endpoints: endpoints.map((endpoint) => ({
        endpoint,
        bytes: Buffer.byteLength(bodies.get(endpoint.path) as string),
        service: summarize(latencies.get(key(service, endpoint.path)) as number[]),
        bare: summarize(latencies.get(key(bare, endpoint.path)) as number[]),
      })),
    };
  } finally {
    for (const server of servers) await server.stop().catch(() => undefined);
  }
}

// ---------------------------------------------------------------------------------------
// Where the rebuild's time goes

interface Breakdown {
  summary: ProfileSummary;
  file: string;
  seconds: number;
}

async function profileRebuild(logFile: string, head: number, dir: string): Promise<Breakdown> {
  const { result, profile } = await profiled(() => rebuild(logFile, head, dir, OFF_LOOP_BATCHING));
  const file = saveProfile(profile, PROFILE_DIR, 'projections-rebuild');
  return { summary: summarizeProfile(profile), file, seconds: result.seconds };
}

const pct = (share: number) => `${(100 * share).toFixed(1)}%`;

function breakdownNotes(breakdown: Breakdown): string[] {
  const { summary } = breakdown;
  const under = (functionName: string, file: string) =>
    summary.inclusive((frame) => frame.functionName === functionName && frame.file.endsWith(file));
  const selfOf = (match: (frame: FrameTime) => boolean) =>
    summary.self.filter(match).reduce((sum, frame) => sum + frame.share, 0);
  const phases: [string, number][] = [
    [
      "reading the log (the subscription's `readNext`: `Statement.all`, 500 rows a page)",
      under('readNext', 'sqlite.event-store.ts'),
    ],
    [
      'making event objects (`toRecorded`, which JSON.parses data and metadata)',
      under('toRecorded', 'sqlite.event-store.ts'),
    ],
    ['the fold (`applyToRows`)', under('applyToRows', 'thread-fold.ts')],
    ['writing the read models (`ReadModelStore.commit`)', under('commit', 'read-model.store.ts')],
    [
      "…of which each changed row's JSON and statement calls (`StoredThreadRows.write`, callees included)",
      under('write', 'read-model.store.ts'),
    ],
    [
      '…and SQLite writing the upserts (`Statement.run`)',
      selfOf((frame) => frame.functionName === 'run' && frame.file === ''),
    ],
    [
      'garbage collection',
      summary.inclusive((frame) => frame.functionName === '(garbage collector)'),
    ],
  ];
  const top = summary.self
    .slice(0, 8)
    .map((frame) => `${frame.frame} ${pct(frame.share)}`)
    .join('; ');
  return [
    `Where a second, profiled rebuild's time went (V8 sampling profiler, ${breakdown.seconds.toFixed(1)} s under the profiler; shares of the sampled time, callees included): ${phases
      .map(([label, share]) => `${label}: ${pct(share)}`)
      .join('; ')}. Profile: \`${breakdown.file.replace(`${ROOT}/`, '')}\`.`,
    `Most self time: ${top}.`,
  ];
}

// ---------------------------------------------------------------------------------------

function logSpec(file: string, events: number): RunLogSpec {
  return {
    file,
    events,
    concurrentRuns: CONCURRENT_RUNS,
    runsPerThread: RUNS_PER_THREAD,
    turns: TURNS,
    tenantId: TENANT,
    bigRun: { threadId: BIG_THREAD, events: BIG_THREAD_EVENTS },
    seed: 20_260_105,
  };
}

async function run(): Promise<Section> {
  const dir = mkdtempSync(join(tmpdir(), 'runledger-bench-projections-'));
  try {
    const dataDir = join(dir, 'data');
    mkdirSync(dataDir);
    console.log(`writing a ${count(EVENTS)}-event log…`);
    const log = await writeRunLog(logSpec(join(dataDir, 'runledger.db'), EVENTS));
    console.log(
      `${count(log.events)} events, ${count(log.threads)} threads, ${count(log.runs)} runs, ${(log.bytes / 2 ** 20).toFixed(0)} MiB in ${log.seconds.toFixed(1)} s`,
    );

    rawScan(log.file, false); // warm-up: the file into the page cache
    const plain: Rate[] = [rawScan(log.file, false)];
    const parsed: Rate[] = [];
    for (let i = 0; i < SCANS_BEFORE; i += 1) parsed.push(rawScan(log.file, true));
    console.log(`raw scan: ${parsed.map((s) => count(s.rate)).join(', ')} events/s; rebuilding…`);
    const measured = await rebuild(log.file, log.head, join(dir, 'rebuild'), OFF_LOOP_BATCHING);
    console.log(`rebuild: ${count(measured.rate)} events/s in ${measured.seconds.toFixed(1)} s`);
    parsed.push(rawScan(log.file, true));
    const inline = await rebuild(log.file, log.head, join(dir, 'rebuild-inline'));
    console.log(
      `rebuild, the api loop's batching: ${count(inline.rate)} events/s in ${inline.seconds.toFixed(1)} s`,
    );
    parsed.push(rawScan(log.file, true));
    plain.push(rawScan(log.file, false));
    const floor = writeFloor(
      join(dir, 'rebuild', 'read-models.db'),
      join(dir, 'floor'),
      log.events,
      measured.batches,
    );
    console.log(`rows written once, raw: ${floor.seconds.toFixed(1)} s`);
    for (const result of [measured, inline]) {
      if (result.checkpoint !== log.head)
        throw new Error(`rebuild checkpoint ${result.checkpoint}, log head ${log.head}`);
      if (result.threads !== log.threads)
        throw new Error(`rebuild wrote ${result.threads} threads, the log has ${log.threads}`);
    }

    const baseline = median(parsed.map((s) => s.rate));
    const reference = median(plain.map((s) => s.rate));
    const rebuildRatio = measured.rate / baseline;

    let breakdown: Breakdown | null = null;
    if (rebuildRatio < TARGET_RATIO || process.env.BENCH_CPU_PROF === '1') {
      console.log('profiling a second rebuild…');
      breakdown = await profileRebuild(log.file, log.head, join(dir, 'rebuild-profiled'));
    }

    // The app rebuilds its own read models at start-up before it can answer: on the same
    // log when that is quick enough, else on a smaller log with the same big thread.
    const sameLog = measured.seconds <= APP_REBUILD_LIMIT_S;
    let queryDir = dataDir;
    let queryLog = log;
    if (!sameLog) {
      queryDir = join(dir, 'query-data');
      mkdirSync(queryDir);
      queryLog = await writeRunLog(logSpec(join(queryDir, 'runledger.db'), SMALL_LOG_EVENTS));
    }
    console.log('measuring queries…');
    const queries = await measureQueries(queryDir, queryLog, sameLog, join(dir, 'bodies.json'));

    return section(
      log,
      plain,
      parsed,
      reference,
      baseline,
      measured,
      inline,
      floor,
      breakdown,
      queries,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** How long the api's own loop would wait behind a rebuild with `BACKGROUND_THREADS=off`. */
function blockNote(inline: Rebuild): string {
  const blocked = inline.longestBlockMs / 1000;
  const whole = blocked >= 0.9 * inline.seconds;
  if (whole) {
    return `With the api loop's batching the event loop had no turn for ${blocked.toFixed(1)} s during the ${inline.seconds.toFixed(1)} s rebuild — all of it: with \`BACKGROUND_THREADS=off\` a start-up rebuild would leave every request (health checks included) unanswered until it is done.`;
  }
  return `With the api loop's batching the event loop's longest stretch without a turn was ${blocked.toFixed(1)} s during the ${inline.seconds.toFixed(1)} s rebuild: the fold gives the loop a turn every 8 ms and the subscription every 500 events, and a batch commits at 1,000 events or after 100 ms, so with \`BACKGROUND_THREADS=off\` requests (health checks included) are answered while a start-up rebuild runs. With the default, the worker thread's longer commits hold only the worker's loop.`;
}

function section(
  log: RunLog,
  plain: Rate[],
  parsed: Rate[],
  reference: number,
  baseline: number,
  measured: Rebuild,
  inline: Rebuild,
  floor: Rate,
  breakdown: Breakdown | null,
  queries: QueryResults,
): Section {
  const rebuildRatio = measured.rate / baseline;
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  const types = Object.entries(log.eventsByType)
    .sort((a, b) => b[1] - a[1])
    .map(([type, n]) => `${type} ${count(n)}`)
    .join(', ');
  const rows: string[][] = [
    [
      'Rebuild',
      'raw ordered scan, no JSON.parse (reference)',
      `${count(reference)} events/s`,
      `${plain.map((s) => `${s.seconds.toFixed(2)} s`).join(', ')} for ${count(log.events)} events`,
      ratio(reference / baseline),
    ],
    [
      'Rebuild',
      'raw ordered scan + JSON.parse of data and metadata (baseline)',
      `${count(baseline)} events/s`,
      `${parsed.map((s) => `${s.seconds.toFixed(2)} s`).join(', ')} (median taken)`,
      'baseline',
    ],
    [
      'Rebuild',
      `Projector from an empty read-model store (subscribeToAll → applyToRows → ReadModelStore), with the service's batching (its worker thread's: up to ${count(OFF_LOOP_BATCHING.batchSize ?? 0)} events or 100 ms a batch)`,
      `${count(measured.rate)} events/s`,
      `${measured.seconds.toFixed(1)} s; ${count(measured.batches)} batches; ${count(measured.threads)} threads; read models ${mib(measured.readModelBytes)}`,
      ratio(rebuildRatio, 3),
    ],
    [
      'Rebuild',
      'the same Projector with the batching for the api loop (`BACKGROUND_THREADS=off`): up to 1,000 events or 100 ms a batch',
      `${count(inline.rate)} events/s`,
      `${inline.seconds.toFixed(1)} s; ${count(inline.batches)} batches`,
      ratio(inline.rate / baseline, 3),
    ],
    [
      'Rebuild',
      'floor (reference): the same rows written once each by raw better-sqlite3, in creation order, no log read, no fold',
      `${count(floor.rate)} events/s`,
      `${floor.seconds.toFixed(1)} s in ${count(measured.batches)} transactions`,
      ratio(floor.rate / baseline, 3),
    ],
    [
      'Rebuild',
      `runledger api start-up on the ${count(queries.logEvents)}-event log until the thread query answers`,
      `${queries.appReadySeconds.toFixed(1)} s`,
      `≈ ${count(queries.logEvents / queries.appReadySeconds)} events/s, Nest start-up included; listening after ${queries.appListeningSeconds.toFixed(1)} s`,
      '',
    ],
  ];
  for (const { endpoint, bytes, service, bare } of queries.endpoints) {
    const cells = (l: LatencySummary) => `p50 ${ms(l.p50)}, p99 ${ms(l.p99)}`;
    rows.push(
      [
        'Query',
        `${endpoint.label}: bare Fastify, precomputed body (baseline)`,
        cells(bare),
        `max ${ms(bare.max)}; ${bare.n} requests; ${count(bytes)} bytes`,
        'baseline',
      ],
      [
        'Query',
        `${endpoint.label}: runledger api`,
        cells(service),
        `max ${ms(service.max)}; ${service.n} requests; ${count(bytes)} bytes`,
        `p50 ${ratio(service.p50 / bare.p50)}, p99 ${ratio(service.p99 / bare.p99)}`,
      ],
    );
  }
  const big = queries.endpoints[0];
  const notes: string[] = [
    `The rebuild ran at ${ratio(rebuildRatio, 3)} the parsed scan's rate (${ratio(measured.rate / reference)} the unparsed scan's): the projection spends about ${count(1e6 * (1 / measured.rate - 1 / baseline))} µs per event on top of reading and parsing it.`,
    `With the batching for the api loop (batches of 1,000 events or 100 ms; nothing else changed) the same rebuild runs at ${ratio(inline.rate / baseline, 3)} the baseline: the service's worker batching is ${ratio(measured.rate / inline.rate)} its rate. Each commit writes the header rows and index pages its batch touched, so fewer, larger batches write each of them fewer times. The api's loop keeps the small batches because there a commit holds every request.`,
    `Writing the rebuilt rows alone, once each and with nothing read or folded, takes ${floor.seconds.toFixed(1)} s, ${ratio(baseline / floor.rate)} the time of the parsed scan. A rebuild must read and parse the log (the baseline) and write these rows, so even with a fold that cost nothing it could reach at most ${ratio(1 / (1 + baseline / floor.rate), 3)} the baseline on this machine. The rebuild's own cost beyond those two is about ${count(1e6 * (1 / measured.rate - 1 / baseline - 1 / floor.rate))} µs per event (the fold, upserts in place of plain inserts, headers written once per batch, event objects).`,
    blockNote(inline),
  ];
  if (measured.bigState) {
    notes.push(
      `The ${count(BIG_THREAD_EVENTS)}-event thread's stored state is ${mib(measured.bigState.bytes)} of JSON in its rows (${count(measured.bigState.messages)} messages, ${measured.bigState.runs} run); the thread view answered ${mib(big.bytes)}. Its events are spread over the whole log; a batch reads and writes only the rows its events name (the header, and one message or part row per event), whatever the thread's length.`,
    );
  }
  if (breakdown) notes.push(...breakdownNotes(breakdown));
  return {
    name: 'projections',
    title: `Projections: rebuild of a ${count(log.events)}-event log vs a raw ordered scan; thread queries vs bare Fastify`,
    measuredAt: new Date().toISOString(),
    machine: describeMachine(),
    revision: codeRevision(),
    method: [
      `The log: ${count(log.events)} events written straight into a SqliteEventStore file (the store creates the file and its schema; better-sqlite3 then inserts the rows with one prepared statement, 50,000 rows a transaction; ${log.seconds.toFixed(1)} s, ${mib(log.bytes)}). ${count(log.runs)} runs in ${count(log.threads)} threads of one tenant, ${RUNS_PER_THREAD} runs per thread one after another, ${CONCURRENT_RUNS} runs in flight at once with their events interleaved, ${log.openRuns} still open at the end; each run is run.started, ${TURNS[0]}–${TURNS[1]} turns (turn.started, the user's message — typed, or a transcript for voice runs —, a model.call, 0–3 tool.started/tool.finished pairs of which 10% failed, 8% of the tools behind an approval.requested/approval.resolved pair with 20% denied, a second model.call after tools, the assistant's answer, turn.finished) and run.finished. Events by type: ${types}. Every event carries the server's stamp {tenantId, runId, threadId, prevHash, hash} (random 64-hex hashes, chained); data averages ${count(log.meanDataBytes)} bytes of JSON and metadata ${count(log.meanMetadataBytes)}. One run of exactly ${count(BIG_THREAD_EVENTS)} events, alone in thread \`${BIG_THREAD}\`, takes every ${count(log.events / BIG_THREAD_EVENTS)}th position, i.e. it is spread over the whole log, as a long session is between other agents' traffic. A typical thread (\`${log.typicalThread.threadId}\`) holds ${log.typicalThread.events} events.`,
      `Baseline: a raw ordered scan of the same file, \`SELECT position, stream, revision, id, type, data, metadata, recorded_at FROM events ORDER BY position\` iterated with better-sqlite3's \`.iterate()\`, with JSON.parse of \`data\` and \`metadata\` of every row — the same parsing the projector must do for every event, so the ratio is the cost of projecting on top of reading and parsing. ${SCANS_BEFORE} scans run before the rebuild, one between it and the batched rebuild and one after (each on a fresh connection; the file had been read once before to put it in the OS page cache, as it is for the rebuild); the baseline is their median. The same scan without JSON.parse is shown for reference.`,
      `Measured: a fresh \`ReadModelStore\` in a temp directory and \`new Projector(new SqliteEventStore({ file, synchronous: 'NORMAL' }), readModels, observer, OFF_LOOP_BATCHING)\`: the options the service gives its projector's worker thread (batches of up to ${count(OFF_LOOP_BATCHING.batchSize ?? 0)} events, 8 MiB of their JSON or 100 ms, the fold yielding every 8 ms; no thread states cached), run here on the bench's own thread; \`start()\`, then the time until its observer reports a committed position at the log's head. Events/s is ${count(log.events)} over that time. Afterwards the bench checks the checkpoint (= head) and the thread count (= the log's). A second rebuild into another fresh store uses the Projector's defaults, the batching for the api's own loop (\`BACKGROUND_THREADS=off\`: 1,000 events or 100 ms). While a rebuild runs, a 10 ms interval timer records the longest stretch without an event-loop turn.`,
      `Queries: the real service (\`createApp(loadConfig({ DATA_DIR, RUNLEDGER_API_KEYS }))\`, bench/servers/runledger.server.ts, with the rate limits at their maximum of 100,000 so the limiter counts the bench's calls but never refuses them) in a child process on ${queries.sameLog ? `the same ${count(queries.logEvents)}-event log` : `a smaller log of ${count(queries.logEvents)} events with the same ${count(BIG_THREAD_EVENTS)}-event thread (the full log's start-up rebuild would take more than ${APP_REBUILD_LIMIT_S} s)`}; its projector rebuilds the read models at start-up, and the bench polls \`GET /v1/threads/${BIG_THREAD}?minPosition=<head>\` until it answers 200. Then ${QUERY_ROUNDS} rounds × ${QUERY_PER_ROUND} sequential requests per endpoint (after ${QUERY_WARMUP} warm-up requests), alternating with the baseline, from Node's fetch (undici ${process.versions.undici ?? 'bundled'}) in the bench process; a latency is the time until the whole body is read, and every answer is checked for status 200 and the expected length. Baseline: bare Fastify ${packageVersion('fastify')} in its own child process answering the same paths with the very body runledger answered, precomputed.`,
    ],
    table: {
      columns: ['Part', 'Contender', 'Result', 'Detail', 'vs baseline'],
      rows,
    },
    targets: [
      {
        subject: `rebuild of a ${count(log.events)}-event log vs a raw ordered scan with JSON.parse`,
        target: `≥ ${TARGET_RATIO}× baseline events/s`,
        measured: `${ratio(rebuildRatio, 3)} (${count(measured.rate)} vs ${count(baseline)} events/s)`,
        met: rebuildRatio >= TARGET_RATIO,
      },
    ],
    notes,
  };
}

export const projectionsBench: Bench = { name: 'projections', order: 30, run };
