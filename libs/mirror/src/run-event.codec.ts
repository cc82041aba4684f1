/**
 * The mirror's wire format: a recorded run event as a Kafka message (key, headers, value)
 * in protobuf `runledger.v1.RunEvent` (proto/runledger/v1/run_event.proto) or JSON, and
 * back. An event that cannot be encoded faithfully is refused with an `UnencodableEventError`
 * naming why; the mirror parks it instead of publishing something a consumer would misread.
 */
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { timestampDate, timestampFromDate } from '@bufbuild/protobuf/wkt';
import { canonicalJson, RUN_STREAM_PREFIX, runStream } from '@runledger/domain';
import type { RecordedEvent } from '@runledger/event-store';
import {
  RunEventSchema,
  TruncationSchema,
  type RunEvent,
  type Truncation,
} from './gen/runledger/v1/run_event_pb';

export type MirrorFormat = 'protobuf' | 'json';

export const CONTENT_TYPES: Record<MirrorFormat, string> = {
  protobuf: 'application/x-protobuf; messageType=runledger.v1.RunEvent',
  json: 'application/json',
};

/** What a sink publishes: the Kafka record of one event, with the event's identity beside it. */
export interface MirrorMessage {
  eventId: string;
  position: number;
  /** The run id: one run's events share a partition, so they keep their order. */
  key: string;
  value: Buffer;
  headers: Record<string, string>;
}

/** A run event as the JSON format carries it (MIRROR_FORMAT=json): the RunEvent fields, data inline. */
export interface RunEventJson {
  id: string;
  type: string;
  tenant: string;
  thread: string;
  run: string;
  revision: number;
  position: number;
  recordedAt: string;
  data: unknown;
  truncation?: {
    originalByteLength: number;
    limitBytes: number;
    omittedMessageCount: number;
    clampedParts: number;
  };
  hash: string;
  prevHash: string;
}

export class UnencodableEventError extends Error {
  readonly code = 'unencodable_event';
  constructor(
    readonly eventId: string,
    readonly position: number,
    readonly reason: string,
  ) {
    super(`event ${eventId} at position ${position} cannot be encoded: ${reason}`);
    this.name = 'UnencodableEventError';
  }
}

const STAMP_FIELDS = [
  'originalByteLength',
  'limitBytes',
  'omittedMessageCount',
  'clampedParts',
] as const;

/** The fields both formats carry, checked once; throws UnencodableEventError. */
function fieldsOf(event: RecordedEvent): Omit<RunEventJson, 'data'> & { dataJson: string } {
  const refuse = (reason: string): never => {
    throw new UnencodableEventError(event.id, event.position, reason);
  };
  if (!event.stream.startsWith(RUN_STREAM_PREFIX))
    refuse(`stream ${event.stream} is not a run stream`);
  const meta = event.metadata;
  const text = (name: string, required: boolean): string => {
    const value = meta[name];
    if (typeof value === 'string' && value !== '') return value;
    if (value === undefined && !required) return '';
    return refuse(`metadata.${name} is ${value === undefined ? 'missing' : 'not a string'}`);
  };
  const run = text('runId', true);
  const tenant = text('tenantId', true);
  if (runStream(tenant, run) !== event.stream)
    refuse(
      `metadata.tenantId ${tenant} and runId ${run} do not name the event's stream ${event.stream}`,
    );
  if (!Number.isSafeInteger(event.revision) || event.revision < 0)
    refuse(`revision ${event.revision} is not a non-negative integer`);
  if (!Number.isSafeInteger(event.position) || event.position < 1)
    refuse(`position ${event.position} is not a positive integer`);
  const recordedAt = new Date(event.recordedAt);
  if (Number.isNaN(recordedAt.getTime())) refuse(`recordedAt ${event.recordedAt} is not a date`);
  if (event.data === null || typeof event.data !== 'object' || Array.isArray(event.data))
    refuse('data is not a JSON object');
  let dataJson = '';
  try {
    dataJson = canonicalJson(event.data);
  } catch (error) {
    refuse(`data has no canonical JSON form (${String(error)})`);
  }
  const stamp = (event.data as Record<string, unknown>).truncation;
  let truncation: RunEventJson['truncation'];
  if (stamp !== undefined) {
    if (stamp === null || typeof stamp !== 'object') refuse('data.truncation is not an object');
    const fields = stamp as Record<string, unknown>;
    for (const name of STAMP_FIELDS) {
      const value = fields[name];
      if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0)
        refuse(`data.truncation.${name} is not a non-negative integer`);
    }
    truncation = {
      originalByteLength: fields.originalByteLength as number,
      limitBytes: fields.limitBytes as number,
      omittedMessageCount: fields.omittedMessageCount as number,
      clampedParts: fields.clampedParts as number,
    };
  }
  return {
    id: event.id,
    type: event.type,
    tenant,
    thread: text('threadId', false),
    run,
    revision: event.revision,
    position: event.position,
    recordedAt: recordedAt.toISOString(),
    truncation,
    hash: text('hash', false),
    prevHash: text('prevHash', false),
    dataJson,
  };
}

