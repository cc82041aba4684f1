/**
 * Where the mirror publishes: a sink takes encoded run events in log order and resolves only
 * once the destination acknowledged them all. Adapters: `kafka.event-sink.ts`.
 */
import type { MirrorMessage } from './run-event.codec';

export interface EventSink {
  /**
   * Publishes the messages, keeping their order per key; resolves when every one is
   * acknowledged. Rejects with `RejectedMessageError` when the destination refuses a message
   * as it is (retrying cannot help), with any other error when it may help.
   */
  publish(messages: readonly MirrorMessage[]): Promise<void>;
  /** Connects (and creates the destination) ahead of the first publish; a failure here is only a warning. */
  prepare?(): Promise<void>;
  close(): Promise<void>;
}

/** The destination refused a message for what it is (too large, invalid): retrying the same bytes cannot succeed. */
export class RejectedMessageError extends Error {
  readonly code = 'message_rejected';
  constructor(
    readonly reason: string,
    readonly eventIds: readonly string[],
  ) {
    super(`the broker refused ${eventIds.length} message(s) (${eventIds.join(', ')}): ${reason}`);
    this.name = 'RejectedMessageError';
  }
}
