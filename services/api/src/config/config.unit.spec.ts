import { shortKeyWarning } from '../auth/api-keys';
import { ConfigError, loadConfig, parseApiKeys } from './config';

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

describe('configuration', () => {
  it('has the documented defaults when nothing is set', () => {
    expect(loadConfig({})).toEqual({
      port: 3000,
      host: '127.0.0.1',
      dataDir: './data',
      apiKeys: undefined,
      eventStoreUrl: undefined,
      sqliteSynchronous: 'FULL',
      bodyMaxBytes: 33_554_432,
      eventMaxBytes: 1_048_576,
      readWaitMs: 2000,
      policyFile: undefined,
      receiptSecret: undefined,
      receiptTtlSeconds: 300,
      maxEventsPerAppend: 1000,
      logLevel: 'log',
      rateLimit: { windowMs: 10_000, calls: 30, costly: 6 },
      sse: { maxBuffer: 1000, heartbeatMs: 15_000 },
      mirror: {
        brokers: undefined,
        topic: 'runledger.run-events',
        notificationsTopic: 'runledger.notifications',
        partitions: 6,
        format: 'protobuf',
        stallMs: 30_000,
        retryMaxMs: 5000,
        watchdogMs: 5000,
        port: 3001,
      },
    });
  });

  it('reads every variable', () => {
    const config = loadConfig({
      PORT: '8080',
      HOST: '0.0.0.0',
      DATA_DIR: '/var/lib/runledger',
      EVENTSTORE_URL: 'kurrentdb://localhost:2113?tls=false',
      RECEIPT_SECRET: 'a-receipt-secret-of-thirty-two-chars!',
      SQLITE_SYNCHRONOUS: 'NORMAL',
      BODY_MAX_BYTES: '8192',
      EVENT_MAX_BYTES: '4096',
      MAX_EVENTS_PER_APPEND: '10',
      LOG_LEVEL: 'debug',
      RATE_LIMIT_WINDOW_MS: '60000',
      RATE_LIMIT_CALLS: '100',
      RATE_LIMIT_COSTLY: '10',
      SSE_MAX_BUFFER: '50',
      SSE_HEARTBEAT_MS: '500',
      KAFKA_BROKERS: 'kafka-1:9092,10.0.0.2:9093',
      KAFKA_TOPIC: 'audit.run-events',
      KAFKA_NOTIFICATIONS_TOPIC: 'audit.notifications',
      KAFKA_PARTITIONS: '12',
      MIRROR_FORMAT: 'json',
      MIRROR_STALL_MS: '1000',
      MIRROR_RETRY_MAX_MS: '200',
      MIRROR_WATCHDOG_MS: '250',
      MIRROR_PORT: '0',
    });
    expect(config).toMatchObject({
      port: 8080,
      host: '0.0.0.0',
      dataDir: '/var/lib/runledger',
      eventStoreUrl: 'kurrentdb://localhost:2113?tls=false',
      sqliteSynchronous: 'NORMAL',
      bodyMaxBytes: 8192,
      eventMaxBytes: 4096,
      maxEventsPerAppend: 10,
      logLevel: 'debug',
      rateLimit: { windowMs: 60_000, calls: 100, costly: 10 },
      sse: { maxBuffer: 50, heartbeatMs: 500 },
      mirror: {
        brokers: ['kafka-1:9092', '10.0.0.2:9093'],
        topic: 'audit.run-events',
        notificationsTopic: 'audit.notifications',
        partitions: 12,
        format: 'json',
        stallMs: 1000,
        retryMaxMs: 200,
        watchdogMs: 250,
        port: 0,
      },
    });
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '3.5'],
    ['SQLITE_SYNCHRONOUS', 'OFF'],
    ['BODY_MAX_BYTES', '12'],
    ['EVENT_MAX_BYTES', '100'],
    ['READ_WAIT_MS', '-1'],
    ['RECEIPT_SECRET', 'short'],
    ['RECEIPT_TTL_S', '0'],
    ['EVENT_MAX_BYTES', '40000000'],
    ['MAX_EVENTS_PER_APPEND', '0'],
    ['EVENTSTORE_URL', 'http://localhost:2113'],
    ['LOG_LEVEL', 'loud'],
    ['RATE_LIMIT_WINDOW_MS', '999'],
    ['RATE_LIMIT_WINDOW_MS', '10s'],
    ['RATE_LIMIT_CALLS', '0'],
    ['RATE_LIMIT_CALLS', '100001'],
    ['RATE_LIMIT_COSTLY', '0'],
    ['RATE_LIMIT_COSTLY', '31'],
    ['SSE_MAX_BUFFER', '0'],
    ['SSE_HEARTBEAT_MS', '5'],
    ['KAFKA_BROKERS', 'localhost'],
    ['KAFKA_BROKERS', 'a:1, b:2'],
    ['KAFKA_TOPIC', 'run events'],
    ['KAFKA_NOTIFICATIONS_TOPIC', 'what needs me'],
    ['KAFKA_PARTITIONS', '0'],
    ['MIRROR_FORMAT', 'avro'],
    ['MIRROR_STALL_MS', '10'],
    ['MIRROR_RETRY_MAX_MS', '1'],
    ['MIRROR_WATCHDOG_MS', '50'],
    ['MIRROR_PORT', '-1'],
  ])('refuses %s=%s, naming the variable and its rule', (name, value) => {
    const problems = problemsOf({ [name]: value });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toContain(name);
    expect(problems[0]).toMatch(/must/);
  });

  it('requires RECEIPT_SECRET when the log is shared by replicas (EVENTSTORE_URL)', () => {
    expect(problemsOf({ EVENTSTORE_URL: 'kurrentdb://localhost:2113?tls=false' })).toEqual([
      expect.stringContaining('RECEIPT_SECRET is required'),
    ]);
  });

  it('reports every bad variable at once', () => {
    expect(problemsOf({ PORT: 'x', LOG_LEVEL: 'y' })).toHaveLength(2);
  });
});

