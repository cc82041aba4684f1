/**
 * Starts the built api service (dist/) as a child process, the way an operator would, and
 * talks to it over HTTP. Every process and temporary data directory made here is removed
 * after the test file (jest afterAll), and killed if the test runner itself exits.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CONFIG_VARIABLES } from '../../services/api/src/config/config';

export const REPO_ROOT = resolve(__dirname, '..', '..');
export const SERVICE_MAIN = join(REPO_ROOT, 'dist', 'services', 'api', 'src', 'main.js');
/** The standalone mirror service (`npm run start:mirror`). */
export const MIRROR_MAIN = join(REPO_ROOT, 'dist', 'services', 'mirror', 'src', 'main.js');

const READY_LINE = /runledger listening on (http:\/\/\S+)/;
const DEFAULT_READY_TIMEOUT_MS = 20_000;
/** How much of each output stream an error message quotes. */
const QUOTED_OUTPUT = 6_000;

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Variables for the child; `undefined` unsets one. */
export type ServiceEnv = Record<string, string | undefined>;

const live = new Set<ServiceProcess>();
const tempDirs = new Set<string>();

/** A started (or starting) service process and everything it printed. */
export class ServiceProcess {
  readonly exited: Promise<Exit>;
  private out = '';
  private err = '';
  private exit: Exit | null = null;
  private readonly waiters = new Set<() => void>();

