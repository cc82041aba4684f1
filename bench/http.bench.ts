/**
 * HTTP appends of one event per request from 50 connections (autocannon), the real
 * runledger api (as it runs by default: the projector and the SQLite log's durable commits each
 * in a worker thread of the same process, the SSE follower on its loop) against a bare
 * Fastify server: each request a 900-character message with a client-supplied event id,
 * each connection on its own run and thread, 30 s per server. Target: ≥ 0.25× the bare
 * server's requests/s, p99 reported, SQLite durable (synchronous=FULL).
 *
 * Why the baseline is fair: each server runs alone in a child process of its own with the
 * same Node, started the same way; the same autocannon in this process sends them the same
 * requests (same method, path, headers and JSON body, same 50 connections, each connection
 * on its own run), in alternating rounds so that outside load lands on both alike; the
 * bare server parses the body with the same Fastify parser options and answers 201 `{}`.
 * What the ratio measures is therefore everything runledger adds: Nest's pipeline, the key
 * check, validation, the run rules, the hash chain, the head read and the durable append.
 *
 * The machine has 2 cores, so autocannon competes with the server for CPU in both runs.
 */
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startChildServer, type ChildServer } from './lib/child-server';
import { count, ms, ratio } from './lib/format';
import { codeRevision, describeMachine, packageVersion } from './lib/machine';
import type { Bench, Section } from './lib/section';

const CONNECTIONS = 50;
const WARMUP_S = 2;
const ROUNDS = 3;
const ROUND_S = 10;
const TARGET_RATIO = 0.25;
const TARGET_P99_MS = 10;

const API_KEY = 'benchkey-0123456789abcdef';
const API_KEYS = `${API_KEY}=bench:append,read,admin`;
const HEADERS = { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` };
const TEXT_CHARS = 900;
const TEXT = 'The agent read the file, ran the tests and found two failures; '
  .repeat(Math.ceil(TEXT_CHARS / 63))
  .slice(0, TEXT_CHARS);
/** Every request a new event: its own client id and message id, as an agent runtime sends. */
function body(): string {
  return JSON.stringify({
    events: [
      {
        id: randomUUID(),
        type: 'message.added',
        data: { messageId: randomUUID(), role: 'assistant', text: TEXT },
      },
    ],
  });
}
const BODY_EXAMPLE = body()
  .replace(/[0-9a-f-]{36}/g, '<uuid>')
  .replace(TEXT, `<${TEXT_CHARS} characters>`);
const RUN_IDS = Array.from({ length: CONNECTIONS }, (_, i) => `bench-run-${i}`);

interface Load {
  requestsPerSecond: number;
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  p50: number;
  p99: number;
  max: number;
  /** Server CPU time per successful request, µs. */
  cpuPerRequestUs: number;
  /** Server CPU use over the measured rounds, in cores. */
  serverCores: number;
  /** Requests/s of each measured round. */
  rounds: number[];
}

/** One contender's running totals over its measured rounds. */
interface Tally {
  server: ChildServer;
  latencies: number[];
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  seconds: number;
  cpuUs: number;
  rounds: number[];
}

function fire(
  port: number,
  seconds: number,
  latencies: number[] | null,
): Promise<autocannon.Result> {
  let next = 0;
  return autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: CONNECTIONS,
    duration: seconds,
    method: 'POST',
    headers: HEADERS,
    // Each connection appends to its own run (in its own thread), so no two requests wait on
    // one run's order and every thread grows.
    setupClient: (client) => {
      const runId = RUN_IDS[next % RUN_IDS.length];
      next += 1;
      client.setRequests([
        {
          method: 'POST',
          path: `/v1/runs/${runId}/events`,
          headers: HEADERS,
          setupRequest: (request) => ({ ...request, body: body() }),
        },
      ]);
      // The same per-response time autocannon's latency histogram records, kept unrounded.
      if (latencies)
        client.on('response', (_status: number, _bytes: number, time: number) => {
          latencies.push(time);
        });
    },
  });
}

async function measureRound(tally: Tally): Promise<void> {
  const before = await tally.server.cpuUsage();
  const result = await fire(tally.server.port, ROUND_S, tally.latencies);
  const after = await tally.server.cpuUsage();
  tally.cpuUs += after.user - before.user + (after.system - before.system);
  tally.ok += result['2xx'];
  tally.non2xx += result.non2xx;
  tally.errors += result.errors;
  tally.timeouts += result.timeouts;
  tally.seconds += result.duration;
  tally.rounds.push(result['2xx'] / result.duration);
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

function summarize(tally: Tally): Load {
  const sorted = Float64Array.from(tally.latencies).sort();
  const values = Array.from(sorted);
  return {
    requestsPerSecond: tally.ok / tally.seconds,
    ok: tally.ok,
    non2xx: tally.non2xx,
    errors: tally.errors,
    timeouts: tally.timeouts,
    p50: percentile(values, 50),
    p99: percentile(values, 99),
    max: values[values.length - 1] ?? 0,
    cpuPerRequestUs: tally.ok > 0 ? tally.cpuUs / tally.ok : 0,
    serverCores: tally.cpuUs / 1e6 / tally.seconds,
    rounds: tally.rounds,
  };
}

const tallyOf = (server: ChildServer): Tally => ({
  server,
  latencies: [],
  ok: 0,
  non2xx: 0,
  errors: 0,
  timeouts: 0,
  seconds: 0,
  cpuUs: 0,
  rounds: [],
});

async function startRuns(port: number): Promise<void> {
  for (const runId of RUN_IDS) {
    const response = await fetch(`http://127.0.0.1:${port}/v1/runs/${runId}/events`, {
      method: 'POST',
      headers: HEADERS,
      body: JSON.stringify({
        events: [
          {
            type: 'run.started',
            data: { threadId: `${runId}-thread`, agent: 'bench', source: 'api' },
          },
        ],
      }),
    });
    if (response.status !== 201)
      throw new Error(`starting ${runId}: ${response.status} ${await response.text()}`);
  }
}

