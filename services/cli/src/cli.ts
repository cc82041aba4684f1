/**
 * The `runledger` command: an operator's tools over the same store and configuration as the
 * service (the same environment variables). Arguments are parsed with util.parseArgs; every
 * outcome has its own exit code, listed in the help.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ChainVerifier, RUN_STREAM_PREFIX, runStream } from '@runledger/domain';
import { openEventStore, SQLITE_FILE, type EventStore } from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import { OFF_LOOP_BATCHING, Projector, ReadModelStore } from '@runledger/projections';
import {
  ConfigError,
  loadConfig,
  parseApiKeys,
  SCOPES,
  type AppConfig,
} from '../../api/src/config/config';
import { DataDirInUseError, DataDirLock } from '../../api/src/config/data-dir-lock';
import { RunLogService, assertRunId, type RunVerdict } from '../../api/src/runs/run-log.service';
import { SURFACE_FILE } from '../../api/src/surface/surface.service';
import { SurfaceStore } from '../../api/src/surface/surface.store';
import { READ_MODELS_FILE } from '../../api/src/threads/projections.service';
import { Progress, type ProgressSink } from './progress';

export const EXIT = {
  ok: 0,
  /** The work ran and found a problem (a broken chain) or failed (a rebuild that stopped). */
  failed: 1,
  /** Bad arguments or configuration: nothing was done. */
  usage: 2,
  notFound: 3,
  /** The data directory is held by a running service: nothing was done. */
  inUse: 4,
  /** Whoever read the output stopped reading it (a pipe to `head`): 128 + SIGPIPE, as a shell reports one. */
  outputClosed: 141,
} as const;

export interface CliIo {
  stdout: ProgressSink & { once?: NodeJS.WritableStream['once'] };
  stderr: ProgressSink;
  env: NodeJS.ProcessEnv;
}

class UsageError extends Error {}

const EXIT_CODES = `Exit codes:
  0  done (verify: the chain verified)
  1  the chain is broken, or the work failed
  2  bad arguments or configuration; nothing was done
  3  the run does not exist
  4  the data directory is in use by a running service; nothing was done
  141  the output was closed before it was all written (a pipe to head)`;

const MAIN_HELP = `runledger: operator tools for a runledger store

Usage: runledger <command> [options]

Commands:
  replay <runId>    print every recorded event of a run as NDJSON, one event a line
                    (--tenant <tenantId>, default dev: runs are named within their tenant)
  verify <runId>    recompute a run's hash chain; print the verdict as JSON
  rebuild           drop the read models in DATA_DIR and rebuild them from the log
  keys              generate an API key entry for RUNLEDGER_API_KEYS

Options:
  -h, --help        show help (also: runledger <command> --help)
  -v, --version     print the version

The store and settings come from the same environment variables as the service
(DATA_DIR, EVENTSTORE_URL, ...; see docs/configuration.md).

${EXIT_CODES}`;

type Values = ReturnType<typeof parseArgs>['values'];

interface Command {
  help: string;
  options: NonNullable<ParseArgsConfig['options']>;
  positionals: string[];
  run(values: Values, args: string[], io: CliIo): Promise<number>;
}

/** Runs are named within their tenant; the embedded default's development tenant is `dev`. */
const TENANT_OPTION = { tenant: { type: 'string' as const, default: 'dev' } };

