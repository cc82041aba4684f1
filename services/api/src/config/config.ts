/**
 * Every setting of runledger, read from the environment once at start-up and validated
 * against one schema. A bad value stops the process with a message naming the variable
 * and the rule it broke (README "Configuration" lists them all with their defaults).
 */
import 'reflect-metadata';
import { plainToInstance, Transform } from 'class-transformer';
import {
  IsIn,
  IsInt,
  IsOptional,
  IsString,
  Matches,
  Max,
  Min,
  validateSync,
} from 'class-validator';

const toInt = ({ value }: { value: unknown }) =>
  typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value.trim()) : value;

export class EnvironmentSchema {
  @Transform(toInt)
  @IsInt({ message: 'PORT must be an integer between 0 and 65535' })
  @Min(0, { message: 'PORT must be an integer between 0 and 65535' })
  @Max(65535, { message: 'PORT must be an integer between 0 and 65535' })
  PORT = 3000;

  @IsString()
  @Matches(/^\S+$/, { message: 'HOST must be a host name or address' })
  HOST = '127.0.0.1';

  @IsString()
  @Matches(/\S/, { message: 'DATA_DIR must not be blank' })
  DATA_DIR = './data';

  @IsOptional()
  @IsString()
  RUNLEDGER_API_KEYS?: string;

  @IsOptional()
  @Matches(/^(esdb|esdb\+discover|kurrentdb|kurrentdb\+discover|kdb|kdb\+discover):\/\/\S+$/, {
    message: 'EVENTSTORE_URL must be an esdb:// or kurrentdb:// connection string',
  })
  EVENTSTORE_URL?: string;

  @IsIn(['FULL', 'NORMAL'], { message: 'SQLITE_SYNCHRONOUS must be FULL or NORMAL' })
  SQLITE_SYNCHRONOUS: 'FULL' | 'NORMAL' = 'FULL';

  @Transform(toInt)
  @IsInt({ message: 'BODY_MAX_BYTES must be an integer of at least 1024' })
  @Min(1024, { message: 'BODY_MAX_BYTES must be an integer of at least 1024' })
  BODY_MAX_BYTES = 33_554_432;

  @Transform(toInt)
  @IsInt({ message: 'EVENT_MAX_BYTES must be an integer of at least 4096, at most BODY_MAX_BYTES' })
  @Min(4096, {
    message: 'EVENT_MAX_BYTES must be an integer of at least 4096, at most BODY_MAX_BYTES',
  })
  EVENT_MAX_BYTES = 1_048_576;

  @IsOptional()
  @IsString()
  @Matches(/\S/, { message: 'POLICY_FILE must be a path to a JSON or YAML policy file' })
  POLICY_FILE?: string;

  @IsOptional()
  @IsString()
  @Matches(/^\S{32,}$/, { message: 'RECEIPT_SECRET must be at least 32 characters without spaces' })
  RECEIPT_SECRET?: string;

  @Transform(toInt)
  @IsInt({ message: 'RECEIPT_TTL_S must be an integer between 1 and 86400' })
  @Min(1, { message: 'RECEIPT_TTL_S must be an integer between 1 and 86400' })
  @Max(86_400, { message: 'RECEIPT_TTL_S must be an integer between 1 and 86400' })
  RECEIPT_TTL_S = 300;

  @Transform(toInt)
  @IsInt({ message: 'READ_WAIT_MS must be an integer between 0 and 60000' })
  @Min(0, { message: 'READ_WAIT_MS must be an integer between 0 and 60000' })
  @Max(60_000, { message: 'READ_WAIT_MS must be an integer between 0 and 60000' })
  READ_WAIT_MS = 2000;

  @Transform(toInt)
  @IsInt({ message: 'MAX_EVENTS_PER_APPEND must be an integer between 1 and 10000' })
  @Min(1, { message: 'MAX_EVENTS_PER_APPEND must be an integer between 1 and 10000' })
  @Max(10_000, { message: 'MAX_EVENTS_PER_APPEND must be an integer between 1 and 10000' })
  MAX_EVENTS_PER_APPEND = 1000;

  @IsIn(['error', 'warn', 'log', 'debug', 'verbose'], {
    message: 'LOG_LEVEL must be one of error, warn, log, debug, verbose',
  })
  LOG_LEVEL: 'error' | 'warn' | 'log' | 'debug' | 'verbose' = 'log';

