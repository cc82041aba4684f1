/**
 * Long threads (issue: "long threads cost what short ones cost"): one thread grown to
 * 10,000 tool calls with 8 KB outputs through the real api, one append per request, the
 * projector following in a worker thread of the same process. Per 1,000-call window: append latency p50/p99,
 * the server's worst event-loop delay (perf_hooks, measured in the server process) and its
 * RSS. Targets: the last window's p50 and p99 ≤ 1.25× the first's; worst event-loop delay
 * ≤ 50 ms.
 *
 * Then the thread's page (`GET /v1/threads/{id}`, the newest 50 messages) against a bare
 * Fastify route answering the very same bytes, sequential requests in alternating rounds.
 * Target: ≥ 0.5× the bare server's requests/s.
 *
 * Why the baselines are fair: the first window is the same service on the same thread, only
 * shorter, so the ratio is what length alone costs. The page baseline answers the body
 * runledger answered, precomputed, from a child process of its own, asked by the same client.
 *
 * `BENCH_SOAK_CALLS` grows the thread to fewer calls (a multiple of 1,000) for a short run.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { startChildServer, type ChildServer, type ServerHealth } from './lib/child-server';
import { count, median, ms, ratio } from './lib/format';
import { codeRevision, describeMachine } from './lib/machine';
import type { Bench, Section } from './lib/section';

const CALLS = Number(process.env.BENCH_SOAK_CALLS ?? 10_000);
const WINDOW = 1000;
const OUTPUT = 'x'.repeat(8 * 1024);
const API_KEY = 'benchkey-0123456789abcdef';
const API_KEYS = `${API_KEY}=bench:append,read,admin`;
const HEADERS = { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` };
const RUN_ID = 'soak-run';
const THREAD_ID = 'soak-thread';
/** A reader looks at the thread every this many calls, as a UI following it would. */
const READ_EVERY = 25;
const PAGE_WARMUP = 20;
const PAGE_ROUNDS = 4;
const PAGE_PER_ROUND = 50;
const TARGET_GROWTH = 1.25;
const TARGET_DELAY_MS = 50;
const TARGET_PAGE_RATIO = 0.5;

interface Window {
  calls: number;
  p50: number;
  p99: number;
  readP50: number;
  health: ServerHealth;
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

async function post(port: number, events: object[]): Promise<number> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/runs/${RUN_ID}/events`, {
    method: 'POST',
    headers: HEADERS,
    body: JSON.stringify({ events }),
  });
  const body = (await response.json()) as { position?: number };
  if (response.status !== 201 || body.position === undefined) {
    throw new Error(`append answered ${response.status}: ${JSON.stringify(body)}`);
  }
  return body.position;
}

async function fetchPage(port: number, query: string): Promise<{ status: number; body: string }> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/threads/${THREAD_ID}${query}`, {
    headers: HEADERS,
  });
  return { status: response.status, body: await response.text() };
}

async function getPage(port: number, query = ''): Promise<string> {
  const { status, body } = await fetchPage(port, query);
  if (status !== 200) throw new Error(`thread page answered ${status}: ${body}`);
  return body;
}

/**
 * Waits until the projector, whose worker thread starts with the server, has folded
 * `position`: on a loaded host its start can outlast the read-your-writes wait (503
 * `projection_behind`), and the soak times the thread's growth, not the server's start.
 */
async function untilProjected(port: number, position: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const { status, body } = await fetchPage(port, `?minPosition=${position}`);
    if (status === 200) return;
    if (status !== 503 || Date.now() > deadline) {
      throw new Error(`thread page answered ${status}: ${body}`);
    }
  }
}

