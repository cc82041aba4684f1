/**
 * The hostile tier: the built service started as a process, attacked the way a stranger (or
 * a careless client) would, on 127.0.0.1 only, every attack bounded in count and time. Each
 * attack is watched for what a user would notice: `/health/live` keeps answering within
 * LIVE_BOUND_MS (the event loop never blocks for long), the process's RSS stays under a
 * stated bound, and the log holds exactly what it held before (or the markers allowed).
 */
import { readFileSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import { Worker } from 'node:worker_threads';
import {
  makeTempDir,
  request,
  startService,
  type RunningService,
  type ServiceEnv,
} from '../support/service-process';

export const KEY = 'hostile-key-tenant-a-0123456789';
export const KEY_2 = 'hostile-key2-tenant-a-0123456789';
export const READER = 'hostile-reader-tenant-a-0123456789';
/** The longest the service may hold its event loop while an attack runs. */
export const LIVE_BOUND_MS = 250;
/**
 * The longest a liveness probe may take, counted at this end (on a thread of its own,
 * PROBE_LOOP): its round trip also holds the scheduling of this process on a busy host, so
 * the loop is judged by the service's own measure and the probe only has to be answered in
 * good time.
 */
export const PROBE_BOUND_MS = 1000;
export const MIB = 1024 * 1024;
/** How often a watch reads the service's own event-loop delay. */
const SCRAPE_MS = 250;
const LOOP_DELAY_MAX = 'runledger_event_loop_delay_seconds{stat="max"}';

/** A series of the service's /metrics (its name, with its labels as exposed); NaN when absent. */
export async function metric(service: RunningService, series: string): Promise<number> {
  const text = await (await request(service.baseUrl, '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? NaN : Number(line.slice(series.length + 1));
}

export async function startHostileService(env: ServiceEnv = {}): Promise<RunningService> {
  return startService({
    dataDir: makeTempDir('runledger-hostile-'),
    apiKeys: `${KEY}=tenant-a:append,read,admin;${KEY_2}=tenant-a:append,read;${READER}=tenant-a:read`,
    env: { SQLITE_SYNCHRONOUS: 'NORMAL', ...env },
    readyTimeoutMs: 30_000,
  });
}

/** Resident set size of a process, from /proc (Linux). */
export function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (!match) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(match[1]) * 1024;
}

export interface Watched {
  /** Liveness probes answered. */
  probes: number;
  /** The slowest probe, in ms (a probe that failed counts as Infinity). */
  slowestProbeMs: number;
  /**
   * The service's own longest event-loop delay while watched, in ms: its
   * runledger_event_loop_delay_seconds{stat="max"}, scraped as the watch starts (which resets
   * it) and every SCRAPE_MS after. A scrape by the test itself in between resets it too.
   */
  serverLoopDelayMaxMs: number;
  failedProbes: string[];
  maxRssBytes: number;
}

/**
 * The probe loop, on a worker thread of its own: this process reads and parses what attacks
 * answer (twenty 12 MB pages at once), and a probe timed on its main thread also timed those
 * parses and the collections of a heap grown over the whole suite (`npm test` runs every
 * suite in one process): probes of 1.0 s under CI while the service's own loop delay stayed
 * within its bound. A worker has its own event loop and heap. One kept-alive connection: a probe
 * measures the service's event loop, not the cost of connecting.
 */
const PROBE_LOOP = `
const { Agent, request } = require('node:http');
const { parentPort, workerData } = require('node:worker_threads');
const agent = new Agent({ keepAlive: true, maxSockets: 1 });
const result = { probes: 0, slowestProbeMs: 0, failedProbes: [] };
let running = true;
parentPort.once('message', () => (running = false));
const probe = () =>
  new Promise((resolve) => {
    const started = performance.now();
    const req = request(workerData.url, { agent }, (res) => {
      res.resume();
      res.on('end', () => {
        result.probes += 1;
        result.slowestProbeMs = Math.max(result.slowestProbeMs, performance.now() - started);
        if (res.statusCode !== 200) result.failedProbes.push('status ' + res.statusCode);
        resolve();
      });
    });
    req.setTimeout(5000, () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', (error) => {
      result.failedProbes.push(String(error));
      result.slowestProbeMs = Infinity;
      resolve();
    });
    req.end();
  });
(async () => {
  while (running) {
    await probe();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  agent.destroy();
  parentPort.postMessage(result);
})();
`;

/**
 * Probes `/health/live` one after another (a probe every 20 ms at most, from PROBE_LOOP's
 * thread) and samples the service's RSS until stopped.
 */
export function watch(service: RunningService): { stop: () => Promise<Watched> } {
  const pid = service.process.pid!;
  const result: Watched = {
    probes: 0,
    slowestProbeMs: 0,
    serverLoopDelayMaxMs: 0,
    failedProbes: [],
    maxRssBytes: 0,
  };
  const scrape = async (count: boolean) => {
    const seconds = await metric(service, LOOP_DELAY_MAX);
    if (Number.isNaN(seconds)) throw new Error(`no ${LOOP_DELAY_MAX} in /metrics`);
    if (count) {
      result.serverLoopDelayMaxMs = Math.max(result.serverLoopDelayMaxMs, seconds * 1000);
    }
  };
  // The first scrape only resets the service's measure: what came before is not the attack's.
  let scraping = scrape(false);
  const scrapeTimer = setInterval(() => {
    scraping = scraping.then(() => scrape(true));
  }, SCRAPE_MS);
  const sampleRss = () => {
    result.maxRssBytes = Math.max(result.maxRssBytes, rssBytes(pid));
  };
  sampleRss();
  const rssTimer = setInterval(sampleRss, 50);
  const prober = new Worker(PROBE_LOOP, {
    eval: true,
    workerData: { url: `${service.baseUrl}/health/live` },
  });
  const probed = new Promise<Pick<Watched, 'probes' | 'slowestProbeMs' | 'failedProbes'>>(
    (resolve, reject) => {
      prober.once('message', resolve);
      prober.once('error', reject);
    },
  );
  return {
    stop: async () => {
      prober.postMessage('stop');
      Object.assign(result, await probed);
      await prober.terminate();
      clearInterval(scrapeTimer);
      await (scraping = scraping.then(() => scrape(true)));
      clearInterval(rssTimer);
      sampleRss();
      return result;
    },
  };
}

/** What a watched attack must leave true: probes answered in time, RSS under the bound. */
export function expectHealthy(watched: Watched, rssBoundBytes: number): void {
  expect(watched.failedProbes).toEqual([]);
  expect(watched.probes).toBeGreaterThan(0);
  expect(watched.serverLoopDelayMaxMs).toBeLessThan(LIVE_BOUND_MS);
  expect(watched.slowestProbeMs).toBeLessThan(PROBE_BOUND_MS);
  expect(watched.maxRssBytes).toBeLessThan(rssBoundBytes);
}

/** Runs `attack` while watching the service; answers the attack's result and what was seen. */
export async function underWatch<T>(
  service: RunningService,
  attack: () => Promise<T>,
): Promise<{ result: T; watched: Watched }> {
  const watcher = watch(service);
  // A few probes first, so the watch covers the whole attack.
  await new Promise((resolve) => setTimeout(resolve, 100));
  try {
    const result = await attack();
    return { result, watched: await watcher.stop() };
  } catch (error) {
    await watcher.stop();
    throw error;
  }
}

export interface RawAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  /** From the first byte sent to the answer's last byte. */
  ms: number;
}

/**
 * POSTs `body` with the given headers on a socket of its own, writing it as the socket takes
 * it, and resolves with the first answer, even one that comes before the body was sent
 * (writing then stops; a server that closed the connection is expected, not an error).
 */
export function postBody(
  service: RunningService,
  path: string,
  headers: Record<string, string | number>,
  body: Buffer,
): Promise<RawAnswer> {
  const head = postHead(path, { 'Content-Length': body.length, ...headers });
  return rawRequest(service, head, body);
}

/**
 * Sends `head` (request line and headers, no blank line) and then `body` as the socket takes
 * it, on a socket of its own, and resolves with the first answer.
 */
export function rawRequest(
  service: RunningService,
  head: string,
  body: string | Buffer = '',
  timeoutMs = 30_000,
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket: Socket = connect(service.port, '127.0.0.1');
    let received = Buffer.alloc(0);
    let answered = false;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const done = (): boolean => {
      if (answered) return true;
      const end = received.indexOf('\r\n\r\n');
      if (end < 0) return false;
      const [statusLine, ...lines] = received.subarray(0, end).toString('utf8').split('\r\n');
      const headers: IncomingHttpHeaders = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      const length = Number(headers['content-length'] ?? NaN);
      const rest = received.subarray(end + 4);
      if (!Number.isFinite(length) || rest.length < length) return false;
      answered = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({
        status: Number(statusLine.split(' ')[1]),
        headers,
        body: rest.subarray(0, length).toString('utf8'),
        ms: performance.now() - started,
      });
      return true;
    };
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      done();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      if (done()) return;
      clearTimeout(timer);
      reject(
        new Error(`connection closed after ${JSON.stringify(received.toString().slice(0, 500))}`),
      );
    });
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    socket.write(`${head}\r\n\r\n`);
    let at = 0;
    const writeMore = () => {
      while (at < bytes.length && !answered && !socket.destroyed) {
        const chunk = bytes.subarray(at, at + 64 * 1024);
        at += chunk.length;
        if (!socket.write(chunk)) {
          socket.once('drain', writeMore);
          return;
        }
      }
    };
    writeMore();
  });
}