const COMMANDS: Record<string, Command> = {
  replay: {
    help: `Usage: runledger replay <runId> [--tenant <tenantId>]

Prints every recorded event of the run to stdout, oldest first, as NDJSON: the same
lines as GET /v1/runs/{runId}/replay. Pipe it to a file for an audit copy. The hash chain
is recomputed as the lines go out; when it is broken, a last line holds the verdict (as
verify prints it), stderr names the first broken revision, and the exit code is 1.

${EXIT_CODES}`,
    options: TENANT_OPTION,
    positionals: ['runId'],
    run: (values, [runId], io) => withRun(runId, tenantOf(values), io, replay),
  },
  verify: {
    help: `Usage: runledger verify <runId> [--tenant <tenantId>]

Recomputes the run's hash chain from the log and prints the verdict as JSON:
{ runId, count, headHash, verified, firstBrokenRevision }. Progress goes to stderr.

${EXIT_CODES}`,
    options: TENANT_OPTION,
    positionals: ['runId'],
    run: (values, [runId], io) => withRun(runId, tenantOf(values), io, verify),
  },
  rebuild: {
    help: `Usage: runledger rebuild

Drops every read model in DATA_DIR and rebuilds the thread views from the log; the client
surface's (notifications, who each thread is for, channel bindings) is refolded by the
service when it next starts, and notifications it already published are not published
again. Refuses (exit 4) while a service holds DATA_DIR: stop the service first. On a
terminal, a progress bar with rate and ETA; otherwise JSON lines. The service also rebuilds
an empty read store by itself at start-up.

${EXIT_CODES}`,
    options: {},
    positionals: [],
    run: (_values, _args, io) => rebuild(logConfigFrom(io), io),
  },
  keys: {
    help: `Usage: runledger keys --tenant <tenantId> [--scopes append,read]

Prints one new RUNLEDGER_API_KEYS entry, key=tenant:scopes, with a random 256-bit key.
Join entries with ";". Scopes: ${SCOPES.join(', ')} (default: append,read).

${EXIT_CODES}`,
    options: { tenant: { type: 'string' }, scopes: { type: 'string', default: 'append,read' } },
    positionals: [],
    run: async (values, _args, io) => {
      if (typeof values.tenant !== 'string') throw new UsageError('keys needs --tenant <tenantId>');
      const entry = `${randomBytes(32).toString('base64url')}=${values.tenant}:${String(values.scopes)}`;
      try {
        parseApiKeys(entry);
      } catch (error) {
        if (error instanceof ConfigError) throw new UsageError(error.problems.join('; '));
        throw error;
      }
      io.stdout.write(`${entry}\n`);
      return EXIT.ok;
    },
  },
};

export async function runCli(argv: string[], io: CliIo): Promise<number> {
  try {
    return await dispatch(argv, io);
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr.write(`runledger: ${error.message}\nRun \`runledger --help\` for usage.\n`);
      return EXIT.usage;
    }
    if (error instanceof ConfigError) {
      io.stderr.write(`runledger: ${error.message}\n`);
      return EXIT.usage;
    }
    if (error instanceof DataDirInUseError) {
      io.stderr.write(`runledger: ${error.message}\n`);
      return EXIT.inUse;
    }
    throw error;
  }
}

async function dispatch(argv: string[], io: CliIo): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '-h' || name === '--help' || name === 'help') {
    io.stdout.write(`${MAIN_HELP}\n`);
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  if (name === '-v' || name === '--version') {
    io.stdout.write(`${version()}\n`);
    return EXIT.ok;
  }
  const command = COMMANDS[name];
  if (!command) throw new UsageError(`unknown command "${name}"`);
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: rest,
      options: { ...command.options, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    throw new UsageError(`${name}: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (parsed.values.help) {
    io.stdout.write(`${command.help}\n`);
    return EXIT.ok;
  }
  if (parsed.positionals.length !== command.positionals.length) {
    const wanted = command.positionals.map((p) => `<${p}>`).join(' ') || 'no arguments';
    throw new UsageError(`${name} takes ${wanted}; got ${parsed.positionals.length} argument(s)`);
  }
  return command.run(parsed.values, parsed.positionals, io);
}

function version(): string {
  // dist/services/cli/src → the package root, as in the repository.
  const file = join(__dirname, '..', '..', '..', '..', 'package.json');
  return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
}

function tenantOf(values: Values): string {
  return String(values.tenant);
}

function configFrom(io: CliIo): AppConfig {
  return loadConfig(io.env);
}

/**
 * The configuration of a command that reads the log: with SQLite, DATA_DIR must hold one.
 * Opened regardless, a mistyped DATA_DIR became an empty store, and the command answered
 * "not found", or a rebuild of nothing, as if that were the service's store.
 */
function logConfigFrom(io: CliIo): AppConfig {
  const config = configFrom(io);
  if (config.eventStoreUrl === undefined && !existsSync(join(config.dataDir, SQLITE_FILE))) {
    throw new ConfigError([
      `DATA_DIR=${config.dataDir} holds no runledger log (${SQLITE_FILE}): set DATA_DIR to the service's data directory`,
    ]);
  }
  return config;
}

