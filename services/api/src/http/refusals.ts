/**
 * The one table that turns the domain's refusals (run-decider.ts, run-rules.ts) and the
 * store's concurrency refusal into HTTP answers. Services express a rule by refusing, never
 * by choosing a status.
 */
import { RefusedError, type RefusalCode } from '@runledger/domain';
import { EventIdConflictError, WrongExpectedRevisionError } from '@runledger/event-store';
import { ApiError } from './api-error';

export const REFUSAL_STATUS: Record<RefusalCode, number> = {
  run_not_found: 404,
  approval_not_found: 404,
  run_already_started: 409,
  run_finished: 409,
  turn_already_active: 409,
  turn_not_active: 409,
  steer_conflict: 409,
  already_resolved: 409,
  approval_superseded: 409,
  tool_finished: 409,
  no_pending_approval: 409,
  ambiguous: 409,
  receipt_refused: 403,
  receipt_not_found: 404,
  receipt_already_used: 409,
};

/** The HTTP answer for a refusal, or null for any other error. */
export function refusalToApiError(error: unknown): ApiError | null {
  if (error instanceof RefusedError) {
    const { code, message, details, fields } = error.refusal;
    return new ApiError(REFUSAL_STATUS[code], code, message, details, fields);
  }
  if (error instanceof EventIdConflictError) {
    // The store's message names its stream (`run-<tenant>-<run>`); the client is told of its id.
    const message = `event id ${error.eventId} ${error.detail}`;
    return new ApiError(409, 'event_id_conflict', message, { eventId: error.eventId });
  }
  if (error instanceof WrongExpectedRevisionError) {
    const revisions = { expectedRevision: error.expected, actualRevision: error.actual };
    // In `details` like every error's facts, and at the top like the other 409s' (docs/api.md:
    // 409 `wrong_expected_revision` with `actualRevision`).
    return new ApiError(
      409,
      'wrong_expected_revision',
      `expected revision ${String(error.expected)}, actual ${String(error.actual)}`,
      revisions,
      revisions,
    );
  }
  return null;
}
