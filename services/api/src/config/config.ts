/**
 * Every setting of runledger, read from the environment once at start-up and validated
 * against one schema. A bad value stops the process with a message naming the variable
 * and the rule it broke (docs/configuration.md lists them all with their defaults).
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
import { readPolicyFile } from './policy-file';

const toInt = ({ value }: { value: unknown }) =>
  typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value.trim()) : value;

/** A TCP port, 1-65535, written without leading zeros. */
const PORT = '(?:6553[0-5]|655[0-2]\\d|65[0-4]\\d{2}|6[0-4]\\d{3}|[1-5]\\d{4}|[1-9]\\d{0,3})';
const BROKER = `[A-Za-z0-9.-]+:${PORT}`;
const KAFKA_BROKERS_PATTERN = new RegExp(`^${BROKER}(?:,${BROKER})*$`);

/** An integer setting within [min, max]; one message for every way a value can break it. */
function IntRange(name: string, min: number, max: number): PropertyDecorator {
  const message = `${name} must be an integer between ${min} and ${max}`;
  return (target, key) => {
    Transform(toInt)(target, key);
    IsInt({ message })(target, key);
    Min(min, { message })(target, key);
    Max(max, { message })(target, key);
  };
}

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

  @Transform(toInt)
  @IsInt({ message: 'STORE_STARTUP_TIMEOUT_MS must be an integer between 0 and 600000' })
  @Min(0, { message: 'STORE_STARTUP_TIMEOUT_MS must be an integer between 0 and 600000' })
  @Max(600_000, { message: 'STORE_STARTUP_TIMEOUT_MS must be an integer between 0 and 600000' })
  STORE_STARTUP_TIMEOUT_MS = 60_000;

  @IsIn(['FULL', 'NORMAL'], { message: 'SQLITE_SYNCHRONOUS must be FULL or NORMAL' })
  SQLITE_SYNCHRONOUS: 'FULL' | 'NORMAL' = 'FULL';

  @IsIn(['on', 'off'], { message: 'BACKGROUND_THREADS must be on or off' })
  BACKGROUND_THREADS: 'on' | 'off' = 'on';

  /**
   * A body is held whole and decoded to one string: past 256 MiB a JSON text nears the
   * longest string V8 builds (2^29 characters), and no batch of events needs that much.
   */
  @IntRange('BODY_MAX_BYTES', 1024, 268_435_456)
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
  @IsInt({ message: 'STREAM_TOKEN_TTL_S must be an integer between 10 and 3600' })
  @Min(10, { message: 'STREAM_TOKEN_TTL_S must be an integer between 10 and 3600' })
  @Max(3600, { message: 'STREAM_TOKEN_TTL_S must be an integer between 10 and 3600' })
  STREAM_TOKEN_TTL_S = 60;

  @IsOptional()
  @Matches(/^(\*|https?:\/\/[^\s,]+(,https?:\/\/[^\s,]+)*)$/, {
    message: 'CORS_ORIGINS must be * or a comma-separated list of origins like https://app.example',
  })
  CORS_ORIGINS?: string;

  @Transform(toInt)
  @IsInt({ message: 'READ_WAIT_MS must be an integer between 0 and 60000' })
  @Min(0, { message: 'READ_WAIT_MS must be an integer between 0 and 60000' })
  @Max(60_000, { message: 'READ_WAIT_MS must be an integer between 0 and 60000' })
  READ_WAIT_MS = 2000;

  @Transform(toInt)
  @IsInt({ message: 'READY_MAX_LAG_MS must be an integer between 100 and 3600000' })
  @Min(100, { message: 'READY_MAX_LAG_MS must be an integer between 100 and 3600000' })
  @Max(3_600_000, { message: 'READY_MAX_LAG_MS must be an integer between 100 and 3600000' })
  READY_MAX_LAG_MS = 30_000;

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

  @IsOptional()
  @Transform(toInt)
  @IsInt({ message: 'RATE_LIMIT_SERVICE_CALLS must be an integer between 1 and 100000' })
  @Min(1, { message: 'RATE_LIMIT_SERVICE_CALLS must be an integer between 1 and 100000' })
  @Max(100_000, { message: 'RATE_LIMIT_SERVICE_CALLS must be an integer between 1 and 100000' })
  RATE_LIMIT_SERVICE_CALLS?: number;

  @IsOptional()
  @Transform(toInt)
  @IsInt({
    message:
      'RATE_LIMIT_SERVICE_COSTLY must be an integer of at least 1, at most RATE_LIMIT_SERVICE_CALLS',
  })
  @Min(1, {
    message:
      'RATE_LIMIT_SERVICE_COSTLY must be an integer of at least 1, at most RATE_LIMIT_SERVICE_CALLS',
  })
  RATE_LIMIT_SERVICE_COSTLY?: number;

  @IsOptional()
  @IsIn(['production', 'development', 'test'], {
    message: 'RUNLEDGER_ENV must be production, development or test',
  })
  RUNLEDGER_ENV?: 'production' | 'development' | 'test';

  @IsOptional()
  @IsString()
  NODE_ENV?: string;

  @Transform(toInt)
  @IsInt({ message: 'SSE_HEARTBEAT_MS must be an integer between 10 and 300000' })
  @Min(10, { message: 'SSE_HEARTBEAT_MS must be an integer between 10 and 300000' })
  @Max(300_000, { message: 'SSE_HEARTBEAT_MS must be an integer between 10 and 300000' })
  SSE_HEARTBEAT_MS = 15_000;

  // Bounded cost per request (docs/limits.md): every limit a stranger's request meets.
  @IntRange('SMALL_BODY_MAX_BYTES', 1024, 1_073_741_824)
  SMALL_BODY_MAX_BYTES = 65_536;

  @IntRange('JSON_MAX_KEYS', 1, 100_000_000)
  JSON_MAX_KEYS = 100_000;

  @IntRange('JSON_MAX_OBJECT_KEYS', 1, 100_000_000)
  JSON_MAX_OBJECT_KEYS = 10_000;

  @IntRange('JSON_MAX_ITEMS', 1, 1_000_000_000)
  JSON_MAX_ITEMS = 1_000_000;

  @IntRange('LARGE_BODY_BYTES', 1024, 1_073_741_824)
  LARGE_BODY_BYTES = 1_048_576;

  @IntRange('LARGE_BODY_CONCURRENCY', 1, 10_000)
  LARGE_BODY_CONCURRENCY = 4;

  @IntRange('HTTP_REQUEST_TIMEOUT_MS', 1000, 3_600_000)
  HTTP_REQUEST_TIMEOUT_MS = 30_000;

  @IntRange('HTTP_HEADERS_TIMEOUT_MS', 1000, 3_600_000)
  HTTP_HEADERS_TIMEOUT_MS = 10_000;

  @IntRange('HTTP_KEEP_ALIVE_TIMEOUT_MS', 100, 3_600_000)
  HTTP_KEEP_ALIVE_TIMEOUT_MS = 5000;

  @IntRange('SSE_MAX_BUFFER_BYTES', 4096, 1_073_741_824)
  SSE_MAX_BUFFER_BYTES = 4_194_304;

  @IntRange('SSE_SEND_TIMEOUT_MS', 100, 3_600_000)
  SSE_SEND_TIMEOUT_MS = 10_000;

  @IntRange('SSE_MAX_STREAMS_PER_KEY', 1, 1_000_000)
  SSE_MAX_STREAMS_PER_KEY = 50;

  @IntRange('SSE_MAX_STREAMS_PER_TENANT', 1, 1_000_000)
  SSE_MAX_STREAMS_PER_TENANT = 200;

  @IntRange('BULK_READS_PER_KEY', 1, 10_000)
  BULK_READS_PER_KEY = 8;

  @IntRange('REJECTION_MARKER_WINDOW_MS', 100, 86_400_000)
  REJECTION_MARKER_WINDOW_MS = 60_000;

  @IsOptional()
  @Matches(KAFKA_BROKERS_PATTERN, {
    message: 'KAFKA_BROKERS must be a comma-separated list of host:port (port 1-65535)',
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

/** Every variable the service reads; docs/configuration.md has a row for each. */
export const CONFIG_VARIABLES: readonly (keyof EnvironmentSchema)[] = [
  'PORT',
  'HOST',
  'DATA_DIR',
  'RUNLEDGER_API_KEYS',
  'EVENTSTORE_URL',
  'STORE_STARTUP_TIMEOUT_MS',
  'SQLITE_SYNCHRONOUS',
  'BACKGROUND_THREADS',
  'BODY_MAX_BYTES',
  'EVENT_MAX_BYTES',
  'READ_WAIT_MS',
  'READY_MAX_LAG_MS',
  'POLICY_FILE',
  'RECEIPT_SECRET',
  'RECEIPT_TTL_S',
  'STREAM_TOKEN_TTL_S',
  'CORS_ORIGINS',
  'MAX_EVENTS_PER_APPEND',
  'LOG_LEVEL',
  'RATE_LIMIT_WINDOW_MS',
  'RATE_LIMIT_CALLS',
  'RATE_LIMIT_COSTLY',
  'RATE_LIMIT_SERVICE_CALLS',
  'RATE_LIMIT_SERVICE_COSTLY',
  'RUNLEDGER_ENV',
  'NODE_ENV',
  'SSE_MAX_BUFFER_BYTES',
  'SSE_SEND_TIMEOUT_MS',
  'SSE_MAX_STREAMS_PER_KEY',
  'SSE_MAX_STREAMS_PER_TENANT',
  'BULK_READS_PER_KEY',
  'SMALL_BODY_MAX_BYTES',
  'JSON_MAX_KEYS',
  'JSON_MAX_OBJECT_KEYS',
  'JSON_MAX_ITEMS',
  'LARGE_BODY_BYTES',
  'LARGE_BODY_CONCURRENCY',
  'HTTP_REQUEST_TIMEOUT_MS',
  'HTTP_HEADERS_TIMEOUT_MS',
  'HTTP_KEEP_ALIVE_TIMEOUT_MS',
  'REJECTION_MARKER_WINDOW_MS',
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

/**
 * `append` records a run's events (the agent runtime); `read` reads runs and threads;
 * `admin` operates the mirror; `approve` decides on tool calls (resolve, answer), so a
 * runtime that records a call cannot also approve it; `act-as` marks a trusted gateway that
 * names the acting user in X-Runledger-User.
 */
export type Scope = 'append' | 'read' | 'admin' | 'approve' | 'act-as';
export const SCOPES: readonly Scope[] = ['append', 'read', 'admin', 'approve', 'act-as'];

export interface ApiKey {
  key: string;
  tenantId: string;
  scopes: ReadonlySet<Scope>;
  /** The user this key is (`key=tenant:scopes:user`); absent for a key that acts as itself. */
  principal?: string;
}

export interface AppConfig {
  port: number;
  host: string;
  dataDir: string;
  /** Undefined when RUNLEDGER_API_KEYS is unset: start-up then provisions a development key. */
  apiKeys?: ApiKey[];
  eventStoreUrl?: string;
  /** How long start-up waits for an unreachable store (KurrentDB still starting) before exiting. */
  storeStartupTimeoutMs: number;
  sqliteSynchronous: 'FULL' | 'NORMAL';
  /**
   * `on` (the service's default): the projector and the SQLite log's writes (with their
   * fsync) run in worker threads of their own, off the HTTP event loop; `off`: on it, the
   * projector time-sliced (tests that start many apps, where a thread's start-up dominates).
   */
  backgroundThreads: 'on' | 'off';
  bodyMaxBytes: number;
  /** An event's canonical JSON above this is reduced to fit (default: EventStoreDB's append ceiling). */
  eventMaxBytes: number;
  /** How long a query with ?minPosition= waits for the projection before answering 503. */
  readWaitMs: number;
  /**
   * Readiness: the projector (and the mirror, when it runs here) counts as caught up while the
   * oldest event it has not handled has waited at most this long.
   */
  readyMaxLagMs: number;
  /** Layered tool policy evaluated when an approval is resolved; unset allows every tool. */
  policyFile?: string;
  /** Signs approval receipts. Unset: a secret kept in DATA_DIR (embedded default only). */
  receiptSecret?: string;
  receiptTtlSeconds: number;
  /** How long a stream token (`?token=` on an SSE route, for browsers) opens its stream. */
  streamTokenTtlSeconds: number;
  /** Origins a browser may call the API from; undefined: no CORS headers (same origin only). */
  corsOrigins?: '*' | string[];
  maxEventsPerAppend: number;
  logLevel: EnvironmentSchema['LOG_LEVEL'];
  /**
   * Each user's budgets in a sliding window: `calls` calls, of which at most `costly` are
   * costly ones (a costly call counts against both). `service`: the budgets of a key that
   * acts as itself, naming no user.
   */
  rateLimit: {
    windowMs: number;
    calls: number;
    costly: number;
    service: { calls: number; costly: number };
  };
  /** NODE_ENV or RUNLEDGER_ENV is production: keys and RECEIPT_SECRET must be configured. */
  production: boolean;
  /**
   * Body limit of every route that does not need the append scope (bodyMaxBytes is append's);
   * never above bodyMaxBytes.
   */
  smallBodyMaxBytes: number;
  /**
   * What a JSON body may hold, checked while it streams in, before it is parsed: object
   * members in all (`maxKeys`), in one object (`maxObjectKeys`), and values in all (`maxItems`:
   * array elements and object members). Nesting is capped at the domain's MAX_JSON_DEPTH.
   */
  json: { maxKeys: number; maxObjectKeys: number; maxItems: number };
  /** Bodies above `thresholdBytes` are large: at most `concurrency` are read at once (503 beyond). */
  largeBodies: { thresholdBytes: number; concurrency: number };
  /** node:http timeouts: a whole request, its headers, an idle keep-alive connection. */
  http: { requestTimeoutMs: number; headersTimeoutMs: number; keepAliveTimeoutMs: number };
  /**
   * Server-Sent Events: bytes waiting for a client whose socket is not draining, and how long
   * a write may wait for it, before the client is sent `overflow` and closed; streams open at
   * once per API key and per tenant (429 beyond); the idle heartbeat.
   */
  sse: {
    maxBufferBytes: number;
    sendTimeoutMs: number;
    maxStreamsPerKey: number;
    maxStreamsPerTenant: number;
    heartbeatMs: number;
  };
  /**
   * Bulk reads (pages of a run's events, replays, audits, exports) one API key has in progress
   * at once; more wait their turn (BULK_READS_WAITING_PER_SLOT times as many), then 429.
   */
  bulkReadsPerKey: number;
  /** Refused oversize appends of one key to one run share one `append.rejected` per window. */
  rejectionMarkerWindowMs: number;
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

/** Longest user name, in characters, whether configured or named by a gateway. */
export const USER_NAME_MAX = 128;

/**
 * `key1=tenantA:append,read;key2=tenantB:read,approve:ana`: each entry is a key, its tenant,
 * its scopes and optionally the user the key is (percent-encoded UTF-8, so `%C5%81ukasz` is
 * Łukasz). Short keys are accepted (test set-ups use them) and warned about at start-up:
 * see `shortKeyWarning`.
 */
export function parseApiKeys(text: string): ApiKey[] {
  const rule =
    'RUNLEDGER_API_KEYS must look like key1=tenantA:append,read;key2=tenantB:read,approve:user (keys without spaces or "=", scopes among append, read, admin, approve, act-as, an optional percent-encoded user)';
  const entries = text
    .split(';')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  if (entries.length === 0) throw new ConfigError([`${rule}: no key given`]);
  const seen = new Set<string>();
  return entries.map((entry, i) => {
    const match = /^([^=\s]+)=([^:\s]+):([a-z,-]+)(?::([^:\s]+))?$/.exec(entry);
    if (!match) throw new ConfigError([`${rule}: entry ${i + 1} is malformed`]);
    const [, key, tenantId, scopeList, encodedUser] = match;
    if (!TENANT_PATTERN.test(tenantId))
      throw new ConfigError([`${rule}: entry ${i + 1} has an invalid tenant`]);
    const scopes = scopeList.split(',');
    const unknown = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
    if (unknown.length > 0)
      throw new ConfigError([`${rule}: entry ${i + 1} has unknown scopes ${unknown.join(',')}`]);
    if (seen.has(key)) throw new ConfigError([`${rule}: entry ${i + 1} repeats a key`]);
    seen.add(key);
    const principal = encodedUser === undefined ? undefined : decodeUser(encodedUser);
    if (principal === null)
      throw new ConfigError([`${rule}: entry ${i + 1} has a user that is not ${USER_NAME_RULE}`]);
    return {
      key,
      tenantId,
      scopes: new Set(scopes as Scope[]),
      ...(principal === undefined ? {} : { principal }),
    };
  });
}

export const USER_NAME_RULE = `percent-encoded UTF-8 of 1 to ${USER_NAME_MAX} printable characters (no control, invisible format or bidirectional characters), not starting with "key:"`;

/**
 * Characters a name may not hold: controls (C0, DEL, C1), line and paragraph separators, and
 * format characters: bidirectional overrides and isolates, zero-width spaces, the byte-order
 * mark, tags. A name is shown to people (who decided an approval, whose receipt) and counts a
 * budget: `\u202Enimda` shows as "admin", and `a\u200Bna` looks like `ana` while being
 * another user. The zero-width joiner and non-joiner stay: emoji and several scripts
 * spell with them.
 */
const NOT_PRINTABLE = /[\p{Cc}\p{Zl}\p{Zp}]|(?![\u200c\u200d])\p{Cf}/u;

/**
 * A user name from its percent-encoded UTF-8, or null when it is not one: undecodable,
 * blank, too long, holding a character that is not printable (NOT_PRINTABLE), or spelled
 * like a key's own identity (`key:<id>`, what a call naming no user is recorded as).
 */
export function decodeUser(encoded: string): string | null {
  let name: string;
  try {
    // Surrounding spaces name no one else: ' ana ' is ana.
    name = decodeURIComponent(encoded).trim();
  } catch {
    return null;
  }
  if (name === '' || [...name].length > USER_NAME_MAX || NOT_PRINTABLE.test(name)) return null;
  return name.startsWith('key:') ? null : name;
}

/** Limits that only make sense in relation to another one. */
function limitOrderProblems(parsed: EnvironmentSchema): string[] {
  const rules: [boolean, string][] = [
    [
      parsed.JSON_MAX_OBJECT_KEYS <= parsed.JSON_MAX_KEYS,
      'JSON_MAX_OBJECT_KEYS must be at most JSON_MAX_KEYS',
    ],
    [
      parsed.HTTP_HEADERS_TIMEOUT_MS <= parsed.HTTP_REQUEST_TIMEOUT_MS,
      'HTTP_HEADERS_TIMEOUT_MS must be at most HTTP_REQUEST_TIMEOUT_MS',
    ],
    [
      // A budget smaller than one event's frame would overflow every briefly slow client.
      parsed.SSE_MAX_BUFFER_BYTES >= 2 * parsed.EVENT_MAX_BYTES,
      'SSE_MAX_BUFFER_BYTES must be at least twice EVENT_MAX_BYTES',
    ],
    [
      parsed.SSE_MAX_STREAMS_PER_KEY <= parsed.SSE_MAX_STREAMS_PER_TENANT,
      'SSE_MAX_STREAMS_PER_KEY must be at most SSE_MAX_STREAMS_PER_TENANT',
    ],
  ];
  return rules.filter(([ok]) => !ok).map(([, problem]) => problem);
}

/** Reads and validates the environment; throws ConfigError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): AppConfig {
  // An empty variable means "unset": the default applies.
  const defined = Object.fromEntries(
    CONFIG_VARIABLES.filter((name) => env[name] !== undefined && env[name] !== '').map((name) => [
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
  const serviceCalls = parsed.RATE_LIMIT_SERVICE_CALLS ?? parsed.RATE_LIMIT_CALLS;
  const serviceCostly = parsed.RATE_LIMIT_SERVICE_COSTLY ?? parsed.RATE_LIMIT_COSTLY;
  if (problems.length === 0 && serviceCostly > serviceCalls) {
    problems.push(
      'RATE_LIMIT_SERVICE_COSTLY must be an integer of at least 1, at most RATE_LIMIT_SERVICE_CALLS',
    );
  }
  const production = parsed.NODE_ENV === 'production' || parsed.RUNLEDGER_ENV === 'production';
  if (problems.length === 0 && production) {
    // A forgotten variable must not become an all-scope development key on a public port.
    if (parsed.RUNLEDGER_API_KEYS === undefined)
      problems.push('RUNLEDGER_API_KEYS is required in production (NODE_ENV or RUNLEDGER_ENV)');
    if (parsed.RECEIPT_SECRET === undefined)
      problems.push('RECEIPT_SECRET is required in production (NODE_ENV or RUNLEDGER_ENV)');
  }
  if (problems.length === 0) problems.push(...limitOrderProblems(parsed));
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
  if (problems.length === 0 && parsed.POLICY_FILE !== undefined) {
    const policy = readPolicyFile(parsed.POLICY_FILE);
    if (typeof policy === 'string') problems.push(policy);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return {
    port: parsed.PORT,
    host: parsed.HOST,
    dataDir: parsed.DATA_DIR,
    apiKeys:
      parsed.RUNLEDGER_API_KEYS === undefined ? undefined : parseApiKeys(parsed.RUNLEDGER_API_KEYS),
    eventStoreUrl: parsed.EVENTSTORE_URL,
    storeStartupTimeoutMs: parsed.STORE_STARTUP_TIMEOUT_MS,
    sqliteSynchronous: parsed.SQLITE_SYNCHRONOUS,
    backgroundThreads: parsed.BACKGROUND_THREADS,
    bodyMaxBytes: parsed.BODY_MAX_BYTES,
    eventMaxBytes: parsed.EVENT_MAX_BYTES,
    readWaitMs: parsed.READ_WAIT_MS,
    readyMaxLagMs: parsed.READY_MAX_LAG_MS,
    policyFile: parsed.POLICY_FILE,
    receiptSecret: parsed.RECEIPT_SECRET,
    receiptTtlSeconds: parsed.RECEIPT_TTL_S,
    streamTokenTtlSeconds: parsed.STREAM_TOKEN_TTL_S,
    corsOrigins:
      parsed.CORS_ORIGINS === undefined || parsed.CORS_ORIGINS === '*'
        ? parsed.CORS_ORIGINS
        : parsed.CORS_ORIGINS.split(','),
    maxEventsPerAppend: parsed.MAX_EVENTS_PER_APPEND,
    logLevel: parsed.LOG_LEVEL,
    rateLimit: {
      windowMs: parsed.RATE_LIMIT_WINDOW_MS,
      calls: parsed.RATE_LIMIT_CALLS,
      costly: parsed.RATE_LIMIT_COSTLY,
      service: { calls: serviceCalls, costly: serviceCostly },
    },
    production,
    // Never above the append limit: lowering BODY_MAX_BYTES lowers both.
    smallBodyMaxBytes: Math.min(parsed.SMALL_BODY_MAX_BYTES, parsed.BODY_MAX_BYTES),
    json: {
      maxKeys: parsed.JSON_MAX_KEYS,
      maxObjectKeys: parsed.JSON_MAX_OBJECT_KEYS,
      maxItems: parsed.JSON_MAX_ITEMS,
    },
    largeBodies: {
      thresholdBytes: Math.min(parsed.LARGE_BODY_BYTES, parsed.BODY_MAX_BYTES),
      concurrency: parsed.LARGE_BODY_CONCURRENCY,
    },
    http: {
      requestTimeoutMs: parsed.HTTP_REQUEST_TIMEOUT_MS,
      headersTimeoutMs: parsed.HTTP_HEADERS_TIMEOUT_MS,
      keepAliveTimeoutMs: parsed.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    },
    sse: {
      maxBufferBytes: parsed.SSE_MAX_BUFFER_BYTES,
      sendTimeoutMs: parsed.SSE_SEND_TIMEOUT_MS,
      maxStreamsPerKey: parsed.SSE_MAX_STREAMS_PER_KEY,
      maxStreamsPerTenant: parsed.SSE_MAX_STREAMS_PER_TENANT,
      heartbeatMs: parsed.SSE_HEARTBEAT_MS,
    },
    bulkReadsPerKey: parsed.BULK_READS_PER_KEY,
    rejectionMarkerWindowMs: parsed.REJECTION_MARKER_WINDOW_MS,
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