/** The protobuf message of a recorded event; throws UnencodableEventError. */
export function toRunEvent(event: RecordedEvent): RunEvent {
  return runEventOf(fieldsOf(event));
}

function runEventOf(fields: ReturnType<typeof fieldsOf>): RunEvent {
  return create(RunEventSchema, {
    id: fields.id,
    type: fields.type,
    tenant: fields.tenant,
    thread: fields.thread,
    run: fields.run,
    revision: BigInt(fields.revision),
    position: BigInt(fields.position),
    recordedAt: timestampFromDate(new Date(fields.recordedAt)),
    data: Buffer.from(fields.dataJson, 'utf8'),
    truncation: fields.truncation && truncationMessage(fields.truncation),
    hash: fields.hash,
    prevHash: fields.prevHash,
  });
}

function truncationMessage(stamp: NonNullable<RunEventJson['truncation']>): Truncation {
  return create(TruncationSchema, {
    originalByteLength: BigInt(stamp.originalByteLength),
    limitBytes: BigInt(stamp.limitBytes),
    omittedMessageCount: BigInt(stamp.omittedMessageCount),
    clampedParts: BigInt(stamp.clampedParts),
  });
}

/** The Kafka record of a recorded event in the chosen format; throws UnencodableEventError. */
export function encodeRunEvent(event: RecordedEvent, format: MirrorFormat): MirrorMessage {
  const fields = fieldsOf(event);
  let value: Buffer;
  if (format === 'protobuf') {
    const bytes = toBinary(RunEventSchema, runEventOf(fields));
    value = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  } else {
    const { dataJson, ...rest } = fields;
    // The data's canonical text is spliced in as it is: parsing it back only to print it
    // again would cost a second serialisation of a possibly large event.
    const head = JSON.stringify({ ...rest, truncation: rest.truncation });
    value = Buffer.from(`${head.slice(0, -1)},"data":${dataJson}}`, 'utf8');
  }
  return {
    eventId: fields.id,
    position: fields.position,
    key: fields.run,
    value,
    headers: {
      'event-id': fields.id,
      'event-type': fields.type,
      'tenant-id': fields.tenant,
      position: String(fields.position),
      'content-type': CONTENT_TYPES[format],
    },
  };
}

/**
 * A consumer's side: the RunEvent of a Kafka value in either format, with `data` parsed.
 * Chooses the format from the content-type header (protobuf when absent).
 */
export function decodeRunEvent(
  value: Buffer | Uint8Array,
  contentType: string | undefined,
): RunEventJson {
  if (contentType?.startsWith('application/json')) {
    return JSON.parse(Buffer.from(value).toString('utf8')) as RunEventJson;
  }
  const message = fromBinary(RunEventSchema, value);
  const stamp = message.truncation;
  return {
    id: message.id,
    type: message.type,
    tenant: message.tenant,
    thread: message.thread,
    run: message.run,
    revision: Number(message.revision),
    position: Number(message.position),
    recordedAt: message.recordedAt ? timestampDate(message.recordedAt).toISOString() : '',
    data: JSON.parse(Buffer.from(message.data).toString('utf8')) as unknown,
    truncation: stamp && {
      originalByteLength: Number(stamp.originalByteLength),
      limitBytes: Number(stamp.limitBytes),
      omittedMessageCount: Number(stamp.omittedMessageCount),
      clampedParts: Number(stamp.clampedParts),
    },
    hash: message.hash,
    prevHash: message.prevHash,
  };
}
