/**
 * The append request's envelope, checked before any event is looked at:
 * `{ expectedRevision?, events: [...] }` and nothing else.
 */
import { isPlainObject, type Problem } from '@runledger/domain';
import type { ExpectedRevision } from '@runledger/event-store';

export interface AppendRequest {
  expectedRevision: ExpectedRevision;
  events: unknown[];
}

const NAMED_REVISIONS = new Set(['no_stream', 'stream_exists', 'any']);

export function parseAppendRequest(
  body: unknown,
  maxEvents: number,
): { ok: true; value: AppendRequest } | { ok: false; problems: Problem[] } {
  if (!isPlainObject(body)) {
    return {
      ok: false,
      problems: [{ field: 'body', rule: 'isObject', message: 'the body must be a JSON object' }],
    };
  }
  const problems: Problem[] = [];
  for (const key of Object.keys(body)) {
    if (key !== 'expectedRevision' && key !== 'events') {
      problems.push({ field: key, rule: 'whitelistValidation', message: `${key} is not allowed` });
    }
  }
  const { expectedRevision = 'any', events } = body;
  const revisionOk =
    (typeof expectedRevision === 'number' &&
      Number.isSafeInteger(expectedRevision) &&
      expectedRevision >= 0) ||
    (typeof expectedRevision === 'string' && NAMED_REVISIONS.has(expectedRevision));
  if (!revisionOk) {
    problems.push({
      field: 'expectedRevision',
      rule: 'isExpectedRevision',
      message:
        'expectedRevision must be a non-negative integer, "no_stream", "stream_exists" or "any"',
    });
  }
  if (!Array.isArray(events) || events.length === 0 || events.length > maxEvents) {
    problems.push({
      field: 'events',
      rule: 'arrayLength',
      message: `events must be an array of 1 to ${maxEvents} events`,
    });
  }
  if (problems.length > 0) return { ok: false, problems };
  return {
    ok: true,
    value: { expectedRevision: expectedRevision as ExpectedRevision, events: events as unknown[] },
  };
}