/** Grows the thread; answers each window's figures and the position of the last append. */
async function grow(server: ChildServer): Promise<{ windows: Window[]; position: number }> {
  const started = await post(server.port, [
    { type: 'run.started', data: { threadId: THREAD_ID, agent: 'soak', source: 'api' } },
  ]);
  await untilProjected(server.port, started);
  // Asking for the health resets its figures: the first window starts here.
  await server.health();
  const windows: Window[] = [];
  let latencies: number[] = [];
  let reads: number[] = [];
  let position = 0;
  for (let call = 0; call < CALLS; call += 1) {
    const toolCallId = `call-${call}`;
    let started = performance.now();
    await post(server.port, [
      { type: 'tool.started', data: { toolCallId, toolName: 'read_file', input: { call } } },
    ]);
    latencies.push(performance.now() - started);
    started = performance.now();
    position = await post(server.port, [
      { type: 'tool.finished', data: { toolCallId, failed: false, output: OUTPUT } },
    ]);
    latencies.push(performance.now() - started);
    if (call % READ_EVERY === 0) {
      started = performance.now();
      await getPage(server.port, `?minPosition=${position}`);
      reads.push(performance.now() - started);
    }
    if ((call + 1) % WINDOW === 0) {
      const window = {
        calls: call + 1,
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        readP50: percentile(reads, 50),
        health: await server.health(),
      };
      windows.push(window);
      console.log(
        `${count(window.calls)} calls: append p50 ${ms(window.p50)} p99 ${ms(window.p99)}, page p50 ${ms(window.readP50)}, loop max ${ms(window.health.eventLoopDelayMaxMs)}, RSS ${mib(window.health.rssBytes)}`,
      );
      latencies = [];
      reads = [];
    }
  }
  return { windows, position };
}

async function timePages(port: number, requests: number, expected: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < requests; i += 1) {
    const started = performance.now();
    const body = await fetch(`http://127.0.0.1:${port}/v1/threads/${THREAD_ID}`, {
      headers: HEADERS,
    }).then((response) => response.text());
    times.push(performance.now() - started);
    if (Buffer.byteLength(body) !== expected) {
      throw new Error(`page answered ${Buffer.byteLength(body)} bytes, expected ${expected}`);
    }
  }
  return times;
}

