/**
 * The Kafka sink, with kafkajs: an idempotent producer (acks from all in-sync replicas, one
 * request in flight) on topic KAFKA_TOPIC, created with KAFKA_PARTITIONS when missing.
 * Connects lazily inside `publish`, so a broker that is down at start-up is one more publish
 * failure for the mirror to retry, not a crash.
 */
import {
  ConfigResourceTypes,
  Kafka,
  logLevel,
  Partitioners,
  type Admin,
  type LogEntry,
  type Producer,
  type logCreator,
} from 'kafkajs';
import { RejectedMessageError, type EventSink } from './event-sink.port';
import { LogThrottle } from './log-throttle';
import type { MirrorMessage } from './run-event.codec';

/** kafkajs's own repeated lines are said at most once this often each (the mirror logs every failure). */
const KAFKAJS_LOG_INTERVAL_MS = 10_000;

export interface KafkaSinkSettings {
  brokers: readonly string[];
  topic: string;
  partitions: number;
  clientId?: string;
  /** How long one produce request may wait for the broker before it counts as failed. */
  requestTimeoutMs?: number;
  /**
   * The topic's record limit (`max.message.bytes`) the mirror creates it with, and checks an
   * existing topic against: topicMaxMessageBytes(EVENT_MAX_BYTES). Default: 4 MiB.
   */
  maxMessageBytes?: number;
  /**
   * How long `close` waits for a publish in flight and the producer's disconnect; a broker
   * that takes connections but never answers (frozen) must not hold a shutdown. Default 5 s.
   */
  closeGraceMs?: number;
  /** Where kafkajs's own warnings and errors go (default: nowhere; the mirror logs its failures). */
  log?: (level: 'error' | 'warn', message: string, extra: Record<string, unknown>) => void;
}

/**
 * Large enough for an event at EVENT_MAX_BYTES (1 MiB by default) plus its envelope; the
 * broker's own default (1 MiB) would refuse such an event.
 */
export const TOPIC_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

/** Room in a record beyond the event's data: ids, stamps, headers, the record batch. */
const ENVELOPE_ROOM_BYTES = 1024 * 1024;

/**
 * The topic record limit for events of at most `eventMaxBytes`: the data is spliced into the
 * record as recorded, so an EVENT_MAX_BYTES above 3 MiB needs a larger topic limit, or every
 * event between the two sizes would be parked as too large.
 */
export function topicMaxMessageBytes(eventMaxBytes: number): number {
  return Math.max(TOPIC_MAX_MESSAGE_BYTES, eventMaxBytes + ENVELOPE_ROOM_BYTES);
}

/** Protocol errors that say "this record, as it is, will never be accepted". */
const REFUSALS = new Set([
  'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE',
  'INVALID_RECORD',
  'CORRUPT_MESSAGE',
]);
/** Protocol errors after which the idempotent producer's sequence state is void: start a new one. */
const PRODUCER_RESETS = new Set([
  'OUT_OF_ORDER_SEQUENCE_NUMBER',
  'UNKNOWN_PRODUCER_ID',
  'INVALID_PRODUCER_EPOCH',
  'INVALID_PRODUCER_ID_MAPPING',
]);

