/**
 * A position a client hands back (`Last-Event-ID`, `?from=`, `?after=`, a seen cursor) names
 * an event it was sent, so it is at most the log's head. One past it would skip, unseen,
 * every event up to it once the log gets there: refused with 400 naming the field.
 */
import type { EventStoreReader } from '@runledger/event-store';
import { ApiError } from './api-error';

/** The log's head position, once `position` (when given) is known to be at most it. */
export async function headAtLeast(
  log: EventStoreReader,
  field: string,
  position: number | undefined,
): Promise<number> {
  const head = await log.headPosition();
  if (position !== undefined && position > head) {
    const rule = `${field} must be at most the log's head position (${head})`;
    throw new ApiError(400, 'validation_failed', rule, [{ field, rule: 'max', message: rule }]);
  }
  return head;
}