async function withRun(
  runId: string,
  tenantId: string,
  io: CliIo,
  work: (run: RunRef, io: CliIo) => Promise<number>,
): Promise<number> {
  try {
    assertRunId(runId);
  } catch {
    throw new UsageError(`"${runId}" is not a run id (letters, digits, ".", "_", ":" and "-")`);
  }
  const config = logConfigFrom(io);
  const store = openEventStore(config);
  try {
    const [first] = await store.readStream(runStream(tenantId, runId), { maxCount: 1 });
    if (!first) {
      io.stderr.write(
        `runledger: run ${runId} of tenant ${tenantId} not found in ${config.eventStoreUrl ?? config.dataDir}\n`,
      );
      return EXIT.notFound;
    }
    const runLog = new RunLogService(store, config, new Metrics());
    return await work({ runLog, store, tenantId, runId }, io);
  } finally {
    await store.close();
  }
}

interface RunRef {
  runLog: RunLogService;
  store: EventStore;
  tenantId: string;
  runId: string;
}

async function replay({ runLog, tenantId, runId }: RunRef, io: CliIo) {
  const outcome: { verdict?: RunVerdict } = {};
  for await (const line of runLog.replayLines(tenantId, runId, (v) => (outcome.verdict = v))) {
    if (io.stdout.write(line) === false && io.stdout.once) {
      await new Promise((resolve) => io.stdout.once!('drain', resolve));
    }
  }
  const { verified, firstBrokenRevision } = outcome.verdict!;
  if (verified) return EXIT.ok;
  io.stderr.write(
    `replay: the hash chain of run ${runId} breaks at revision ${firstBrokenRevision}\n`,
  );
  return EXIT.failed;
}

async function verify({ runLog, store, tenantId, runId }: RunRef, io: CliIo) {
  const [last] = await store.readStream(runStream(tenantId, runId), {
    direction: 'backwards',
    maxCount: 1,
  });
  const progress = new Progress('verify', 'events', last.revision + 1, io.stderr);
  const verifier = new ChainVerifier(runId);
  let seen = 0;
  for await (const event of runLog.replay(tenantId, runId)) {
    verifier.add(event);
    progress.update(++seen);
  }
  progress.finish();
  const verdict = { runId, ...verifier.verdict() };
  io.stdout.write(`${JSON.stringify(verdict)}\n`);
  return verdict.verified ? EXIT.ok : EXIT.failed;
}

const POLL_MS = 50;

async function rebuild(config: AppConfig, io: CliIo): Promise<number> {
  const lock = DataDirLock.acquire(config.dataDir);
  const log = openEventStore(config);
  const readModels = new ReadModelStore(join(config.dataDir, READ_MODELS_FILE));
  try {
    const target = await log.headPosition({ streamPrefix: RUN_STREAM_PREFIX });
    const unit = config.eventStoreUrl ? 'log bytes' : 'events';
    readModels.clear();
    // Stopped part way, the rebuild is finished by the service's next start, which answers
    // 503 until it has passed this target.
    readModels.startRebuild(target);
    const surface = new SurfaceStore(join(config.dataDir, SURFACE_FILE));
    try {
      surface.clear();
    } finally {
      surface.close();
    }
    const progress = new Progress('rebuild', unit, target, io.stderr);
    let failure: unknown = null;
    let reached = target === 0;
    const projector = new Projector(
      log,
      readModels,
      {
        committed: (_events, position) => {
          progress.update(position);
          if (position >= target) reached = true;
        },
        failed: (error) => {
          failure = error;
        },
      },
      OFF_LOOP_BATCHING,
    );
    projector.start();
    while (!reached && failure === null) await new Promise((r) => setTimeout(r, POLL_MS));
    await projector.stop();
    if (failure !== null) {
      io.stderr.write(
        `runledger: rebuild stopped at position ${projector.current()} of ${target}: ${String(failure)}\n`,
      );
      return EXIT.failed;
    }
    progress.finish();
    io.stdout.write(`${JSON.stringify({ rebuilt: true, position: projector.current() })}\n`);
    return EXIT.ok;
  } finally {
    readModels.close();
    await log.close();
    lock.release();
  }
}