/** The protocol error type anywhere in a kafkajs error's cause chain. */
export function kafkaErrorType(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth += 1) {
    const type = (current as { type?: unknown }).type;
    if (typeof type === 'string') return type;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

export class KafkaEventSink implements EventSink {
  private readonly kafka: Kafka;
  private producer: Producer | null = null;
  private connecting: Promise<Producer> | null = null;
  private topicReady = false;
  /** Publishes run one after another: the idempotent producer's sequence numbers need it. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly settings: KafkaSinkSettings) {
    const log = settings.log;
    const throttle = new LogThrottle(KAFKAJS_LOG_INTERVAL_MS);
    const creator: logCreator =
      () =>
      ({ level, log: entry }: LogEntry) => {
        const { message, ...extra } = entry;
        // Said once per producer because the mirror limits kafkajs's retries on purpose: its
        // own loop retries forever, counting and logging each failure.
        if (!log || message.startsWith('Limiting retries for the idempotent producer')) return;
        const repeats = throttle.admit(message);
        if (repeats === null) return;
        log(level === logLevel.ERROR ? 'error' : 'warn', `kafkajs: ${message}`, {
          ...extra,
          ...(repeats > 0 ? { repeatedSinceLast: repeats } : {}),
        });
      };
    this.kafka = new Kafka({
      clientId: settings.clientId ?? 'runledger-mirror',
      brokers: [...settings.brokers],
      logLevel: logLevel.WARN,
      logCreator: creator,
      connectionTimeout: 3000,
      requestTimeout: settings.requestTimeoutMs ?? 30_000,
      // The mirror retries with its own backoff, counting and logging each failure; kafkajs
      // only smooths over a leader move or a dropped connection.
      retry: { retries: 2, initialRetryTime: 200, maxRetryTime: 2000 },
    });
  }

  publish(messages: readonly MirrorMessage[]): Promise<void> {
    const run = this.queue.then(() => this.send(messages));
    this.queue = run.catch(() => undefined);
    return run;
  }

  async prepare(): Promise<void> {
    await this.connect();
  }

  /**
   * Lets a publish in flight finish, within the grace; one still unanswered then is left
   * behind: the mirror had not checkpointed its events, so they are published again when it
   * starts next (at least once).
   */
  async close(): Promise<void> {
    const deadline = Date.now() + (this.settings.closeGraceMs ?? 5000);
    const left = () => Math.max(0, deadline - Date.now());
    await within(this.queue, left());
    const producer =
      this.producer ??
      (await within(
        this.connecting?.catch(() => null),
        left(),
      )) ??
      null;
    this.producer = null;
    this.connecting = null;
    if (!producer) return;
    const disconnecting = producer.disconnect().catch((error: unknown) => {
      this.settings.log?.('warn', 'kafkajs: disconnecting the producer failed', {
        error: error instanceof Error ? error.message : String(error),
      });
    });
    await within(disconnecting, left());
  }

  private async send(messages: readonly MirrorMessage[]): Promise<void> {
    if (messages.length === 0) return;
    const producer = await this.connect();
    try {
      await producer.send({
        topic: this.settings.topic,
        acks: -1,
        timeout: this.settings.requestTimeoutMs ?? 30_000,
        messages: messages.map((m) => ({ key: m.key, value: m.value, headers: m.headers })),
      });
    } catch (error) {
      const type = kafkaErrorType(error);
      if (type !== undefined && REFUSALS.has(type)) {
        throw new RejectedMessageError(
          type,
          messages.map((m) => m.eventId),
        );
      }
      if (type !== undefined && PRODUCER_RESETS.has(type)) await this.dropProducer();
      if (type === 'UNKNOWN_TOPIC_OR_PARTITION') {
        // The topic was deleted under the mirror: the next attempt creates it again (created
        // once at start, it would otherwise be retried against forever, until a restart).
        this.topicReady = false;
        await this.dropProducer();
      }
      throw error;
    }
  }

  private async connect(): Promise<Producer> {
    if (this.producer) return this.producer;
    this.connecting ??= this.open().finally(() => (this.connecting = null));
    this.producer = await this.connecting;
    return this.producer;
  }

  private async open(): Promise<Producer> {
    if (!this.topicReady) {
      await this.ensureTopic();
      this.topicReady = true;
    }
    const producer = this.kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      // Java's partitioner (murmur2 of the key): a Java producer of the same keys agrees.
      createPartitioner: Partitioners.DefaultPartitioner,
      allowAutoTopicCreation: false,
    });
    try {
      await producer.connect();
    } catch (error) {
      await producer.disconnect().catch(() => undefined);
      throw error;
    }
    return producer;
  }

  private async ensureTopic(): Promise<void> {
    const admin: Admin = this.kafka.admin();
    await admin.connect();
    try {
      const wanted = this.settings.maxMessageBytes ?? TOPIC_MAX_MESSAGE_BYTES;
      const topics = await admin.listTopics();
      if (topics.includes(this.settings.topic)) {
        await this.checkTopicLimit(admin, wanted);
        return;
      }
      // createTopics answers false (not an error) when another mirror created it first.
      await admin.createTopics({
        waitForLeaders: true,
        topics: [
          {
            topic: this.settings.topic,
            numPartitions: this.settings.partitions,
            configEntries: [{ name: 'max.message.bytes', value: String(wanted) }],
          },
        ],
      });
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }

  /**
   * An existing topic is the operator's: its limit is not changed here, but one below what
   * EVENT_MAX_BYTES needs is said at once, not first met as parked events.
   */
  private async checkTopicLimit(admin: Admin, wanted: number): Promise<void> {
    const described = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [
        {
          type: ConfigResourceTypes.TOPIC,
          name: this.settings.topic,
          configNames: ['max.message.bytes'],
        },
      ],
    });
    const entry = described.resources[0]?.configEntries.find(
      (config) => config.configName === 'max.message.bytes',
    );
    const limit = Number(entry?.configValue);
    if (Number.isFinite(limit) && limit < wanted) {
      this.settings.log?.(
        'warn',
        `topic ${this.settings.topic} takes records of at most ${limit} bytes (max.message.bytes), ` +
          `under the ${wanted} an event at EVENT_MAX_BYTES needs: larger events will be parked ` +
          `until the topic's limit is raised`,
        { topic: this.settings.topic, maxMessageBytes: limit, needed: wanted },
      );
    }
  }

  private async dropProducer(): Promise<void> {
    const producer = this.producer;
    this.producer = null;
    await producer?.disconnect().catch(() => undefined);
  }
}

/** Waits for the work, or for `ms`, whichever comes first. */
async function within<T>(work: Promise<T> | undefined, ms: number): Promise<T | undefined> {
  if (work === undefined) return undefined;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