  constructor(
    readonly child: ChildProcess,
    readonly env: ServiceEnv,
  ) {
    child.stdout?.setEncoding('utf8');
    child.stderr?.setEncoding('utf8');
    child.stdout?.on('data', (chunk: string) => {
      this.out += chunk;
      this.notify();
    });
    child.stderr?.on('data', (chunk: string) => {
      this.err += chunk;
      this.notify();
    });
    this.exited = new Promise<Exit>((resolveExit) => {
      // 'close' rather than 'exit': by then all the output has been read.
      child.once('close', (code, signal) => {
        this.exit = { code, signal };
        live.delete(this);
        this.notify();
        resolveExit(this.exit);
      });
      child.once('error', (error) => {
        this.err += `\n[spawn error] ${String(error)}\n`;
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get stdout(): string {
    return this.out;
  }

  get stderr(): string {
    return this.err;
  }

  get hasExited(): boolean {
    return this.exit !== null;
  }

  /** stdout and stderr, the tail of each, for an error message. */
  describeOutput(): string {
    const tail = (text: string) =>
      text.length > QUOTED_OUTPUT ? `…${text.slice(-QUOTED_OUTPUT)}` : text;
    return `--- stdout ---\n${tail(this.out)}\n--- stderr ---\n${tail(this.err)}`;
  }

  /**
   * Resolves with the first stdout line matching `pattern`; rejects when the process exits
   * first or `timeoutMs` passes, quoting what it printed.
   */
  waitForLine(pattern: RegExp, timeoutMs = DEFAULT_READY_TIMEOUT_MS): Promise<RegExpMatchArray> {
    return new Promise((resolveLine, reject) => {
      const check = () => {
        const match = this.out
          .split('\n')
          .map((line) => pattern.exec(line))
          .find((m): m is RegExpExecArray => m !== null);
        if (match) {
          done();
          resolveLine(match);
        } else if (this.exit) {
          done();
          reject(
            new Error(
              `service (pid ${this.pid}) exited with code ${this.exit.code}, signal ${this.exit.signal} ` +
                `before printing a line matching ${pattern}\n${this.describeOutput()}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(
          new Error(
            `service (pid ${this.pid}) printed no line matching ${pattern} within ${timeoutMs} ms\n${this.describeOutput()}`,
          ),
        );
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  /**
   * Sends `signal` and resolves once the process has exited. A signal other than SIGKILL
   * that does not stop the process within `escalateAfterMs` is followed by SIGKILL.
   */
  async kill(signal: NodeJS.Signals = 'SIGTERM', escalateAfterMs = 15_000): Promise<Exit> {
    if (this.exit) return this.exit;
    this.child.kill(signal);
    if (signal === 'SIGKILL') return this.exited;
    let timer: NodeJS.Timeout | undefined;
    const escalation = new Promise<void>((resolveTimer) => {
      timer = setTimeout(resolveTimer, escalateAfterMs);
    });
    const exit = await Promise.race([this.exited, escalation.then(() => null)]);
    clearTimeout(timer);
    if (exit) return exit;
    this.child.kill('SIGKILL');
    return this.exited;
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}

/** A started service, listening. */
export interface RunningService {
  process: ServiceProcess;
  baseUrl: string;
  port: number;
  dataDir: string;
  kill(signal?: NodeJS.Signals): Promise<Exit>;
}

export function assertBuilt(main = SERVICE_MAIN): void {
  if (!existsSync(main)) {
    throw new Error(
      `${main} does not exist: the e2e tests run the built service. ` +
        'Build it first with `npm run build` (`npm test` and `npm run test:e2e` do so).',
    );
  }
}

/** A fresh directory under the OS temp dir, removed after the test file. */
export function makeTempDir(prefix = 'runledger-e2e-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

/** A port that was free a moment ago: bound on port 0, read, released. */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port > 0 ? resolvePort(port) : reject(new Error('no port assigned'))));
    });
  });
}

/**
 * Spawns the built service (the api, or `main`) with exactly the given service variables;
 * does not wait for it.
 */
export function spawnService(env: ServiceEnv, main = SERVICE_MAIN): ServiceProcess {
  assertBuilt(main);
  const childEnv: NodeJS.ProcessEnv = { ...process.env };
  // Every variable the service reads: none leaks in from the runner.
  for (const name of CONFIG_VARIABLES) delete childEnv[name];
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) delete childEnv[name];
    else childEnv[name] = value;
  }
  const child = spawn(process.execPath, [main], {
    cwd: REPO_ROOT,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const service = new ServiceProcess(child, env);
  live.add(service);
  return service;
}

export interface StartOptions {
  dataDir: string;
  /** RUNLEDGER_API_KEYS; `undefined` leaves it unset (the service then provisions a dev key). */
  apiKeys: string | undefined;
  /** More variables (LOG_LEVEL, SQLITE_SYNCHRONOUS, ...); they override the defaults here. */
  env?: ServiceEnv;
  readyTimeoutMs?: number;
}

/**
 * Starts the built service on 127.0.0.1 and a free port, and resolves once it prints its
 * "listening on" line. Choosing a free port can race with another process; a start that
 * fails with EADDRINUSE is retried on another port.
 */
export async function startService(options: StartOptions): Promise<RunningService> {
  for (let attempt = 1; ; attempt += 1) {
    const port = await freePort();
    const service = spawnService({
      HOST: '127.0.0.1',
      PORT: String(port),
      DATA_DIR: options.dataDir,
      RUNLEDGER_API_KEYS: options.apiKeys,
      LOG_LEVEL: 'warn',
      // These tests are about durability and start-up, not budgets: one key starts many runs.
      RATE_LIMIT_CALLS: '100000',
      RATE_LIMIT_COSTLY: '100000',
      ...options.env,
    });
    try {
      const [, url] = await service.waitForLine(
        READY_LINE,
        options.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS,
      );
      const baseUrl = url.replace(/\/+$/, '');
      if (new URL(baseUrl).port !== String(port)) {
        throw new Error(
          `service says it listens on ${baseUrl}, but was started with PORT=${port}\n${service.describeOutput()}`,
        );
      }
      return {
        process: service,
        baseUrl,
        port,
        dataDir: options.dataDir,
        kill: (signal) => service.kill(signal),
      };
    } catch (error) {
      await service.kill('SIGKILL');
      if (attempt < 3 && /EADDRINUSE/.test(service.stderr + service.stdout)) continue;
      throw error;
    }
  }
}

/** Runs the built service until it exits on its own (or `timeoutMs` passes, which fails). */
export async function runUntilExit(
  env: ServiceEnv,
  timeoutMs = DEFAULT_READY_TIMEOUT_MS,
): Promise<Exit & { stdout: string; stderr: string }> {
  const service = spawnService(env);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolveTimeout) => {
    timer = setTimeout(() => resolveTimeout(null), timeoutMs);
  });
  const exit = await Promise.race([service.exited, timeout]);
  clearTimeout(timer);
  if (!exit) {
    await service.kill('SIGKILL');
    throw new Error(
      `service (pid ${service.pid}) was expected to exit but still ran after ${timeoutMs} ms\n${service.describeOutput()}`,
    );
  }
  return { ...exit, stdout: service.stdout, stderr: service.stderr };
}

/** Kills every process started here and removes every temp dir; registered with afterAll. */
export async function cleanUpServices(): Promise<void> {
  await Promise.all([...live].map((service) => service.kill('SIGKILL')));
  if (process.env.RUNLEDGER_E2E_KEEP_DATA === '1') {
    if (tempDirs.size > 0) console.log(`kept e2e data in ${[...tempDirs].join(', ')}`);
  } else {
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  }
  tempDirs.clear();
}

if (typeof afterAll === 'function') afterAll(cleanUpServices, 30_000);

// Should the runner die without running afterAll, no service outlives it.
process.once('exit', () => {
  for (const service of live) service.child.kill('SIGKILL');
});

/** Node's fetch with a bearer key, a JSON body when given, and a generous timeout. */
export async function request(
  baseUrl: string,
  path: string,
  options: { method?: string; key?: string; body?: unknown; timeoutMs?: number } = {},
): Promise<Response> {
  const headers: Record<string, string> = {};
  if (options.key !== undefined) headers.authorization = `Bearer ${options.key}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  return fetch(`${baseUrl}${path}`, {
    method: options.method ?? (options.body === undefined ? 'GET' : 'POST'),
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: AbortSignal.timeout(options.timeoutMs ?? 30_000),
  });
}
