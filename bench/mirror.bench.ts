/**
 * The Kafka mirror's throughput: events/s from the SQLite log to the broker's acknowledgement
 * (`MirrorFollower` + `KafkaEventSink`: read, encode to protobuf, publish, checkpoint) against
 * a raw kafkajs producer sending the same payloads in the same run. Target: ≥ 0.5× raw.
 *
 * Why the baseline is fair: the raw producer is configured like the mirror's (idempotent,
 * acks from all in-sync replicas, one request in flight, Java's partitioner) and sends the
 * very records the mirror sends (the same keys, values and headers, encoded beforehand, so it
 * pays for none of the reading or encoding), in batches of the mirror's batch size, each
 * awaited before the next. It skips only what the mirror adds on purpose: reading and
 * parsing the log, encoding, and committing the checkpoint after each acknowledgement.
 * Each contender publishes to its own fresh topic with the same partition count; they take
 * turns, and each ratio is taken within a round.
 *
 * Needs a broker: KAFKA_BROKERS, or the local one of scripts/kafka-local.sh (started here
 * when it is not running, and stopped again).
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Kafka, logLevel, Partitioners } from 'kafkajs';
import { SqliteEventStore } from '@runledger/event-store';
import {
  encodeRunEvent,
  KafkaEventSink,
  MirrorFollower,
  MirrorStore,
  type MirrorMessage,
  type MirrorObserver,
} from '@runledger/mirror';
import { count, median, ratio } from './lib/format';
import { codeRevision, describeMachine } from './lib/machine';
import { ROOT } from './lib/report';
import { writeRunLog } from './lib/run-log-fixture';
import type { Bench, Section } from './lib/section';

const EVENTS = 30_000;
const ROUNDS = 5;
const PARTITIONS = 6;
const BATCH = 500;
const TARGET_RATIO = 0.5;
const SCRIPT = join(ROOT, 'scripts', 'kafka-local.sh');

function script(command: 'status' | 'start' | 'stop'): { ok: boolean; out: string } {
  const result = spawnSync('bash', [SCRIPT, command], { encoding: 'utf8', timeout: 300_000 });
  if (command === 'start' && result.status !== 0) process.stderr.write(result.stderr);
  return { ok: result.status === 0, out: result.stdout.trim() };
}

async function createTopic(kafka: Kafka, topic: string): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    waitForLeaders: true,
    topics: [{ topic, numPartitions: PARTITIONS }],
  });
  await admin.disconnect();
}

/** Seconds from start until the mirror's checkpoint reaches the head of the log. */
async function runMirror(
  log: SqliteEventStore,
  brokers: string[],
  topic: string,
  dir: string,
  head: number,
): Promise<number> {
  const store = new MirrorStore(join(dir, `mirror-${topic}.db`));
  const sink = new KafkaEventSink({ brokers, topic, partitions: PARTITIONS });
  await sink.prepare();
  let failures = 0;
  const observer: MirrorObserver = {
    published: () => undefined,
    publishFailed: () => (failures += 1),
    recovered: () => undefined,
    parked: () => undefined,
    resubscribed: () => undefined,
  };
  const follower = new MirrorFollower(log, store, sink, observer, {
    format: 'protobuf',
    stallMs: 30_000,
    batchSize: BATCH,
  });
  const started = performance.now();
  follower.start();
  while (follower.current() < head) await new Promise((r) => setTimeout(r, 2));
  const seconds = (performance.now() - started) / 1000;
  await follower.stop();
  await sink.close();
  store.close();
  if (failures > 0) throw new Error(`the mirror saw ${failures} publish failures during the bench`);
  return seconds;
}

/** Seconds for a bare idempotent kafkajs producer to send `messages` in batches of BATCH. */
async function runRaw(kafka: Kafka, topic: string, messages: MirrorMessage[]): Promise<number> {
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: false,
  });
  await producer.connect();
  const started = performance.now();
  for (let i = 0; i < messages.length; i += BATCH) {
    await producer.send({
      topic,
      acks: -1,
      messages: messages
        .slice(i, i + BATCH)
        .map((m) => ({ key: m.key, value: m.value, headers: m.headers })),
    });
  }
  const seconds = (performance.now() - started) / 1000;
  await producer.disconnect();
  return seconds;
}

