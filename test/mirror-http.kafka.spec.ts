/**
 * The standalone mirror's own HTTP server (probes, metrics, parked events) meets hostile
 * clients as the api does: a stranger's body is never read, a body over its route's limit
 * is refused before it is read, and a request that stops short is answered 408 and cut off.
 * Before, it listened with Fastify's defaults: a 1 MiB body limit for anyone, checked before
 * the key, and node:http's timeouts (a trickled request held for a minute).
 */
import { postBody, postHead, rawRequest } from './hostile/hostile-support';
import { describeKafka, kafkaBrokers, uniqueTopic } from './kafka/kafka-test-support';
import {
  freePort,
  makeTempDir,
  MIRROR_MAIN,
  spawnService,
  type RunningService,
  type ServiceProcess,
} from './support/service-process';

jest.setTimeout(60_000);

const ADMIN_KEY = 'mirror-admin-tenant-a-0123456789';
const MIB = 1024 * 1024;
const NESTED = Buffer.concat([Buffer.alloc(8 * MIB, '['), Buffer.alloc(8 * MIB, ']')]);
const RETRY_PATH = '/v1/admin/mirror/parked/no-such-event/retry';

describeKafka('the standalone mirror under hostile HTTP clients', () => {
  let mirror: ServiceProcess;
  let service: RunningService;

  beforeAll(async () => {
    const dataDir = makeTempDir('runledger-mirror-http-');
    const port = await freePort();
    mirror = spawnService(
      {
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        RUNLEDGER_API_KEYS: `${ADMIN_KEY}=tenant-a:admin`,
        KAFKA_BROKERS: kafkaBrokers().join(','),
        KAFKA_TOPIC: uniqueTopic('mirror-http'),
        MIRROR_PORT: String(port),
        HTTP_REQUEST_TIMEOUT_MS: '2000',
        HTTP_HEADERS_TIMEOUT_MS: '1000',
      },
      MIRROR_MAIN,
    );
    await mirror.waitForLine(/probes, metrics and \/v1\/admin\/mirror on (\S+)/, 30_000);
    service = {
      process: mirror,
      baseUrl: `http://127.0.0.1:${port}`,
      port,
      dataDir,
      kill: (signal) => mirror.kill(signal),
    };
  });

  afterAll(async () => {
    await mirror?.kill('SIGTERM');
  });

  it('answers a 16 MiB body without a key 401 at once, unread', async () => {
    const answer = await postBody(service, RETRY_PATH, {}, NESTED);
    expect(answer.status).toBe(401);
    expect(JSON.parse(answer.body)).toMatchObject({ error: 'unauthorized' });
    expect(answer.ms).toBeLessThan(1000);
  });

  it("refuses a body over an admin route's limit 413 before reading it", async () => {
    const answer = await rawRequest(
      service,
      postHead(RETRY_PATH, { authorization: `Bearer ${ADMIN_KEY}`, 'Content-Length': MIB }),
    );
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toMatchObject({ error: 'body_too_large', limitBytes: 65_536 });
  });

  it('answers a body that stops short of its declared length 408 after HTTP_REQUEST_TIMEOUT_MS', async () => {
    const answer = await rawRequest(
      service,
      postHead(RETRY_PATH, { authorization: `Bearer ${ADMIN_KEY}`, 'Content-Length': 1000 }),
      '{"a":',
    );
    expect(answer.status).toBe(408);
    expect(answer.ms).toBeLessThan(5000);
  });

  it('still answers its probes', async () => {
    const live = await fetch(`${service.baseUrl}/health/live`);
    expect(live.status).toBe(200);
  });
});