  @Transform(toInt)
  @IsInt({ message: 'RATE_LIMIT_WINDOW_MS must be an integer between 1000 and 3600000' })
  @Min(1000, { message: 'RATE_LIMIT_WINDOW_MS must be an integer between 1000 and 3600000' })
  @Max(3_600_000, { message: 'RATE_LIMIT_WINDOW_MS must be an integer between 1000 and 3600000' })
  RATE_LIMIT_WINDOW_MS = 10_000;

  @Transform(toInt)
  @IsInt({ message: 'RATE_LIMIT_CALLS must be an integer between 1 and 100000' })
  @Min(1, { message: 'RATE_LIMIT_CALLS must be an integer between 1 and 100000' })
  @Max(100_000, { message: 'RATE_LIMIT_CALLS must be an integer between 1 and 100000' })
  RATE_LIMIT_CALLS = 30;

  @Transform(toInt)
  @IsInt({
    message: 'RATE_LIMIT_COSTLY must be an integer of at least 1, at most RATE_LIMIT_CALLS',
  })
  @Min(1, {
    message: 'RATE_LIMIT_COSTLY must be an integer of at least 1, at most RATE_LIMIT_CALLS',
  })
  RATE_LIMIT_COSTLY = 6;

  @Transform(toInt)
  @IsInt({ message: 'SSE_MAX_BUFFER must be an integer between 1 and 100000' })
  @Min(1, { message: 'SSE_MAX_BUFFER must be an integer between 1 and 100000' })
  @Max(100_000, { message: 'SSE_MAX_BUFFER must be an integer between 1 and 100000' })
  SSE_MAX_BUFFER = 1000;

  @Transform(toInt)
  @IsInt({ message: 'SSE_HEARTBEAT_MS must be an integer between 10 and 300000' })
  @Min(10, { message: 'SSE_HEARTBEAT_MS must be an integer between 10 and 300000' })
  @Max(300_000, { message: 'SSE_HEARTBEAT_MS must be an integer between 10 and 300000' })
  SSE_HEARTBEAT_MS = 15_000;

  @IsOptional()
  @Matches(/^[A-Za-z0-9.-]+:\d{1,5}(,[A-Za-z0-9.-]+:\d{1,5})*$/, {
    message: 'KAFKA_BROKERS must be a comma-separated list of host:port',
  })
  KAFKA_BROKERS?: string;

  @IsString()
  @Matches(/^[A-Za-z0-9._-]{1,249}$/, {
    message: 'KAFKA_TOPIC must be 1 to 249 characters among letters, digits, ".", "_" and "-"',
  })
  KAFKA_TOPIC = 'runledger.run-events';

  @IsString()
  @Matches(/^[A-Za-z0-9._-]{1,249}$/, {
    message:
      'KAFKA_NOTIFICATIONS_TOPIC must be 1 to 249 characters among letters, digits, ".", "_" and "-"',
  })
  KAFKA_NOTIFICATIONS_TOPIC = 'runledger.notifications';

  @Transform(toInt)
  @IsInt({ message: 'KAFKA_PARTITIONS must be an integer between 1 and 1000' })
  @Min(1, { message: 'KAFKA_PARTITIONS must be an integer between 1 and 1000' })
  @Max(1000, { message: 'KAFKA_PARTITIONS must be an integer between 1 and 1000' })
  KAFKA_PARTITIONS = 6;

  @IsIn(['protobuf', 'json'], { message: 'MIRROR_FORMAT must be protobuf or json' })
  MIRROR_FORMAT: 'protobuf' | 'json' = 'protobuf';

  @Transform(toInt)
  @IsInt({ message: 'MIRROR_STALL_MS must be an integer between 100 and 3600000' })
  @Min(100, { message: 'MIRROR_STALL_MS must be an integer between 100 and 3600000' })
  @Max(3_600_000, { message: 'MIRROR_STALL_MS must be an integer between 100 and 3600000' })
  MIRROR_STALL_MS = 30_000;

  @Transform(toInt)
  @IsInt({ message: 'MIRROR_RETRY_MAX_MS must be an integer between 10 and 600000' })
  @Min(10, { message: 'MIRROR_RETRY_MAX_MS must be an integer between 10 and 600000' })
  @Max(600_000, { message: 'MIRROR_RETRY_MAX_MS must be an integer between 10 and 600000' })
  MIRROR_RETRY_MAX_MS = 5000;

  @Transform(toInt)
  @IsInt({ message: 'MIRROR_WATCHDOG_MS must be an integer between 100 and 600000' })
  @Min(100, { message: 'MIRROR_WATCHDOG_MS must be an integer between 100 and 600000' })
  @Max(600_000, { message: 'MIRROR_WATCHDOG_MS must be an integer between 100 and 600000' })
  MIRROR_WATCHDOG_MS = 5000;