/** Rows in the store after the run: every acknowledged append must be there. */
function checkStore(dataDir: string, acknowledged: number): number {
  const db = new Database(join(dataDir, 'runledger.db'), { readonly: true });
  const { rows, streams } = db
    .prepare('SELECT COUNT(*) AS rows, COUNT(DISTINCT stream) AS streams FROM events')
    .get() as { rows: number; streams: number };
  db.close();
  // run.started and warm-up rows come on top of the measured appends.
  if (rows < acknowledged + RUN_IDS.length)
    throw new Error(`${acknowledged} appends acknowledged, only ${rows} rows in the store`);
  if (streams !== RUN_IDS.length)
    throw new Error(`appends went to ${streams} runs, expected ${RUN_IDS.length}`);
  return rows;
}

async function measureBoth(): Promise<{ bare: Load; service: Load & { rows: number } }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'runledger-bench-http-'));
  const servers: ChildServer[] = [];
  try {
    const bareServer = await startChildServer(
      join(__dirname, 'servers', 'bare-fastify.server.ts'),
      {},
    );
    servers.push(bareServer);
    const serviceServer = await startChildServer(
      join(__dirname, 'servers', 'runledger.server.ts'),
      { BENCH_DATA_DIR: dataDir, BENCH_API_KEYS: API_KEYS },
    );
    servers.push(serviceServer);
    await startRuns(serviceServer.port);
    const bare = tallyOf(bareServer);
    const service = tallyOf(serviceServer);
    for (const tally of [bare, service]) await fire(tally.server.port, WARMUP_S, null);
    // Alternating rounds: load from elsewhere on a shared host lands on both servers alike.
    for (let round = 1; round <= ROUNDS; round += 1) {
      for (const tally of [bare, service]) {
        console.log(`round ${round}/${ROUNDS}: ${tally === bare ? 'bare Fastify' : 'runledger'}`);
        await measureRound(tally);
      }
    }
    for (const server of servers.splice(0)) await server.stop();
    return {
      bare: summarize(bare),
      service: { ...summarize(service), rows: checkStore(dataDir, service.ok) },
    };
  } finally {
    for (const server of servers) await server.stop().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function row(label: string, load: Load, baseline: Load): string[] {
  return [
    label,
    count(load.requestsPerSecond),
    load.rounds.map(count).join(', '),
    ms(load.p50),
    ms(load.p99),
    ms(load.max),
    String(load.non2xx + load.errors + load.timeouts),
    `${count(load.cpuPerRequestUs)} µs (${load.serverCores.toFixed(2)} cores)`,
    ratio(load.requestsPerSecond / baseline.requestsPerSecond),
  ];
}

async function run(): Promise<Section> {
  const { bare, service } = await measureBoth();
  const throughput = service.requestsPerSecond / bare.requestsPerSecond;
  const clean = service.non2xx + service.errors + service.timeouts === 0;
  return {
    name: 'http',
    title: `HTTP appends: runledger vs bare Fastify (1 event per request, ${CONNECTIONS} connections)`,
    measuredAt: new Date().toISOString(),
    machine: describeMachine(),
    revision: codeRevision(),
    method: [
      `autocannon ${packageVersion('autocannon')} in the bench process drives ${CONNECTIONS} connections, no pipelining. Both servers run at once, each alone in a child process; each gets a ${WARMUP_S} s warm-up, then they take turns for ${ROUNDS} rounds of ${ROUND_S} s each (${ROUNDS * ROUND_S} s measured per server), so that load from elsewhere on the host lands on both alike. Every request is \`POST /v1/runs/{runId}/events\` with \`${BODY_EXAMPLE}\`, a new client event id and message id each time; each connection keeps to one of ${RUN_IDS.length} runs, each in a thread of its own, started with a run.started event before the warm-up.`,
      `Baseline: a bare Fastify ${packageVersion('fastify')} server, one route at the same path that parses the same JSON body (same parser options as runledger's adapter) and answers 201 \`{}\`.`,
      "Measured: the real service, `createApp(loadConfig(…), keys)` listening on 127.0.0.1, SQLite in a temp directory with synchronous=FULL (an acknowledged append has been fsynced), as it runs by default (BACKGROUND_THREADS=on): its projector folding every append into the thread read models in a worker thread of the same process, and the log's group commits (with their fsync) written by a second worker thread. The CPU time per request counts every thread of the process. After the run, the bench checks that the file holds every acknowledged event, in all the runs.",
      "Requests/s counts 2xx answers over the measured rounds. Latency percentiles are over every response of the measured rounds, from autocannon's per-response time (the value its latency histogram records, which it rounds to whole milliseconds). Server CPU is the child's user+system time over the measured rounds, per successful request and in cores.",
      'The machine has 2 cores and autocannon runs on them too, as do the processes of anyone else using the host: with the bare server autocannon itself is usually the bottleneck, so the baseline is a floor on what Fastify alone can do and the ratio is conservative for runledger. Server CPU per request is the steadiest number from run to run. `BENCH_CPU_PROF=1 npm run bench -- http` writes V8 CPU profiles of both servers to bench/results/profiles/.',
    ],
    table: {
      columns: [
        'Server',
        'Requests/s',
        'Requests/s (rounds)',
        'p50',
        'p99',
        'max',
        'Non-2xx + errors',
        'Server CPU per request',
        'vs baseline',
      ],
      rows: [row('bare Fastify (baseline)', bare, bare), row('runledger api', service, bare)],
    },
    targets: [
      {
        subject: `HTTP append throughput, 1 event per request, ${CONNECTIONS} connections, vs bare Fastify`,
        target: `≥ ${TARGET_RATIO}× baseline requests/s`,
        measured: `${ratio(throughput, 3)} (${count(service.requestsPerSecond)} vs ${count(bare.requestsPerSecond)} requests/s)`,
        met: throughput >= TARGET_RATIO,
      },
      {
        subject: 'HTTP append latency p99 (synchronous=FULL)',
        target: `≤ ${TARGET_P99_MS} ms`,
        measured: ms(service.p99),
        met: service.p99 <= TARGET_P99_MS,
      },
      {
        subject: 'HTTP append answers',
        target: 'no non-2xx, no errors',
        measured: `${service.non2xx} non-2xx, ${service.errors} errors, ${service.timeouts} timeouts`,
        met: clean,
      },
    ],
    notes: [
      `Requests/s ratio per round: ${service.rounds.map((r, i) => ratio(r / bare.rounds[i])).join(', ')}.`,
      `Server CPU per request: runledger ${count(service.cpuPerRequestUs)} µs, bare Fastify ${count(bare.cpuPerRequestUs)} µs; what runledger adds per one-event append costs about ${count(service.cpuPerRequestUs - bare.cpuPerRequestUs)} µs of CPU.`,
      `With ${CONNECTIONS} connections each waiting for its answer, the mean latency is about ${CONNECTIONS} / requests/s: ${ms((1000 * CONNECTIONS) / service.requestsPerSecond)} at runledger's rate. A p99 ≤ ${TARGET_P99_MS} ms therefore needs well over ${count((1000 * CONNECTIONS) / TARGET_P99_MS)} requests/s with a tight tail; the bare server's own p99 here, ${ms(bare.p99)}, shows how much of the tail comes from sharing 2 cores with the load generator.`,
      `${count(service.ok)} appends acknowledged in the measured rounds; the store held ${count(service.rows)} events afterwards (run.started and warm-up included).`,
    ],
  };
}

export const httpBench: Bench = { name: 'http', order: 20, run };
