/**
 * The v1 event catalogue's type names. Versioned string constants, never class names
 * (docs/architecture.md, "Choices"): these strings are the wire format and live forever.
 */
export const EVENT_TYPES = [
  'run.started',
  'run.finished',
  'turn.started',
  'turn.finished',
  'turn.steered',
  'message.added',
  'transcript.added',
  'model.call',
  'tool.started',
  'tool.finished',
  'approval.requested',
  'approval.resolved',
  'append.rejected',
] as const;

export type EventType = (typeof EVENT_TYPES)[number];

/** Written only by server commands; the public append path refuses them (403). */
export const SERVER_ONLY_TYPES: ReadonlySet<EventType> = new Set<EventType>([
  'turn.steered',
  'approval.resolved',
  'append.rejected',
]);

export function isEventType(value: unknown): value is EventType {
  return typeof value === 'string' && (EVENT_TYPES as readonly string[]).includes(value);
}

export const RUN_SOURCES = ['typed', 'voice', 'telegram', 'api'] as const;
export const END_STATUSES = ['completed', 'failed', 'cancelled'] as const;
export const MESSAGE_ROLES = ['user', 'assistant', 'system'] as const;
export const TRANSCRIPT_ROLES = ['user', 'assistant'] as const;
export const DECISIONS = ['allow', 'deny'] as const;

export type RunSource = (typeof RUN_SOURCES)[number];
export type EndStatus = (typeof END_STATUSES)[number];
export type MessageRole = (typeof MESSAGE_ROLES)[number];
export type TranscriptRole = (typeof TRANSCRIPT_ROLES)[number];
export type Decision = (typeof DECISIONS)[number];