  @Transform(toInt)
  @IsInt({ message: 'MIRROR_PORT must be an integer between 0 and 65535' })
  @Min(0, { message: 'MIRROR_PORT must be an integer between 0 and 65535' })
  @Max(65535, { message: 'MIRROR_PORT must be an integer between 0 and 65535' })
  MIRROR_PORT = 3001;
}

const VARIABLES: readonly (keyof EnvironmentSchema)[] = [
  'PORT',
  'HOST',
  'DATA_DIR',
  'RUNLEDGER_API_KEYS',
  'EVENTSTORE_URL',
  'SQLITE_SYNCHRONOUS',
  'BODY_MAX_BYTES',
  'EVENT_MAX_BYTES',
  'READ_WAIT_MS',
  'POLICY_FILE',
  'RECEIPT_SECRET',
  'RECEIPT_TTL_S',
  'MAX_EVENTS_PER_APPEND',
  'LOG_LEVEL',
  'RATE_LIMIT_WINDOW_MS',
  'RATE_LIMIT_CALLS',
  'RATE_LIMIT_COSTLY',
  'SSE_MAX_BUFFER',
  'SSE_HEARTBEAT_MS',
  'KAFKA_BROKERS',
  'KAFKA_TOPIC',
  'KAFKA_NOTIFICATIONS_TOPIC',
  'KAFKA_PARTITIONS',
  'MIRROR_FORMAT',
  'MIRROR_STALL_MS',
  'MIRROR_RETRY_MAX_MS',
  'MIRROR_WATCHDOG_MS',
  'MIRROR_PORT',
];

export type Scope = 'append' | 'read' | 'admin';
export const SCOPES: readonly Scope[] = ['append', 'read', 'admin'];

export interface ApiKey {
  key: string;
  tenantId: string;
  scopes: ReadonlySet<Scope>;
}

export interface AppConfig {
  port: number;
  host: string;
  dataDir: string;
  /** Undefined when RUNLEDGER_API_KEYS is unset: start-up then provisions a development key. */
  apiKeys?: ApiKey[];
  eventStoreUrl?: string;
  sqliteSynchronous: 'FULL' | 'NORMAL';
  bodyMaxBytes: number;
  /** An event's canonical JSON above this is reduced to fit (default: EventStoreDB's append ceiling). */
  eventMaxBytes: number;
  /** How long a query with ?minPosition= waits for the projection before answering 503. */
  readWaitMs: number;
  /** Layered tool policy evaluated when an approval is resolved; unset allows every tool. */
  policyFile?: string;
  /** Signs approval receipts. Unset: a secret kept in DATA_DIR (embedded default only). */
  receiptSecret?: string;
  receiptTtlSeconds: number;
  maxEventsPerAppend: number;
  logLevel: EnvironmentSchema['LOG_LEVEL'];
  /**
   * Each user's budgets in a sliding window: `calls` calls, of which at most `costly` are
   * costly ones (a costly call counts against both).
   */
  rateLimit: { windowMs: number; calls: number; costly: number };
  /**
   * Server-Sent Events: most events queued for a client whose socket is not draining before
   * it is sent `overflow` and closed, and how often an idle stream gets a heartbeat comment.
   */
  sse: { maxBuffer: number; heartbeatMs: number };
  /**
   * The Kafka mirror. `brokers` undefined: publishing is off (the api says so at start-up;
   * `npm run start:mirror` refuses to start). `port`: HTTP of the standalone mirror service.
   */
  mirror: {
    brokers?: string[];
    topic: string;
    /** Where "what needs me" items are published (notifications/notification-publisher.ts). */
    notificationsTopic: string;
    partitions: number;
    format: 'protobuf' | 'json';
    stallMs: number;
    retryMaxMs: number;
    watchdogMs: number;
    port: number;
  };
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.name = 'ConfigError';
  }
}

const TENANT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/**
 * `key1=tenantA:append,read;key2=tenantB:read,admin`. Short keys are accepted (test set-ups
 * use them) and warned about at start-up: see `shortKeyWarning`.
 */
