/**
 * A consumer's side of the Kafka topic: the `runledger.v1.RunEvent` of a record's value, in
 * either format the mirror publishes (protobuf, or JSON with MIRROR_FORMAT=json), chosen by
 * the record's `content-type` header (protobuf when absent), with `data` parsed. Decoded
 * with code generated from proto/runledger/v1/run_event.proto, shipped in this package.
 */
import { fromBinary } from '@bufbuild/protobuf';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import { RunEventSchema } from './gen/runledger/v1/run_event_pb';

/** A mirrored run event: the RunEvent fields in camelCase, `data` as recorded (and hashed). */
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

const utf8 = new TextDecoder();

export function decodeRunEvent(value: Uint8Array, contentType: string | undefined): RunEventJson {
  if (contentType?.startsWith('application/json')) {
    return JSON.parse(utf8.decode(value)) as RunEventJson;
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
    data: JSON.parse(utf8.decode(message.data)) as unknown,
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
