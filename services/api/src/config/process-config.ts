/**
 * What every runledger process does first: read the configuration, stopping with a message
 * that names the variable when a value is bad, and log as JSON lines at LOG_LEVEL.
 */
import { ConsoleLogger, Logger, type LogLevel } from '@nestjs/common';
import { isPlainObject } from '@runledger/domain';
import { openEventStoreWhenReady, type EventStore, type StoreWait } from '@runledger/event-store';
import { currentRequest } from '../http/request-context';
import { ConfigError, loadConfig, type AppConfig } from './config';

const LEVELS = ['error', 'warn', 'log', 'debug', 'verbose'] as const;

export function loadConfigOrExit(program: string): AppConfig {
  try {
    return loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`${program}: ${error.message}`);
      process.exit(1);
    }
    throw error;
  }
}

/**
 * A start-up step that failed on a setting the operator gave (`setting`: `DATA_DIR=/x`), with
 * an error of the operating system's (a port in use, a path that is a file): one line naming
 * the setting, and the process exits 1. Anything else is not the operator's and is thrown.
 */
export function exitOnSetting(program: string, setting: string, error: unknown): never {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  if (!(error instanceof Error) || typeof code !== 'string') throw error;
  console.error(`${program} failed to start: ${setting} cannot be used: ${error.message}`);
  process.exit(1);
}

/**
 * JSON lines, every level on one stream: a collector reading it misses no error line. Nest's
 * own console logger sends errors to stderr and the rest to stdout.
 */
export class JsonLinesLogger extends ConsoleLogger {
  constructor(
    context: string,
    private readonly stream: 'stdout' | 'stderr',
    logLevels: LogLevel[] = [...LEVELS],
  ) {
    super(context, { json: true, colors: false, logLevels });
  }

  protected override printMessages(
    messages: unknown[],
    context?: string,
    logLevel?: LogLevel,
    _writeStreamType?: 'stdout' | 'stderr',
    errorStack?: unknown,
  ): void {
    // A line written for a request names it, as its answer's X-Request-Id does.
    const request = currentRequest();
    const named =
      request === undefined
        ? messages
        : messages.map((message) =>
            isPlainObject(message) && !('requestId' in message)
              ? { ...message, requestId: request.requestId }
              : message,
          );
    super.printMessages(named, context, logLevel, this.stream, errorStack);
  }
}

/** The service's log: JSON lines on stdout at LOG_LEVEL. */
export function jsonLogger(program: string, config: AppConfig): ConsoleLogger {
  return new JsonLinesLogger(
    program,
    'stdout',
    LEVELS.slice(0, LEVELS.indexOf(config.logLevel) + 1),
  );
}

/**
 * The configured store, once it answers: a service started beside KurrentDB waits up to
 * STORE_STARTUP_TIMEOUT_MS for it, saying so at each retry, instead of exiting.
 */
export function openConfiguredStore(
  config: AppConfig,
  role: 'appender' | 'reader',
): Promise<EventStore> {
  const logger = new Logger('EventStore');
  const wait: StoreWait = {
    timeoutMs: config.storeStartupTimeoutMs,
    onRetry: ({ attempt, delayMs, error }) =>
      logger.warn(
        `the event store is not answering (attempt ${attempt}): ${error.message}; retrying in ${delayMs} ms`,
      ),
  };
  const writer = role === 'appender' && config.backgroundThreads === 'on' ? 'thread' : 'inline';
  return openEventStoreWhenReady({ ...config, sqliteWriter: writer }, wait);
}