async function run(): Promise<Section> {
  let brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter((b) => b !== '');
  let startedHere = false;
  if (brokers.length === 0) {
    const status = script('status');
    const started = status.ok ? status : script('start');
    if (!started.ok)
      throw new Error('no Kafka broker: set KAFKA_BROKERS or install Java and Maven');
    startedHere = !status.ok;
    brokers = [started.out.split('\n').pop() ?? ''];
  }
  const dir = mkdtempSync(join(tmpdir(), 'runledger-bench-mirror-'));
  const kafka = new Kafka({ clientId: 'bench', brokers, logLevel: logLevel.NOTHING });
  try {
    const logSpec = {
      file: join(dir, 'runledger.db'),
      events: EVENTS,
      concurrentRuns: 200,
      runsPerThread: 3,
      turns: [2, 5] as [number, number],
      tenantId: 'bench',
      seed: 11,
    };
    const fixture = await writeRunLog(logSpec);
    const log = new SqliteEventStore({ file: fixture.file, synchronous: 'NORMAL' });
    const events = await log.readAll({ fromPosition: 0, maxCount: EVENTS + 1 });
    const messages = events.map((e) => encodeRunEvent(e, 'protobuf'));
    const meanBytes = messages.reduce((sum, m) => sum + m.value.length, 0) / messages.length;

    const mirrorRates: number[] = [];
    const rawRates: number[] = [];
    const ratios: number[] = [];
    // Warm-up: connections, JIT, the broker's first segments.
    const warm = `bench.warm.${randomUUID().slice(0, 8)}`;
    await createTopic(kafka, warm);
    await runRaw(kafka, warm, messages.slice(0, 5000));
    for (let round = 0; round < ROUNDS; round += 1) {
      const rawTopic = `bench.raw.${randomUUID().slice(0, 8)}`;
      const mirrorTopic = `bench.mirror.${randomUUID().slice(0, 8)}`;
      await createTopic(kafka, rawTopic);
      await createTopic(kafka, mirrorTopic);
      const order = round % 2 === 0 ? ['raw', 'mirror'] : ['mirror', 'raw'];
      let raw = 0;
      let mirrored = 0;
      for (const who of order) {
        if (who === 'raw') raw = messages.length / (await runRaw(kafka, rawTopic, messages));
        else
          mirrored =
            messages.length / (await runMirror(log, brokers, mirrorTopic, dir, fixture.head));
      }
      rawRates.push(raw);
      mirrorRates.push(mirrored);
      ratios.push(mirrored / raw);
      console.log(`round ${round + 1}: mirror ${count(mirrored)}/s, raw ${count(raw)}/s`);
    }
    await log.close();
    const measured = median(ratios);
    return {
      name: 'mirror',
      title: `Kafka mirror: log → broker acknowledgement vs a raw kafkajs producer (${count(EVENTS)} events)`,
      measuredAt: new Date().toISOString(),
      machine: describeMachine(),
      revision: codeRevision(),
      method: [
        `A realistic run log of ${count(EVENTS)} events (bench/lib/run-log-fixture.ts: 200 runs in flight, interleaved; mean protobuf value ${count(meanBytes)} bytes) in a SQLite file. The mirror (MirrorFollower + KafkaEventSink, protobuf, batches of up to ${BATCH} events or 512 KiB) follows it from position 0 with a fresh mirror.db and is timed from start until its checkpoint reaches the head, i.e. until the broker acknowledged the last event.`,
        `Baseline: a kafkajs producer configured as the mirror's (idempotent, acks=-1, one request in flight, Java's partitioner) sends the same records — the keys, protobuf values and headers the mirror sends, encoded before the clock starts — in batches of ${BATCH}, each awaited. Each contender writes to its own fresh ${PARTITIONS}-partition topic on the local single-node Apache Kafka broker (scripts/kafka-local.sh, KRaft, -Xmx512m) on the same 2 cores; they alternate in ${ROUNDS} rounds after a warm-up, and the ratio is the median of the per-round ratios.`,
      ],
      table: {
        columns: ['contender', 'events/s (median)', 'per round', 'vs raw'],
        rows: [
          [
            'mirror: log → protobuf → broker ack → checkpoint',
            count(median(mirrorRates)),
            mirrorRates.map(count).join(', '),
            ratio(measured),
          ],
          [
            'raw kafkajs producer, same records (baseline)',
            count(median(rawRates)),
            rawRates.map(count).join(', '),
            'baseline',
          ],
        ],
      },
      targets: [
        {
          subject: 'mirror events/s (log → broker ack) vs a raw kafkajs producer',
          target: `≥ ${TARGET_RATIO}× raw`,
          measured: `${ratio(measured, 3)} (${count(median(mirrorRates))} vs ${count(median(rawRates))} events/s)`,
          met: measured >= TARGET_RATIO,
        },
      ],
      notes: [
        "The broker, the bench and the mirror share the same 2 cores: the broker's JVM takes a large part of the CPU in both contenders, which narrows the gap between them.",
      ],
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    if (startedHere) script('stop');
  }
}

export const mirrorBench: Bench = { name: 'mirror', order: 45, run };
