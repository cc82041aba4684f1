/**
 * How another service consumes runledger: a kafkajs consumer of the mirror's topic that
 * decodes each `runledger.v1.RunEvent` (protobuf, or JSON when the mirror runs with
 * MIRROR_FORMAT=json), drops the copies it has seen (delivery is at-least-once), and prints
 * each run's events in order, flagging a revision gap (a parked event: it arrives when an
 * operator re-drives it).
 *
 *   KAFKA_BROKERS=127.0.0.1:19092 npm run consume -- [--from-beginning] [--idle-exit-ms=5000]
 *
 * It depends only on published parts: `@runledger/client`, whose `decodeRunEvent` decodes
 * with code generated from proto/runledger/v1/run_event.proto (a service in another
 * language generates its own from the .proto), and kafkajs.
 */
import { Kafka, logLevel, type IHeaders } from 'kafkajs';
import { decodeRunEvent } from '@runledger/client';

function header(headers: IHeaders | undefined, name: string): string | undefined {
  const value = headers?.[name];
  return value === undefined ? undefined : String(value);
}

/**
 * Events already handled, by tenant and event id: ids are unique within a tenant, and two
 * tenants may send the same one. In memory here, bounded; a real service dedupes where it
 * writes (a unique key on tenant and event id in its own store), so it survives restarts too.
 */
class SeenIds {
  private readonly ids = new Set<string>();
  constructor(private readonly limit: number) {}

  /** True the first time a key is offered. */
  add(id: string): boolean {
    if (this.ids.has(id)) return false;
    this.ids.add(id);
    if (this.ids.size > this.limit) this.ids.delete(this.ids.values().next().value as string);
    return true;
  }
}

async function main(): Promise<void> {
  const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:19092').split(',');
  const topic = process.env.KAFKA_TOPIC ?? 'runledger.run-events';
  const groupId = process.env.GROUP_ID ?? 'runledger-example-consumer';
  const fromBeginning = process.argv.includes('--from-beginning');
  const idleArg = process.argv.find((a) => a.startsWith('--idle-exit-ms='));
  const idleExitMs = idleArg ? Number(idleArg.split('=')[1]) : undefined;

  const kafka = new Kafka({ clientId: 'runledger-example', brokers, logLevel: logLevel.WARN });
  const consumer = kafka.consumer({ groupId });
  const seen = new SeenIds(1_000_000);
  /** Next expected revision of each run, by tenant and run id (run ids are per tenant too). */
  const next = new Map<string, number>();
  let printed = 0;
  let duplicates = 0;
  let lastMessageAt = Date.now();

  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning });
  await consumer.run({
    // Offsets are committed after eachMessage returns: a crash before that re-delivers, and
    // the dedupe above absorbs it.
    eachMessage: async ({ message, partition }) => {
      lastMessageAt = Date.now();
      if (!message.value) return;
      const event = decodeRunEvent(message.value, header(message.headers, 'content-type'));
      const run = JSON.stringify([event.tenant, event.run]);
      if (!seen.add(JSON.stringify([event.tenant, event.id]))) {
        duplicates += 1;
        return;
      }
      const expected = next.get(run) ?? 0;
      if (event.revision > expected) {
        console.log(
          `run ${event.run} of tenant ${event.tenant}: revisions ${expected}..${event.revision - 1} not received yet (parked upstream, or consumed before this group started)`,
        );
      }
      next.set(run, Math.max(expected, event.revision + 1));
      printed += 1;
      console.log(
        `run ${event.run} #${event.revision} ${event.type} (tenant ${event.tenant}, position ${event.position}, partition ${partition}, ${event.recordedAt})`,
      );
    },
  });

  let stopping = false;
  const stop = async (why: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`${why}: ${printed} events printed, ${duplicates} duplicate copies dropped`);
    await consumer.disconnect();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop('interrupted'));
  process.once('SIGTERM', () => void stop('terminated'));
  if (idleExitMs !== undefined) {
    setInterval(() => {
      if (Date.now() - lastMessageAt > idleExitMs) void stop(`idle for ${idleExitMs} ms`);
    }, 250);
  }
}

main().catch((error: unknown) => {
  console.error('kafka-consumer failed:', error);
  process.exit(1);
});