async function comparePages(
  service: ChildServer,
  dir: string,
  grownTo: number,
): Promise<{ bytes: number; service: number[]; bare: number[] }> {
  // The projection may still be folding the last appends: the page is read once it has them.
  const body = await getPage(service.port, `?minPosition=${grownTo}`);
  const file = join(dir, 'bodies.json');
  writeFileSync(file, JSON.stringify({ threads: { [THREAD_ID]: body }, seeds: {} }));
  const bare = await startChildServer(join(__dirname, 'servers', 'static-thread.server.ts'), {
    BENCH_BODIES_FILE: file,
  });
  const bytes = Buffer.byteLength(body);
  try {
    await timePages(service.port, PAGE_WARMUP, bytes);
    await timePages(bare.port, PAGE_WARMUP, bytes);
    const times = { service: [] as number[], bare: [] as number[] };
    for (let round = 0; round < PAGE_ROUNDS; round += 1) {
      times.bare.push(...(await timePages(bare.port, PAGE_PER_ROUND, bytes)));
      times.service.push(...(await timePages(service.port, PAGE_PER_ROUND, bytes)));
    }
    return { bytes, ...times };
  } finally {
    await bare.stop();
  }
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

async function run(): Promise<Section> {
  if (!Number.isInteger(CALLS / WINDOW) || CALLS < WINDOW) {
    throw new Error(`BENCH_SOAK_CALLS must be a multiple of ${WINDOW}, got ${CALLS}`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'runledger-bench-soak-'));
  const service = await startChildServer(join(__dirname, 'servers', 'runledger.server.ts'), {
    BENCH_DATA_DIR: dir,
    BENCH_API_KEYS: API_KEYS,
  });
  let windows: Window[];
  let pages: Awaited<ReturnType<typeof comparePages>>;
  try {
    const started = performance.now();
    const grown = await grow(service);
    windows = grown.windows;
    console.log(`grown in ${((performance.now() - started) / 1000).toFixed(0)} s`);
    pages = await comparePages(service, dir, grown.position);
  } finally {
    await service.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const first = windows[0];
  const last = windows[windows.length - 1];
  const worstDelay = Math.max(...windows.map((w) => w.health.eventLoopDelayMaxMs));
  const worstHeld = Math.max(...windows.map((w) => w.health.heldMaxMs));
  const servicePerSecond = 1000 / median(pages.service);
  const barePerSecond = 1000 / median(pages.bare);
  const pageRatio = servicePerSecond / barePerSecond;
  return {
    name: 'soak',
    title: `Long thread soak: one thread grown to ${count(CALLS)} tool calls (8 KB outputs) through the api`,
    measuredAt: new Date().toISOString(),
    machine: describeMachine(),
    revision: codeRevision(),
    method: [
      `The real service (bench/servers/runledger.server.ts: \`createApp\`, SQLite with synchronous=FULL; the projector and the log's commits each in a worker thread of the same process, as by default) in a child process. One run in one thread; for each call the bench appends \`tool.started\` and then \`tool.finished\` with an 8 KB output, one event per request, sequentially from Node's fetch; every ${READ_EVERY}th call it reads the thread's newest page with \`?minPosition=\` of its last append, so the projection is kept honest. A window is ${count(WINDOW)} calls (${count(2 * WINDOW)} appends). At each window's end the server reports its worst event-loop delay since the last window (perf_hooks.monitorEventLoopDelay, 10 ms resolution, in the server process) and its RSS. On a shared host that delay includes time the OS gave to other processes, so the server also reports the longest the loop was held by its own work: each late tick of a 10 ms timer counted at most as the time its event loop was busy meanwhile (event-loop utilization, which leaves out the worker threads).`,
      `Page: once grown, \`GET /v1/threads/{id}\` (header and the newest 50 messages) against bare Fastify answering the very same bytes from a child process of its own (bench/servers/static-thread.server.ts); ${PAGE_WARMUP} warm-up requests each, then ${PAGE_ROUNDS} alternating rounds of ${PAGE_PER_ROUND} sequential requests; requests/s is 1 / median latency.`,
    ],
    table: {
      columns: [
        'Calls',
        'Append p50',
        'Append p99',
        'Page read p50',
        'Event-loop delay max',
        'Event-loop delay p99',
        'Loop held by own work, max',
        'RSS',
        'Heap used',
      ],
      rows: [
        ...windows.map((w) => [
          count(w.calls),
          ms(w.p50),
          ms(w.p99),
          ms(w.readP50),
          ms(w.health.eventLoopDelayMaxMs),
          ms(w.health.eventLoopDelayP99Ms),
          ms(w.health.heldMaxMs),
          mib(w.health.rssBytes),
          mib(w.health.heapUsedBytes),
        ]),
        [
          'page vs bare Fastify',
          `runledger p50 ${ms(median(pages.service))}`,
          `bare p50 ${ms(median(pages.bare))}`,
          `${count(pages.bytes)} bytes`,
          '',
          '',
          '',
          '',
          ratio(pageRatio),
        ],
      ],
    },
    targets: [
      {
        subject: `append p50, last ${count(WINDOW)}-call window vs the first`,
        target: `≤ ${TARGET_GROWTH}×`,
        measured: `${ratio(last.p50 / first.p50)} (${ms(last.p50)} vs ${ms(first.p50)})`,
        met: last.p50 / first.p50 <= TARGET_GROWTH,
      },
      {
        subject: `append p99, last ${count(WINDOW)}-call window vs the first`,
        target: `≤ ${TARGET_GROWTH}×`,
        measured: `${ratio(last.p99 / first.p99)} (${ms(last.p99)} vs ${ms(first.p99)})`,
        met: last.p99 / first.p99 <= TARGET_GROWTH,
      },
      {
        subject: 'worst event-loop delay of the server while the thread grew',
        target: `≤ ${TARGET_DELAY_MS} ms`,
        measured: ms(worstDelay),
        met: worstDelay <= TARGET_DELAY_MS,
      },
      {
        subject:
          'longest the server held its event loop with its own work (busy-time-charged, see method)',
        target: `≤ ${TARGET_DELAY_MS} ms`,
        measured: ms(worstHeld),
        met: worstHeld <= TARGET_DELAY_MS,
      },
      {
        subject: `thread page of a ${count(CALLS)}-call thread vs bare Fastify, same bytes`,
        target: `≥ ${TARGET_PAGE_RATIO}× requests/s`,
        measured: `${ratio(pageRatio)} (${count(servicePerSecond)} vs ${count(barePerSecond)} requests/s)`,
        met: pageRatio >= TARGET_PAGE_RATIO,
      },
    ],
    notes: [
      `RSS of the server after ${count(CALLS)} calls: ${mib(last.health.rssBytes)} (heap used ${mib(last.health.heapUsedBytes)}); after the first window: ${mib(first.health.rssBytes)} (heap used ${mib(first.health.heapUsedBytes)}). No read-model cache holds a thread: the projector reads the rows it folds into, and SQLite's page cache for the read models is bounded at 32 MiB. Heap used is sampled without forcing a collection, so it includes garbage not yet collected.`,
      ...(CALLS < 10_000
        ? [
            `This run grew the thread to ${count(CALLS)} calls (BENCH_SOAK_CALLS), not the full 10,000.`,
          ]
        : []),
    ],
  };
}

export const soakBench: Bench = { name: 'soak', order: 45, run };
