/**
 * The request and response bodies of the HTTP API as OpenAPI schemas (served at
 * /docs-json). Documentation classes only: the write path validates with the domain's
 * schemas and the command bodies, and `openapi.int.spec.ts` checks every route is covered
 * here, against the running app.
 */
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { DECISIONS, EVENT_TYPES, RUN_SOURCES } from '@runledger/domain';
import { PROMPT_TEXT_MAX } from '../prompt/prompt-body';

const ANY_OBJECT = { type: 'object', additionalProperties: true } as const;
/** Any JSON value (OpenAPI 3.0 has no `{}` Nest can emit): object, array, string, number, boolean or null. */
const ANY_JSON = {
  nullable: true,
  anyOf: [
    ANY_OBJECT,
    { type: 'array', items: {} },
    { type: 'string' },
    { type: 'number' },
    { type: 'boolean' },
  ],
};
const THREAD_STATUSES = ['running', 'blocked', 'idle', 'finished'];
const TOOL_STATES = [
  'input-available',
  'approval-requested',
  'approval-responded',
  'output-available',
  'output-error',
  'output-denied',
];

export class Problem {
  @ApiPropertyOptional({ description: 'Index of the event in the batch, when it is one event’s' })
  index?: number;
  @ApiProperty({ example: 'data.text' }) field!: string;
  @ApiProperty({ example: 'isString' }) rule!: string;
  @ApiProperty() message!: string;
}

export class ErrorBody {
  @ApiProperty({ description: 'Stable machine-readable code', example: 'validation_failed' })
  error!: string;
  @ApiProperty({ description: 'What happened and what to do, for a person' })
  message!: string;
  @ApiPropertyOptional({
    description: 'Per-field problems (400), or the state a 409/429/503 refers to',
    oneOf: [{ type: 'array', items: { $ref: '#/components/schemas/Problem' } }, ANY_OBJECT],
  })
  details?: Problem[] | Record<string, unknown>;
  @ApiPropertyOptional({
    description:
      'How many problems there were, when `details` lists only the first: an error body is at most 4 KiB',
  })
  problemCount?: number;
}

class RecordedRef {
  @ApiProperty() revision!: number;
  @ApiProperty() position!: number;
  @ApiProperty({ enum: [true] }) truncated!: true;
}

class AppendedEvent {
  @ApiProperty() id!: string;
  @ApiProperty() revision!: number;
  @ApiProperty() position!: number;
}

class TruncatedEvent {
  @ApiProperty() id!: string;
  @ApiProperty() originalByteLength!: number;
}

export class ModelCallRefusedBody extends ErrorBody {
  @ApiProperty({ enum: ['refused'], description: 'Never dispatch this model call' })
  dispatch!: 'refused';
  @ApiProperty() originalByteLength!: number;
  @ApiProperty() limitBytes!: number;
  @ApiProperty({ type: RecordedRef, description: 'The reduced record that was written' })
  recorded!: RecordedRef;
  @ApiProperty() advice!: string;
  @ApiProperty() runId!: string;
  @ApiProperty() firstRevision!: number;
  @ApiProperty() lastRevision!: number;
  @ApiProperty({ description: 'Pass as `?minPosition=` to read your own write' })
  position!: number;
  @ApiProperty({
    type: [AppendedEvent],
    description: "Every event of the batch was recorded, the call's reduced",
  })
  events!: AppendedEvent[];
  @ApiProperty({ type: [TruncatedEvent], description: 'Events reduced to fit' })
  truncated!: TruncatedEvent[];
}

export class NewEvent {
  @ApiPropertyOptional({
    format: 'uuid',
    description: 'For idempotency: re-sending the same id and content answers the original',
  })
  id?: string;
  @ApiProperty({ enum: EVENT_TYPES, description: 'The catalogue type (docs/events.md)' })
  type!: string;
  @ApiProperty({ ...ANY_OBJECT, description: "The type's fields, strictly validated" })
  data!: Record<string, unknown>;
  @ApiPropertyOptional({ ...ANY_OBJECT, description: 'Free-form; server keys are overwritten' })
  metadata?: Record<string, unknown>;
}

