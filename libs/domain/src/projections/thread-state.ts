/**
 * The thread read model's state and the contract of its pure fold. `evolveThread` is the
 * only way a thread view changes: the projector applies it live, and a rebuild applies it
 * to the same events from scratch, so the two always agree.
 */

/** One recorded event as the projections see it: parsed once, shared by every fold. */
export interface ProjectedEvent {
  id: string;
  type: string;
  data: Record<string, unknown>;
  /** Server-stamped: tenantId, runId, threadId (plus client metadata). */
  metadata: Record<string, unknown>;
  revision: number;
  position: number;
  recordedAt: string;
}

export type ToolPartState =
  | 'input-available'
  | 'approval-requested'
  | 'approval-responded'
  | 'output-available'
  | 'output-error'
  | 'output-denied';

/** A Vercel AI SDK UIMessage tool part (`ai` package v5 `validateUIMessages` accepts it). */
export interface ToolPart {
  type: `tool-${string}`;
  toolCallId: string;
  state: ToolPartState;
  input?: unknown;
  output?: unknown;
  errorText?: string;
  approval?: { id: string; approved?: boolean; reason?: string };
}

export interface TextPart {
  type: 'text';
  text: string;
}

export type UIMessagePart = TextPart | ToolPart;

/** Where a message came from: typed, spoken (transcript) or tool activity. */
export type MessageSource = 'message' | 'transcript' | 'tool';

export interface UIMessage {
  id: string;
  role: 'user' | 'assistant' | 'system';
  parts: UIMessagePart[];
  metadata?: {
    runId: string;
    source: MessageSource;
    position: number;
    /**
     * The client's id (`messageId`, `utteranceId`), only when `id` is not it: another source's
     * message held it, and the view's id was prefixed with the source (`message:<id>`).
     */
    clientId?: string;
  };
}

export type ThreadStatus = 'running' | 'blocked' | 'idle' | 'finished';

export interface RunSummary {
  runId: string;
  status: 'running' | 'completed' | 'failed' | 'cancelled';
  agent: string;
  source: string;
  startedAt: string;
  finishedAt?: string;
  activeTurnId: string | null;
}

export interface PendingApproval {
  approvalId: string;
  runId: string;
  toolCallId: string;
  toolName: string;
  /** Absent when too large to keep here (see PENDING_DETAIL_MAX_CHARS): the tool part has it. */
  input?: unknown;
  /** Its input's size as JSON, when the input is not kept here. */
  inputChars?: number;
  /** Cut to PENDING_DETAIL_MAX_CHARS characters when longer. */
  question?: string;
  /** The whole question's length, when `question` was cut. */
  questionChars?: number;
  /** Absent when too large to keep here; the approval.requested event has them. */
  options?: string[];
  /** The options' size as JSON, when they are not kept here. */
  optionsChars?: number;
  requestedAt: string;
}

export interface ActiveTool {
  toolCallId: string;
  toolName: string;
  /** For people: "Reading page: Roadmap" (tool-labels.ts); never replayed as speech. */
  label: string;
  runId: string;
  startedAt: string;
}

export interface ThreadState {
  tenantId: string;
  threadId: string;
  title: string | null;
  status: ThreadStatus;
  runs: RunSummary[];
  messages: UIMessage[];
  pendingApprovals: PendingApproval[];
  activeTools: ActiveTool[];
  lastActivityAt: string;
  /** Position of the last event folded in. */
  position: number;
}