export function postHead(path: string, headers: Record<string, string | number>): string {
  return [
    `POST ${path} HTTP/1.1`,
    'Host: 127.0.0.1',
    'Content-Type: application/json',
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ].join('\r\n');
}

/** Starts a run (one `run.started`), answering its id. */
export async function startRun(service: RunningService, runId: string): Promise<void> {
  const res = await request(service.baseUrl, `/v1/runs/${runId}/events`, {
    key: KEY,
    body: {
      events: [
        { type: 'run.started', data: { threadId: `t-${runId}`, agent: 'a', source: 'api' } },
      ],
    },
  });
  if (res.status !== 201)
    throw new Error(`run.started answered ${res.status}: ${await res.text()}`);
}

/** Starts `runId` and appends `events` messages of `textChars` characters, 20 a request. */
export async function startLargeRun(
  service: RunningService,
  runId: string,
  events: number,
  textChars: number,
): Promise<void> {
  await startRun(service, runId);
  const text = 'x'.repeat(textChars);
  for (let at = 0; at < events; at += 20) {
    const batch = Array.from({ length: Math.min(20, events - at) }, (_, i) => ({
      type: 'message.added',
      data: { messageId: `m${at + i}`, role: 'assistant', text },
    }));
    const res = await request(service.baseUrl, `/v1/runs/${runId}/events`, {
      key: KEY,
      body: { events: batch },
    });
    if (res.status !== 201) throw new Error(`append answered ${res.status}`);
  }
}

