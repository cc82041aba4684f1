/**
 * Runs a benchmark's server in a child process, so the server has its own event loop and
 * the load generator in the parent is the same for the baseline and for runledger. The
 * child reports its port when listening, its CPU time on request, and stops on request.
 * With BENCH_CPU_PROF=1 the child writes a V8 CPU profile (bench/results/profiles/).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { RESULTS_DIR } from './report';

export type ToServer = { type: 'cpu' } | { type: 'health' } | { type: 'stop' };
export type FromServer =
  | { type: 'listening'; port: number }
  | { type: 'cpu'; usage: NodeJS.CpuUsage; loopActiveMs: number }
  | { type: 'health'; health: ServerHealth };

/** The child's event-loop delay since the last ask (perf_hooks, 10 ms resolution) and memory. */
export interface ServerHealth {
  eventLoopDelayMaxMs: number;
  eventLoopDelayP99Ms: number;
  /**
   * The longest the loop was held by the child's own work: each late tick of a 10 ms timer
   * counted at most as the time the loop was busy meanwhile (its event-loop utilization), so
   * time the OS gave to other processes on a shared host, and the child's worker threads,
   * are left out.
   */
  heldMaxMs: number;
  rssBytes: number;
  heapUsedBytes: number;
}

export interface ChildServer {
  port: number;
  /** The child's cumulative CPU time (user and system, µs; every thread). */
  cpuUsage(): Promise<NodeJS.CpuUsage>;
  /** How long the child's main event loop has been busy (not waiting for I/O), ms. */
  loopActiveMs(): Promise<number>;
  /** The child's event-loop delay since the last call, and its memory now. */
  health(): Promise<ServerHealth>;
  stop(): Promise<void>;
}

export const PROFILE_DIR = join(RESULTS_DIR, 'profiles');

export function startChildServer(
  script: string,
  env: Record<string, string>,
): Promise<ChildServer> {
  const profile = process.env.BENCH_CPU_PROF === '1';
  if (profile) mkdirSync(PROFILE_DIR, { recursive: true });
  const child = fork(script, [], {
    // The parent's own loaders (ts-node, tsconfig-paths), so the child runs the .ts sources.
    execArgv: [
      ...process.execArgv,
      ...(profile ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []),
    ],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise<ChildServer>((resolve, reject) => {
    const onExit = (code: number | null) =>
      reject(new Error(`${script} exited with ${code} before listening`));
    child.once('error', reject);
    child.once('exit', onExit);
    child.once('message', (message: FromServer) => {
      child.off('exit', onExit);
      if (message.type !== 'listening') {
        reject(new Error(`${script} sent ${message.type} before listening`));
        return;
      }
      resolve({
        port: message.port,
        cpuUsage: () => askCpu(child).then((answer) => answer.usage),
        loopActiveMs: () => askCpu(child).then((answer) => answer.loopActiveMs),
        health: () => askHealth(child),
        stop: () => stopChild(child),
      });
    });
  });
}

function askCpu(child: ChildProcess): Promise<{ usage: NodeJS.CpuUsage; loopActiveMs: number }> {
  return new Promise((resolve) => {
    const onMessage = (message: FromServer) => {
      if (message.type !== 'cpu') return;
      child.off('message', onMessage);
      resolve(message);
    };
    child.on('message', onMessage);
    child.send({ type: 'cpu' } satisfies ToServer);
  });
}

function askHealth(child: ChildProcess): Promise<ServerHealth> {
  return new Promise((resolve) => {
    const onMessage = (message: FromServer) => {
      if (message.type !== 'health') return;
      child.off('message', onMessage);
      resolve(message.health);
    };
    child.on('message', onMessage);
    child.send({ type: 'health' } satisfies ToServer);
  });
}

function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    if (child.exitCode !== null) {
      resolve();
      return;
    }
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`server child exited with ${code}`));
    });
    child.send({ type: 'stop' } satisfies ToServer);
  });
}

/** The child's side: answers the parent's messages; `stop` closes the server, then exits. */
export function serveParent(port: number, close: () => Promise<void>): void {
  const send = (message: FromServer) => process.send?.(message);
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  let heldMaxMs = 0;
  let lastTick = performance.now();
  let lastLoop = performance.eventLoopUtilization();
  setInterval(() => {
    const now = performance.now();
    const loop = performance.eventLoopUtilization(lastLoop);
    heldMaxMs = Math.max(heldMaxMs, Math.min(now - lastTick - 10, loop.active));
    lastTick = now;
    lastLoop = performance.eventLoopUtilization();
  }, 10).unref();
  process.on('message', (message: ToServer) => {
    if (message.type === 'cpu')
      send({
        type: 'cpu',
        usage: process.cpuUsage(),
        loopActiveMs: performance.eventLoopUtilization().active,
      });
    else if (message.type === 'health') {
      const memory = process.memoryUsage();
      send({
        type: 'health',
        health: {
          eventLoopDelayMaxMs: delay.max / 1e6,
          eventLoopDelayP99Ms: delay.percentile(99) / 1e6,
          heldMaxMs,
          rssBytes: memory.rss,
          heapUsedBytes: memory.heapUsed,
        },
      });
      delay.reset();
      heldMaxMs = 0;
    } else
      void close().then(
        () => process.exit(0),
        (error: unknown) => {
          console.error('closing the bench server failed:', error);
          process.exit(1);
        },
      );
  });
  // Orphaned (the parent died): exit rather than linger.
  process.on('disconnect', () => process.exit(0));
  send({ type: 'listening', port });
}
