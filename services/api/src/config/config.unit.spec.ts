import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { shortKeyWarning } from '../auth/api-keys';
import { CONFIG_VARIABLES, ConfigError, loadConfig, parseApiKeys } from './config';

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
      storeStartupTimeoutMs: 60_000,
      sqliteSynchronous: 'FULL',
      backgroundThreads: 'on',
      bodyMaxBytes: 33_554_432,
      eventMaxBytes: 1_048_576,
      readWaitMs: 2000,
      readyMaxLagMs: 30_000,
      policyFile: undefined,
      receiptSecret: undefined,
      receiptTtlSeconds: 300,
      streamTokenTtlSeconds: 60,
      corsOrigins: undefined,
      maxEventsPerAppend: 1000,
      logLevel: 'log',
      rateLimit: { windowMs: 10_000, calls: 30, costly: 6, service: { calls: 30, costly: 6 } },
      production: false,
      smallBodyMaxBytes: 65_536,
      json: { maxKeys: 100_000, maxObjectKeys: 10_000, maxItems: 1_000_000 },
      largeBodies: { thresholdBytes: 1_048_576, concurrency: 4 },
      http: { requestTimeoutMs: 30_000, headersTimeoutMs: 10_000, keepAliveTimeoutMs: 5000 },
      sse: {
        maxBufferBytes: 4_194_304,
        sendTimeoutMs: 10_000,
        maxStreamsPerKey: 50,
        maxStreamsPerTenant: 200,
        heartbeatMs: 15_000,
      },
      bulkReadsPerKey: 8,
      rejectionMarkerWindowMs: 60_000,
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
      SSE_MAX_BUFFER_BYTES: '65536',
      SSE_SEND_TIMEOUT_MS: '2000',
      SSE_MAX_STREAMS_PER_KEY: '3',
      SSE_MAX_STREAMS_PER_TENANT: '7',
      SMALL_BODY_MAX_BYTES: '2048',
      JSON_MAX_KEYS: '500',
      JSON_MAX_OBJECT_KEYS: '50',
      JSON_MAX_ITEMS: '900',
      LARGE_BODY_BYTES: '4096',
      LARGE_BODY_CONCURRENCY: '2',
      HTTP_REQUEST_TIMEOUT_MS: '5000',
      HTTP_HEADERS_TIMEOUT_MS: '2000',
      HTTP_KEEP_ALIVE_TIMEOUT_MS: '1000',
      REJECTION_MARKER_WINDOW_MS: '1500',
      SSE_HEARTBEAT_MS: '500',
      BULK_READS_PER_KEY: '3',
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
      smallBodyMaxBytes: 2048,
      json: { maxKeys: 500, maxObjectKeys: 50, maxItems: 900 },
      largeBodies: { thresholdBytes: 4096, concurrency: 2 },
      http: { requestTimeoutMs: 5000, headersTimeoutMs: 2000, keepAliveTimeoutMs: 1000 },
      sse: {
        maxBufferBytes: 65_536,
        sendTimeoutMs: 2000,
        maxStreamsPerKey: 3,
        maxStreamsPerTenant: 7,
        heartbeatMs: 500,
      },
      bulkReadsPerKey: 3,
      rejectionMarkerWindowMs: 1500,
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
    ['BACKGROUND_THREADS', 'yes'],
    ['BODY_MAX_BYTES', '12'],
    ['BODY_MAX_BYTES', '268435457'],
    ['BODY_MAX_BYTES', '99999999999999999999999'],
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
    ['SSE_MAX_BUFFER_BYTES', '1000'],
    ['SSE_MAX_BUFFER_BYTES', '1048576'],
    ['SSE_SEND_TIMEOUT_MS', '99'],
    ['SSE_MAX_STREAMS_PER_KEY', '0'],
    ['SSE_MAX_STREAMS_PER_KEY', '201'],
    ['SSE_MAX_STREAMS_PER_TENANT', 'many'],
    ['BULK_READS_PER_KEY', '0'],
    ['BULK_READS_PER_KEY', '10001'],
    ['SMALL_BODY_MAX_BYTES', '1023'],
    ['JSON_MAX_KEYS', '0'],
    ['JSON_MAX_OBJECT_KEYS', '100001'],
    ['JSON_MAX_ITEMS', '1e6'],
    ['LARGE_BODY_BYTES', '10'],
    ['LARGE_BODY_CONCURRENCY', '0'],
    ['HTTP_REQUEST_TIMEOUT_MS', '999'],
    ['HTTP_HEADERS_TIMEOUT_MS', '30001'],
    ['HTTP_KEEP_ALIVE_TIMEOUT_MS', '99'],
    ['REJECTION_MARKER_WINDOW_MS', '50'],
    ['SSE_HEARTBEAT_MS', '5'],
    ['KAFKA_BROKERS', 'localhost'],
    ['KAFKA_BROKERS', 'a:1, b:2'],
    ['KAFKA_BROKERS', 'kafka:99999'],
    ['KAFKA_BROKERS', 'kafka:9092,other:0'],
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

  it('gives keys acting as themselves budgets of their own when set', () => {
    expect(
      loadConfig({ RATE_LIMIT_SERVICE_CALLS: '600', RATE_LIMIT_SERVICE_COSTLY: '120' }).rateLimit,
    ).toEqual({ windowMs: 10_000, calls: 30, costly: 6, service: { calls: 600, costly: 120 } });
    expect(problemsOf({ RATE_LIMIT_SERVICE_CALLS: '5' })).toEqual([
      'RATE_LIMIT_SERVICE_COSTLY must be an integer of at least 1, at most RATE_LIMIT_SERVICE_CALLS',
    ]);
  });

  it.each<Record<string, string>>([{ NODE_ENV: 'production' }, { RUNLEDGER_ENV: 'production' }])(
    'in production (%p) refuses to start without keys and without RECEIPT_SECRET, naming each',
    (env) => {
      expect(problemsOf(env)).toEqual([
        'RUNLEDGER_API_KEYS is required in production (NODE_ENV or RUNLEDGER_ENV)',
        'RECEIPT_SECRET is required in production (NODE_ENV or RUNLEDGER_ENV)',
      ]);
      const configured = loadConfig({
        ...env,
        RUNLEDGER_API_KEYS: 'key-aaaaaaaaaaaaaaaa=tenantA:read',
        RECEIPT_SECRET: 's'.repeat(32),
      });
      expect(configured.production).toBe(true);
    },
  );

  it('keeps the small body limit and the large-body threshold at or below BODY_MAX_BYTES', () => {
    const config = loadConfig({ BODY_MAX_BYTES: '8192', EVENT_MAX_BYTES: '4096' });
    expect(config.smallBodyMaxBytes).toBe(8192);
    expect(config.largeBodies.thresholdBytes).toBe(8192);
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

  it('parses the user a key is, percent-encoded, and the approve and act-as scopes', () => {
    const keys = parseApiKeys(
      'k-ana-aaaaaaaaaaaaaa=acme:read,approve:Ana%20Lima;k-l-aaaaaaaaaaaaaaaa=acme:read:%C5%81ukasz%3A1;k-gw-aaaaaaaaaaaaaaa=acme:read,approve,act-as',
    );
    expect(keys.map((k) => [k.tenantId, [...k.scopes], k.principal])).toEqual([
      ['acme', ['read', 'approve'], 'Ana Lima'],
      ['acme', ['read'], 'Łukasz:1'],
      ['acme', ['read', 'approve', 'act-as'], undefined],
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
    ['key-aaaaaaaaaaaaaaaa=tenantA:read:%E0%A4', /entry 1 has a user that is not/],
    ['key-aaaaaaaaaaaaaaaa=tenantA:read:key:x', /entry 1 is malformed/],
    ['key-aaaaaaaaaaaaaaaa=tenantA:read:key%3Ax', /entry 1 has a user that is not/],
  ])('refuses %s', (text, rule) => {
    expect(() => parseApiKeys(text)).toThrow(rule);
    expect(() => loadConfig({ RUNLEDGER_API_KEYS: text })).toThrow(/RUNLEDGER_API_KEYS/);
  });
});

describe('docs/configuration.md', () => {
  const doc = readFileSync(
    join(__dirname, '..', '..', '..', '..', 'docs', 'configuration.md'),
    'utf8',
  );
  const documented = [...doc.matchAll(/^\| `([A-Z_]+)`/gm)].map((match) => match[1]);

  it('has one row for every variable the service reads, and none for another', () => {
    expect([...documented].sort()).toEqual([...CONFIG_VARIABLES].sort());
  });
});
