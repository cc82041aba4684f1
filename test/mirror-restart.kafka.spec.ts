/**
 * The standalone mirror (the built `services/mirror`, as `npm run start:mirror` runs it)
 * killed with SIGKILL mid-stream and started again: it resumes from the checkpoint in
 * DATA_DIR/mirror.db and no event is missing (duplicates allowed: consumers dedupe by id).
 * The api runs in this process on the same DATA_DIR without KAFKA_BROKERS, as in the
 * "api replicas + one mirror" layout; the mirror follows the SQLite log from its process.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { MIRROR_FILE, MirrorStore } from '@runledger/mirror';
import { startTestApp, type TestApp } from '../services/api/src/testing/test-app';
import {
  describeKafka,
  inParallel,
  kafkaBrokers,
  RunEventCollector,
  uniqueTopic,
} from './kafka/kafka-test-support';
import {
  makeTempDir,
  MIRROR_MAIN,
  spawnService,
  type ServiceProcess,
} from './support/service-process';

jest.setTimeout(240_000);

const KEYS = 'key-tenant-a-0123456789=tenant-a:append,read,admin';
const STARTED_LINE = /"mirroring run events to Kafka".*"fromPosition":(\d+)/;

function startMirror(dataDir: string, topic: string): ServiceProcess {
  return spawnService(
    {
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      RUNLEDGER_API_KEYS: KEYS,
      KAFKA_BROKERS: kafkaBrokers().join(','),
      KAFKA_TOPIC: topic,
      KAFKA_PARTITIONS: '4',
      MIRROR_PORT: '0',
      MIRROR_RETRY_MAX_MS: '500',
      LOG_LEVEL: 'log',
    },
    MIRROR_MAIN,
  );
}

async function fromPositionOf(mirror: ServiceProcess): Promise<number> {
  const [, position] = await mirror.waitForLine(STARTED_LINE, 30_000);
  return Number(position);
}

describeKafka('the standalone mirror killed with SIGKILL', () => {
  let api: TestApp;
  let dataDir: string;
  beforeAll(async () => {
    dataDir = makeTempDir('runledger-mirror-');
    api = await startTestApp({ DATA_DIR: dataDir });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('resumes from its checkpoint after kill -9, and no event is missing', async () => {
    const topic = uniqueTopic('kill');
    const consumer = new RunEventCollector(topic);
    let mirror = startMirror(dataDir, topic);
    try {
      expect(await fromPositionOf(mirror)).toBe(0);
      await consumer.start();

      const runIds = Array.from({ length: 60 }, () => `run-${randomUUID()}`);
      const appending = inParallel(runIds, 20, async (runId) => {
        for (let sent = 0; sent < 50; sent += 5) {
          const events = Array.from({ length: 5 }, (_, i) =>
            sent + i === 0
              ? {
                  type: 'run.started',
                  data: { threadId: `t-${runId}`, agent: 'a', source: 'api' },
                }
              : {
                  type: 'message.added',
                  data: { messageId: randomUUID(), role: 'user', text: `${sent + i}` },
                },
          );
          const res = await api
            .http()
            .post(`/v1/runs/${runId}/events`)
            .set(api.auth())
            .send({ events });
          if (res.status !== 201) throw new Error(`append: ${res.status} ${res.text}`);
        }
      });

      await consumer.waitForUnique(600, 60_000);
      await mirror.kill('SIGKILL');
      const store = new MirrorStore(join(dataDir, MIRROR_FILE), { topic });
      const checkpoint = store.checkpoint();
      store.close();
      expect(checkpoint).toBeGreaterThan(0);
      await appending;

      mirror = startMirror(dataDir, topic);
      expect(await fromPositionOf(mirror)).toBe(checkpoint);
      await consumer.waitForUnique(3000, 120_000);
      expect(consumer.unique.size).toBe(3000);
      expect(consumer.runsOutOfOrder()).toEqual([]);
      for (const runId of runIds) expect(consumer.byRun.get(runId)).toHaveLength(50);
    } finally {
      await consumer.stop();
      await mirror.kill('SIGTERM');
    }
  });
});
