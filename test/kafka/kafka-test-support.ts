/**
 * What the Kafka tests share: whether a broker is there (else the suites skip, loudly, see
 * global-setup.ts), stopping and starting it, and a consumer that collects a topic's run
 * events the way another service would (decode, dedupe by event id).
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { Kafka, logLevel, type Consumer } from 'kafkajs';
import { decodeRunEvent, type RunEventJson } from '@runledger/mirror';
import { KAFKA_SCRIPT, SKIP_VARIABLE } from './global-setup';

export function kafkaBrokers(): string[] {
  return (process.env.KAFKA_BROKERS ?? '').split(',').filter((b) => b !== '');
}

/** `describe` when a broker is there; else `describe.skip` (the global setup said why). */
export const describeKafka: jest.Describe =
  kafkaBrokers().length > 0 && !process.env[SKIP_VARIABLE] ? describe : describe.skip;

export function uniqueTopic(name: string): string {
  return `test.${name}.${randomUUID().slice(0, 8)}`;
}

export function kafkaClient(clientId = 'runledger-test'): Kafka {
  return new Kafka({
    clientId,
    brokers: kafkaBrokers(),
    logLevel: logLevel.NOTHING,
    retry: { retries: 3, initialRetryTime: 200 },
  });
}

/** Stops or starts the local broker (the tests' outage). */
export function broker(command: 'stop' | 'start'): void {
  const result = spawnSync('bash', [KAFKA_SCRIPT, command], { encoding: 'utf8', timeout: 180_000 });
  if (result.status !== 0) {
    throw new Error(`kafka-local.sh ${command} failed:\n${result.stderr}\n${result.stdout}`);
  }
}

export interface Received {
  event: RunEventJson;
  headers: Record<string, string>;
  key: string;
  partition: number;
}

/**
 * Reads a topic from the beginning with a fresh consumer group, decoding every message.
 * `unique` holds each event id once (the first copy), `all` every copy in arrival order.
 */
export class RunEventCollector {
  readonly all: Received[] = [];
  readonly unique = new Map<string, Received>();
  /** First copies per run, in arrival order. */
  readonly byRun = new Map<string, RunEventJson[]>();
  private consumer: Consumer | null = null;
  private readonly waiters = new Set<() => void>();

  constructor(private readonly topic: string) {}

  async start(): Promise<void> {
    const consumer = kafkaClient('runledger-test-consumer').consumer({
      groupId: `test-${randomUUID()}`,
      maxWaitTimeInMs: 100,
      retry: { retries: 10, initialRetryTime: 200 },
    });
    this.consumer = consumer;
    await waitForTopic(this.topic, 60_000);
    await consumer.connect();
    await consumer.subscribe({ topic: this.topic, fromBeginning: true });
    await consumer.run({
      eachBatch: async ({ batch }) => {
        for (const message of batch.messages) {
          const headers = Object.fromEntries(
            Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)]),
          );
          const event = decodeRunEvent(message.value ?? Buffer.alloc(0), headers['content-type']);
          const received = {
            event,
            headers,
            key: message.key?.toString('utf8') ?? '',
            partition: batch.partition,
          };
          this.all.push(received);
          if (!this.unique.has(event.id)) {
            this.unique.set(event.id, received);
            const run = this.byRun.get(event.run) ?? [];
            run.push(event);
            this.byRun.set(event.run, run);
          }
        }
        for (const waiter of [...this.waiters]) waiter();
      },
    });
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect();
    this.consumer = null;
  }

  /** Resolves once `count` distinct events arrived; rejects after `timeoutMs`, saying how many did. */
  waitForUnique(count: number, timeoutMs: number): Promise<void> {
    return this.waitUntil(
      () => this.unique.size >= count,
      timeoutMs,
      () => `${count} events`,
    );
  }

  waitUntil(done: () => boolean, timeoutMs: number, what: () => string): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!done()) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(
          new Error(
            `waited ${timeoutMs} ms for ${what()}; got ${this.unique.size} distinct of ${this.all.length} messages`,
          ),
        );
      }, timeoutMs);
      this.waiters.add(check);
    });
  }

  /** Runs whose first copies did not arrive as revisions 0, 1, 2, … with nothing missing. */
  runsOutOfOrder(): string[] {
    const bad: string[] = [];
    for (const [run, events] of this.byRun) {
      if (events.some((e, i) => e.revision !== i)) bad.push(run);
    }
    return bad;
  }
}

/** Resolves once `topic` exists (the mirror creates it at start-up). */
export async function waitForTopic(topic: string, timeoutMs: number): Promise<void> {
  const admin = kafkaClient().admin();
  await admin.connect();
  try {
    const deadline = Date.now() + timeoutMs;
    while (!(await admin.listTopics()).includes(topic)) {
      if (Date.now() > deadline)
        throw new Error(`topic ${topic} did not appear within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await admin.disconnect();
  }
}

/** Runs `task` over `items` with at most `limit` at once. */
export async function inParallel<T>(
  items: readonly T[],
  limit: number,
  task: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next];
      next += 1;
      await task(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