export function parseApiKeys(text: string): ApiKey[] {
  const rule =
    'RUNLEDGER_API_KEYS must look like key1=tenantA:append,read;key2=tenantB:read,admin (keys without spaces or "=", scopes among append, read, admin)';
  const entries = text
    .split(';')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  if (entries.length === 0) throw new ConfigError([`${rule}: no key given`]);
  const seen = new Set<string>();
  return entries.map((entry, i) => {
    const match = /^([^=\s]+)=([^:\s]+):([a-z,]+)$/.exec(entry);
    if (!match) throw new ConfigError([`${rule}: entry ${i + 1} is malformed`]);
    const [, key, tenantId, scopeList] = match;
    if (!TENANT_PATTERN.test(tenantId))
      throw new ConfigError([`${rule}: entry ${i + 1} has an invalid tenant`]);
    const scopes = scopeList.split(',');
    const unknown = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
    if (unknown.length > 0)
      throw new ConfigError([`${rule}: entry ${i + 1} has unknown scopes ${unknown.join(',')}`]);
    if (seen.has(key)) throw new ConfigError([`${rule}: entry ${i + 1} repeats a key`]);
    seen.add(key);
    return { key, tenantId, scopes: new Set(scopes as Scope[]) };
  });
}

/** Reads and validates the environment; throws ConfigError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): AppConfig {
  // An empty variable means "unset": the default applies.
  const defined = Object.fromEntries(
    VARIABLES.filter((name) => env[name] !== undefined && env[name] !== '').map((name) => [
      name,
      env[name],
    ]),
  );
  const parsed = plainToInstance(EnvironmentSchema, defined);
  const errors = validateSync(parsed, { forbidUnknownValues: true });
  // One line per variable: its rules share one message.
  const problems = errors.flatMap((error) => [...new Set(Object.values(error.constraints ?? {}))]);
  if (problems.length === 0 && parsed.EVENT_MAX_BYTES > parsed.BODY_MAX_BYTES) {
    problems.push('EVENT_MAX_BYTES must be an integer of at least 4096, at most BODY_MAX_BYTES');
  }
  if (problems.length === 0 && parsed.RATE_LIMIT_COSTLY > parsed.RATE_LIMIT_CALLS) {
    problems.push('RATE_LIMIT_COSTLY must be an integer of at least 1, at most RATE_LIMIT_CALLS');
  }
  if (
    problems.length === 0 &&
    parsed.EVENTSTORE_URL !== undefined &&
    parsed.RECEIPT_SECRET === undefined
  ) {
    // Replicas must verify each other's receipts: a secret kept in one DATA_DIR cannot serve.
    problems.push(
      'RECEIPT_SECRET is required when EVENTSTORE_URL is set (every replica needs the same secret)',
    );
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return {
    port: parsed.PORT,
    host: parsed.HOST,
    dataDir: parsed.DATA_DIR,
    apiKeys:
      parsed.RUNLEDGER_API_KEYS === undefined ? undefined : parseApiKeys(parsed.RUNLEDGER_API_KEYS),
    eventStoreUrl: parsed.EVENTSTORE_URL,
    sqliteSynchronous: parsed.SQLITE_SYNCHRONOUS,
    bodyMaxBytes: parsed.BODY_MAX_BYTES,
    eventMaxBytes: parsed.EVENT_MAX_BYTES,
    readWaitMs: parsed.READ_WAIT_MS,
    policyFile: parsed.POLICY_FILE,
    receiptSecret: parsed.RECEIPT_SECRET,
    receiptTtlSeconds: parsed.RECEIPT_TTL_S,
    maxEventsPerAppend: parsed.MAX_EVENTS_PER_APPEND,
    logLevel: parsed.LOG_LEVEL,
    rateLimit: {
      windowMs: parsed.RATE_LIMIT_WINDOW_MS,
      calls: parsed.RATE_LIMIT_CALLS,
      costly: parsed.RATE_LIMIT_COSTLY,
    },
    sse: { maxBuffer: parsed.SSE_MAX_BUFFER, heartbeatMs: parsed.SSE_HEARTBEAT_MS },
    mirror: {
      brokers: parsed.KAFKA_BROKERS?.split(','),
      topic: parsed.KAFKA_TOPIC,
      notificationsTopic: parsed.KAFKA_NOTIFICATIONS_TOPIC,
      partitions: parsed.KAFKA_PARTITIONS,
      format: parsed.MIRROR_FORMAT,
      stallMs: parsed.MIRROR_STALL_MS,
      retryMaxMs: parsed.MIRROR_RETRY_MAX_MS,
      watchdogMs: parsed.MIRROR_WATCHDOG_MS,
      port: parsed.MIRROR_PORT,
    },
  };
}

export const APP_CONFIG = Symbol('APP_CONFIG');