export class AppendRequest {
  @ApiPropertyOptional({
    description: "The run's last revision, or `no_stream`, `stream_exists`, `any` (default)",
    oneOf: [
      { type: 'integer', minimum: 0 },
      { type: 'string', enum: ['no_stream', 'stream_exists', 'any'] },
    ],
  })
  expectedRevision?: number | 'no_stream' | 'stream_exists' | 'any';
  @ApiProperty({ type: [NewEvent], minItems: 1 })
  events!: NewEvent[];
}

export class AppendResponse {
  @ApiProperty() runId!: string;
  @ApiProperty() firstRevision!: number;
  @ApiProperty() lastRevision!: number;
  @ApiProperty({ description: 'Pass as `?minPosition=` to read your own write' })
  position!: number;
  @ApiProperty({ type: [AppendedEvent] }) events!: AppendedEvent[];
  @ApiPropertyOptional({ type: [TruncatedEvent], description: 'Events reduced to fit' })
  truncated?: TruncatedEvent[];
}

export class RecordedEvent {
  @ApiProperty() id!: string;
  @ApiProperty({ enum: EVENT_TYPES }) type!: string;
  @ApiProperty({ description: '0-based index in its run' }) revision!: number;
  @ApiProperty({ description: 'Global log position' }) position!: number;
  @ApiProperty({ format: 'date-time' }) recordedAt!: string;
  @ApiProperty({ ...ANY_OBJECT, nullable: true, description: 'Null only on an unreadable event' })
  data!: Record<string, unknown> | null;
  @ApiProperty({ ...ANY_OBJECT, description: 'With tenantId, runId, threadId, prevHash, hash' })
  metadata!: Record<string, unknown>;
  @ApiPropertyOptional({
    description:
      'Only on an event the store holds but cannot read (a damaged row), in a replay or a page of events: why. Its `data` is null and its `metadata` empty, and the chain breaks there',
  })
  unreadable?: string;
}

export class RunEventsPage {
  @ApiProperty() runId!: string;
  @ApiProperty({ type: [RecordedEvent] }) events!: RecordedEvent[];
  @ApiProperty({ type: 'integer', nullable: true, description: 'Null at the end of the run' })
  nextRevision!: number | null;
}

export class AuditVerdict {
  @ApiProperty() runId!: string;
  @ApiProperty() count!: number;
  @ApiProperty({ type: 'string', nullable: true }) headHash!: string | null;
  @ApiProperty() verified!: boolean;
  @ApiProperty({ type: 'integer', nullable: true }) firstBrokenRevision!: number | null;
}

export class ThreadSummary {
  @ApiProperty() threadId!: string;
  @ApiProperty({ type: 'string', nullable: true }) title!: string | null;
  @ApiProperty({ enum: THREAD_STATUSES }) status!: string;
  @ApiProperty({ format: 'date-time' }) lastActivityAt!: string;
  @ApiProperty() pendingApprovalCount!: number;
  @ApiProperty() position!: number;
}

export class ThreadListPage {
  @ApiProperty({ type: [ThreadSummary] }) threads!: ThreadSummary[];
  @ApiProperty({ type: 'string', nullable: true }) nextCursor!: string | null;
  @ApiProperty() position!: number;
}

class RunSummary {
  @ApiProperty() runId!: string;
  @ApiProperty({ enum: ['running', 'completed', 'failed', 'cancelled'] }) status!: string;
  @ApiProperty() agent!: string;
  @ApiProperty({ enum: RUN_SOURCES }) source!: string;
  @ApiProperty({ format: 'date-time' }) startedAt!: string;
  @ApiPropertyOptional({ format: 'date-time' }) finishedAt?: string;
  @ApiProperty({ type: 'string', nullable: true }) activeTurnId!: string | null;
}

class MessagePart {
  @ApiProperty({ description: '`text`, or `tool-<toolName>`', example: 'tool-shell' })
  type!: string;
  @ApiPropertyOptional() text?: string;
  @ApiPropertyOptional() toolCallId?: string;
  @ApiPropertyOptional({ enum: TOOL_STATES }) state?: string;
  @ApiPropertyOptional(ANY_JSON) input?: unknown;
  @ApiPropertyOptional(ANY_JSON) output?: unknown;
  @ApiPropertyOptional() errorText?: string;
  @ApiPropertyOptional(ANY_OBJECT) approval?: Record<string, unknown>;
}