export interface LogState {
  /** Every run event's position, up to the projector's (which has caught up with the head). */
  position: number;
  /** The run's events: ids and types, in order. */
  events: string[];
}

/**
 * What the log holds, as seen from outside: the run's events, and the projector's position
 * once it has folded them and stopped moving (every event of every run is folded, so it is
 * the log's head).
 */
export async function logState(service: RunningService, runId: string): Promise<LogState> {
  const events: string[] = [];
  let last = 0;
  for (let from = 0; ;) {
    const res = await request(
      service.baseUrl,
      `/v1/runs/${runId}/events?fromRevision=${from}&limit=1000`,
      { key: KEY },
    );
    const page = (
      (await res.json()) as { events: { id: string; type: string; position: number }[] }
    ).events;
    events.push(...page.map((e) => `${e.type} ${e.id}`));
    last = Math.max(last, ...page.map((e) => e.position));
    if (page.length < 1000) break;
    from += page.length;
  }
  // Settled: the projector has folded the run's last event (its thread may still be starting)
  // and then stands still.
  let position = -1;
  for (let i = 0; i < 200; i += 1) {
    const ready = (await (await request(service.baseUrl, '/health/ready')).json()) as {
      projectorPosition: number;
    };
    if (ready.projectorPosition >= last && ready.projectorPosition === position) break;
    position = ready.projectorPosition;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { position, events };
}