describe('RUNLEDGER_API_KEYS', () => {
  it('parses key=tenant:scopes entries', () => {
    const keys = parseApiKeys(
      'key-aaaaaaaaaaaaaaaa=tenantA:append,read;key-bbbbbbbbbbbbbbbb=tenantB:read,admin',
    );
    expect(keys.map((k) => [k.key, k.tenantId, [...k.scopes]])).toEqual([
      ['key-aaaaaaaaaaaaaaaa', 'tenantA', ['append', 'read']],
      ['key-bbbbbbbbbbbbbbbb', 'tenantB', ['read', 'admin']],
    ]);
  });

  it('accepts short keys, as in the format example, and warns about them for their tenants', () => {
    const keys = parseApiKeys('key1=tenantA:append,read;key2=tenantB:read,admin');
    expect(keys.map((k) => [k.key, k.tenantId, [...k.scopes]])).toEqual([
      ['key1', 'tenantA', ['append', 'read']],
      ['key2', 'tenantB', ['read', 'admin']],
    ]);
    expect(shortKeyWarning(keys)).toMatch(
      /shorter than 16 characters \(tenants tenantA, tenantB\)/,
    );
    expect(
      shortKeyWarning(parseApiKeys('key-aaaaaaaaaaaaaaaa=tenantA:read;k=tenantB:read')),
    ).toMatch(/\(tenants tenantB\)/);
    expect(shortKeyWarning(parseApiKeys('key-aaaaaaaaaaaaaaaa=tenantA:read'))).toBeNull();
  });

  it.each([
    ['=tenantA:read', /entry 1 is malformed/],
    ['two words=tenantA:read', /entry 1 is malformed/],
    ['key-aaaaaaaaaaaaaaaa=tenantA', /entry 1 is malformed/],
    ['key-aaaaaaaaaaaaaaaa=tenantA:read,write', /unknown scopes write/],
    ['key-aaaaaaaaaaaaaaaa=a:read;key-aaaaaaaaaaaaaaaa=b:read', /entry 2 repeats a key/],
    [';', /no key given/],
  ])('refuses %s', (text, rule) => {
    expect(() => parseApiKeys(text)).toThrow(rule);
    expect(() => loadConfig({ RUNLEDGER_API_KEYS: text })).toThrow(/RUNLEDGER_API_KEYS/);
  });
});