export class UIMessage {
  @ApiProperty() id!: string;
  @ApiProperty({ enum: ['user', 'assistant', 'system'] }) role!: string;
  @ApiProperty({ type: [MessagePart], description: 'Vercel AI SDK UIMessage parts' })
  parts!: MessagePart[];
  @ApiPropertyOptional(ANY_OBJECT) metadata?: Record<string, unknown>;
}

class PendingApproval {
  @ApiProperty() approvalId!: string;
  @ApiProperty() runId!: string;
  @ApiProperty() toolCallId!: string;
  @ApiProperty() toolName!: string;
  @ApiPropertyOptional({
    ...ANY_JSON,
    description:
      'The input asked about; absent when over 4,096 characters of JSON, or past the first 16 pending inputs (the tool part has it)',
  })
  input?: unknown;
  @ApiPropertyOptional({ description: "The input's size as JSON, when `input` is absent" })
  inputChars?: number;
  @ApiPropertyOptional({
    description:
      'Cut to 4,096 characters, or to 256 past the first 16 pending approvals with long questions',
  })
  question?: string;
  @ApiPropertyOptional({ description: "The whole question's length, when `question` was cut" })
  questionChars?: number;
  @ApiPropertyOptional({
    type: [String],
    description:
      'Absent when over 4,096 characters of JSON, or over 256 past the first 16 pending approvals with long options (the approval.requested event has them)',
  })
  options?: string[];
  @ApiPropertyOptional({ description: "The options' size as JSON, when `options` is absent" })
  optionsChars?: number;
  @ApiProperty({ format: 'date-time' }) requestedAt!: string;
}

class ActiveTool {
  @ApiProperty() toolCallId!: string;
  @ApiProperty() toolName!: string;
  @ApiProperty({ description: 'For people, e.g. "Reading page: Roadmap"; never spoken' })
  label!: string;
  @ApiProperty() runId!: string;
  @ApiProperty({ format: 'date-time' }) startedAt!: string;
}

class MessagePageInfo {
  @ApiProperty({ description: 'Most messages the page could hold' }) limit!: number;
  @ApiProperty({
    type: 'string',
    nullable: true,
    description: 'Pass as `?before=` for the page of older messages; null when none',
  })
  before!: string | null;
  @ApiProperty() hasMore!: boolean;
}

export class ThreadView {
  @ApiProperty({ description: 'Messages in the whole thread' }) messageCount!: number;
  @ApiProperty({ type: MessagePageInfo }) page!: MessagePageInfo;
  @ApiProperty() threadId!: string;
  @ApiProperty({ type: 'string', nullable: true }) title!: string | null;
  @ApiProperty({ enum: THREAD_STATUSES }) status!: string;
  @ApiProperty({ type: [RunSummary] }) runs!: RunSummary[];
  @ApiProperty({ type: [UIMessage] }) messages!: UIMessage[];
  @ApiProperty({ type: [PendingApproval] }) pendingApprovals!: PendingApproval[];
  @ApiProperty({ type: [ActiveTool] }) activeTools!: ActiveTool[];
  @ApiProperty() position!: number;
}

class VoiceTurn {
  @ApiProperty({ enum: ['user', 'assistant'] }) role!: string;
  @ApiProperty() text!: string;
}

class VoiceSeedTool {
  @ApiProperty() toolCallId!: string;
  @ApiProperty() toolName!: string;
  @ApiProperty() label!: string;
}

export class VoiceSeed {
  @ApiProperty({ type: [VoiceTurn], description: 'Oldest first' }) turns!: VoiceTurn[];
  @ApiProperty() tokenEstimate!: number;
  @ApiProperty({ type: [VoiceSeedTool], description: 'Running now, outside the turn budget' })
  activeTools!: VoiceSeedTool[];
}

export class ToolResultText {
  @ApiProperty() toolCallId!: string;
  @ApiProperty() toolName!: string;
  @ApiProperty({ enum: TOOL_STATES }) state!: string;
  @ApiProperty() text!: string;
  @ApiProperty() truncated!: boolean;
  @ApiProperty() totalChars!: number;
  @ApiProperty() offset!: number;
}

export class SteerRequest {
  @ApiProperty({ maxLength: 256 }) expectedTurnId!: string;
  @ApiProperty({ maxLength: PROMPT_TEXT_MAX }) instruction!: string;
}

export class SteerResponse {
  @ApiProperty() runId!: string;
  @ApiProperty() turnId!: string;
  @ApiProperty() revision!: number;
  @ApiProperty() position!: number;
}

export class StopRequest {
  @ApiPropertyOptional({ maxLength: 4096 }) reason?: string;
}

export class StopResponse {
  @ApiProperty() runId!: string;
  @ApiProperty({ enum: ['cancelled'] }) status!: string;
  @ApiProperty() revision!: number;
  @ApiProperty() position!: number;
}

export class DecisionRequest {
  @ApiProperty({ enum: DECISIONS }) decision!: string;
}

export class Resolution {
  @ApiProperty() runId!: string;
  @ApiProperty() approvalId!: string;
  @ApiProperty() toolName!: string;
  @ApiProperty({ enum: DECISIONS }) requested!: string;
  @ApiProperty({ enum: DECISIONS, description: 'After policy: an allow may become a deny' })
  decision!: string;
  @ApiProperty() downgraded!: boolean;
  @ApiPropertyOptional() policyRule?: string;
  @ApiProperty() policyRevision!: string;
  @ApiProperty({ description: 'Signed, one-use: pass it to /v1/receipts/consume' })
  receipt!: string;
  @ApiProperty({ description: 'The receipt’s id, as the log records it' }) receiptId!: string;
  @ApiProperty({ format: 'date-time' }) expiresAt!: string;
  @ApiProperty() revision!: number;
  @ApiProperty() position!: number;
}

export class ConsumeRequest {
  @ApiProperty() receipt!: string;
  @ApiProperty({ maxLength: 1024 }) toolName!: string;
  @ApiProperty({ ...ANY_JSON, description: 'The exact input the approval was for' })
  input!: unknown;
  @ApiPropertyOptional({
    maxLength: 256,
    description: 'The tool call about to run: when given, it must be the one the receipt is for',
  })
  toolCallId?: string;
}

export class ConsumeResponse {
  @ApiProperty({ enum: [true] }) consumed!: true;
  @ApiProperty() receiptId!: string;
  @ApiProperty() approvalId!: string;
  @ApiProperty() runId!: string;
  @ApiProperty() threadId!: string;
  @ApiProperty() toolName!: string;
  @ApiProperty() position!: number;
}

export class ParkedEvent {
  @ApiProperty() eventId!: string;
  @ApiProperty() position!: number;
  @ApiProperty() stream!: string;
  @ApiProperty() type!: string;
  @ApiProperty({ type: 'string', nullable: true }) tenantId!: string | null;
  @ApiProperty() reason!: string;
  @ApiProperty({ format: 'date-time' }) parkedAt!: string;
  @ApiProperty() attempts!: number;
  @ApiProperty({ format: 'date-time' }) lastAttemptAt!: string;
  @ApiProperty({ type: 'string', format: 'date-time', nullable: true })
  redrivenAt!: string | null;
}

export class ParkedPage {
  @ApiProperty({ type: [ParkedEvent] }) parked!: ParkedEvent[];
  @ApiProperty({ type: 'integer', nullable: true }) nextAfter!: number | null;
}

export class RedrivenEvent {
  @ApiProperty({ type: ParkedEvent }) event!: ParkedEvent;
}

export class StreamTokenRequest {
  @ApiPropertyOptional({ description: 'The run whose stream the token opens (or threadId)' })
  runId?: string;
  @ApiPropertyOptional({ description: 'The thread whose stream the token opens (or runId)' })
  threadId?: string;
}

export class StreamTokenResponse {
  @ApiProperty({ description: 'Pass as `?token=` on the stream' }) token!: string;
  @ApiProperty({ enum: ['run', 'thread'] }) kind!: string;
  @ApiProperty() id!: string;
  @ApiProperty({ format: 'date-time' }) expiresAt!: string;
  @ApiProperty({ example: '/v1/threads/thread-1/stream?token=…' }) streamUrl!: string;
}

export class Notification {
  @ApiProperty() threadId!: string;
  @ApiProperty() runId!: string;
  @ApiProperty({ enum: ['blocked', 'finished'] }) kind!: string;
  @ApiProperty({ enum: ['blocked', 'completed', 'failed', 'cancelled'] }) state!: string;
  @ApiProperty({ type: 'string', nullable: true }) title!: string | null;
  @ApiProperty() summary!: string;
  @ApiProperty() position!: number;
  @ApiProperty({ enum: ['approval.requested', 'run.finished'] }) event!: string;
  @ApiProperty() eventId!: string;
  @ApiProperty({ format: 'date-time' }) recordedAt!: string;
  @ApiPropertyOptional() approvalId?: string;
  @ApiPropertyOptional() toolName?: string;
  @ApiPropertyOptional({ description: 'Cut to 4,096 characters when longer' })
  question?: string;
  @ApiPropertyOptional({ description: "The whole question's length, when `question` was cut" })
  questionChars?: number;
}

export class NotificationPage {
  @ApiProperty({ type: [Notification], description: 'Oldest first' })
  notifications!: Notification[];
  @ApiProperty({ description: 'Pass as `?after=` for the next page' }) nextAfter!: number;
  @ApiProperty({ description: "The caller's seen cursor" }) seen!: number;
  @ApiProperty() position!: number;
}

export class SeenRequest {
  @ApiProperty({ minimum: 0, description: 'Mark seen up to this position' }) position!: number;
}

export class SeenResponse {
  @ApiProperty() seen!: number;
}

export class BindingRequest {
  @ApiProperty({ example: 'telegram' }) channel!: string;
  @ApiProperty() account!: string;
  @ApiProperty() chat!: string;
  @ApiPropertyOptional({ description: 'A forum topic or sub-thread of the chat' }) topic?: string;
  @ApiPropertyOptional({ description: 'Bind to this thread instead of a new one' })
  threadId?: string;
}

export class Binding {
  @ApiProperty() bindingId!: string;
  @ApiProperty() threadId!: string;
  @ApiProperty() channel!: string;
  @ApiProperty() account!: string;
  @ApiProperty() chat!: string;
  @ApiPropertyOptional() topic?: string;
  @ApiProperty({
    description: "the user's name as recorded, or `key:<key id>` for a key acting as itself",
  })
  boundBy!: string;
  @ApiProperty({ format: 'date-time' }) boundAt!: string;
  @ApiProperty() position!: number;
}

export class BindingAnswer extends Binding {
  @ApiProperty({ description: 'True when this call bound it (201), false when found (200)' })
  created!: boolean;
}

export class BindingPage {
  @ApiProperty({ type: [Binding] }) bindings!: Binding[];
  @ApiProperty() nextAfter!: number;
  @ApiProperty() position!: number;
}

class ChannelKeyRef {
  @ApiProperty() channel!: string;
  @ApiProperty() account!: string;
  @ApiProperty() chat!: string;
  @ApiPropertyOptional() topic?: string;
}

export class PromptRequest {
  @ApiProperty({ description: "The user's words" }) text!: string;
  @ApiPropertyOptional({ enum: RUN_SOURCES }) source?: string;
  @ApiPropertyOptional() agent?: string;
  @ApiPropertyOptional() turnId?: string;
  @ApiPropertyOptional({ type: ChannelKeyRef, description: 'A binding of this thread' })
  binding?: ChannelKeyRef;
}

export class PromptAnswer {
  @ApiProperty() threadId!: string;
  @ApiProperty() runId!: string;
  @ApiProperty() turnId!: string;
  @ApiProperty() messageId!: string;
  @ApiProperty({ description: 'True when the prompt started a run' }) runStarted!: boolean;
  @ApiProperty() position!: number;
}
