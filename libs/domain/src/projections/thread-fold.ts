/**
 * The thread view's fold (../shared/DESIGN.md, "Projections"): recorded events in, the
 * thread's state out. The projector applies it live and a rebuild applies it to the same
 * events from scratch, so the two agree (BACKGROUND.md §1 and §4 shaped the tool rules).
 *
 * `applyToThread` changes the state in place: a rebuild folds a million events, and a copy
 * per event would make that quadratic. `evolveThread` is the pure form: a copy, then apply.
 */
import type { EventDataByType } from '../event-catalogue';
import { EVENT_TYPES, type EndStatus, type EventType } from '../event-types';
import { toolLabel } from '../tool-labels';
import {
  indexOf,
  isTerminal,
  openToolOf,
  pushMessage,
  pushRun,
  toolKey,
  type ThreadIndex,
  type ToolLocation,
} from './thread-index';
import type {
  PendingApproval,
  ProjectedEvent,
  RunSummary,
  ThreadState,
  ThreadStatus,
  ToolPart,
  UIMessage,
} from './thread-state';

/** The tool name shown until some event names the call (a finish may carry no name). */
export const UNKNOWN_TOOL_NAME = 'unknown';

export function emptyThread(tenantId: string, threadId: string): ThreadState {
  return {
    tenantId,
    threadId,
    title: null,
    status: 'idle',
    runs: [],
    messages: [],
    pendingApprovals: [],
    activeTools: [],
    lastActivityAt: '',
    position: 0,
  };
}

/** The thread an event belongs to, from the server-stamped metadata; null when unstamped. */
export function threadOf(event: ProjectedEvent): { tenantId: string; threadId: string } | null {
  const { tenantId, threadId } = event.metadata;
  if (typeof tenantId !== 'string' || tenantId === '') return null;
  if (typeof threadId !== 'string' || threadId === '') return null;
  return { tenantId, threadId };
}

/** The pure fold: `state` is left as it was; the answer is a new state. */
export function evolveThread(state: ThreadState, event: ProjectedEvent): ThreadState {
  const next = structuredClone(state);
  applyToThread(next, event);
  return next;
}

/**
 * Folds one event into `state`, changing it in place (O(1) amortised per event).
 *
 * - An event of a type the thread view does not know is left out entirely.
 * - An event at a position below the state's position was already folded (a redelivery)
 *   and changes nothing; the fold expects events in position order.
 * - An event stamped for another tenant or thread is a routing error and throws.
 */
export function applyToThread(state: ThreadState, event: ProjectedEvent): void {
  if (!Object.hasOwn(HANDLERS, event.type)) return;
  if (event.position < state.position) return;
  const owner = threadOf(event);
  if (owner !== null && (owner.tenantId !== state.tenantId || owner.threadId !== state.threadId)) {
    throw new Error(
      `event ${event.id} at position ${event.position} belongs to thread ${owner.threadId} of tenant ${owner.tenantId}, ` +
        `not to thread ${state.threadId} of tenant ${state.tenantId}: it was not folded`,
    );
  }
  const handler = HANDLERS[event.type as EventType];
  const index = indexOf(state);
  if (handler !== IGNORED) {
    const runId = typeof event.metadata.runId === 'string' ? event.metadata.runId : '';
    const fold = { state, index, event, runId };
    (handler as Handler<EventType>)(fold, event.data as never);
  }
  state.position = event.position;
  state.lastActivityAt = event.recordedAt;
  state.status = statusOf(state, index);
}

/** What the thread list shows for a thread. */
export interface ThreadSummary {
  threadId: string;
  title: string | null;
  status: ThreadStatus;
  lastActivityAt: string;
  pendingApprovalCount: number;
  position: number;
}

export function threadSummary(state: ThreadState): ThreadSummary {
  return {
    threadId: state.threadId,
    title: state.title,
    status: state.status,
    lastActivityAt: state.lastActivityAt,
    pendingApprovalCount: state.pendingApprovals.length,
    position: state.position,
  };
}

/** The thread as `GET /v1/threads/{threadId}` serves it. */
export type ThreadView = Pick<
  ThreadState,
  | 'threadId'
  | 'title'
  | 'status'
  | 'runs'
  | 'messages'
  | 'pendingApprovals'
  | 'activeTools'
  | 'position'
>;

/** The served fields of the state (shared, not copied). */
export function threadView(state: ThreadState): ThreadView {
  return {
    threadId: state.threadId,
    title: state.title,
    status: state.status,
    runs: state.runs,
    messages: state.messages,
    pendingApprovals: state.pendingApprovals,
    activeTools: state.activeTools,
    position: state.position,
  };
}

// ---------------------------------------------------------------------------------------
// One handler per catalogue type. IGNORED types move only position and lastActivityAt.

interface Fold {
  state: ThreadState;
  index: ThreadIndex;
  event: ProjectedEvent;
  runId: string;
}

type Handler<K extends EventType> = (fold: Fold, data: EventDataByType[K]) => void;

const IGNORED = 'ignored';

const HANDLERS: { readonly [K in EventType]: Handler<K> | typeof IGNORED } = {
  'run.started': (fold, data) => {
    const run = ensureRun(fold);
    if (run.agent === '') run.agent = data.agent;
    if (run.source === '') run.source = data.source;
    if (fold.state.title === null && typeof data.title === 'string' && data.title.trim() !== '') {
      fold.state.title = data.title;
    }
  },
  'run.finished': (fold, data) => endRun(fold, data.status),
  'turn.started': (fold, data) => {
    const run = ensureRun(fold);
    if (run.status !== 'running') return;
    if (run.activeTurnId === null) fold.index.activeTurns += 1;
    run.activeTurnId = data.turnId;
  },
  'turn.finished': (fold, data) => {
    const run = ensureRun(fold);
    if (run.activeTurnId !== null && run.activeTurnId === data.turnId) {
      run.activeTurnId = null;
      fold.index.activeTurns -= 1;
    }
    clearActiveTools(fold.state, fold.runId);
  },
  'turn.steered': IGNORED,
  'message.added': (fold, data) => {
    ensureRun(fold);
    upsertText(fold, data.messageId, data.role, data.text, 'message');
    if (data.role === 'assistant') clearActiveTools(fold.state, fold.runId);
  },
  'transcript.added': (fold, data) => {
    ensureRun(fold);
    upsertText(fold, data.utteranceId, data.role, data.text, 'transcript');
    if (data.role === 'assistant') clearActiveTools(fold.state, fold.runId);
  },
  'model.call': IGNORED,
  'tool.started': (fold, data) => toolStarted(fold, data),
  'tool.finished': (fold, data) => toolFinished(fold, data),
  'approval.requested': (fold, data) => approvalRequested(fold, data),
  'approval.resolved': (fold, data) => approvalResolved(fold, data),
  'append.rejected': IGNORED,
};

/** For each catalogue type, whether the thread view folds it or only notes its position. */
export const THREAD_EVENT_HANDLING: Readonly<Record<EventType, 'folded' | 'ignored'>> =
  Object.freeze(
    Object.fromEntries(
      EVENT_TYPES.map((type) => [type, HANDLERS[type] === IGNORED ? 'ignored' : 'folded']),
    ) as Record<EventType, 'folded' | 'ignored'>,
  );

// ---------------------------------------------------------------------------------------
// Runs and status

/** The event's run; a run seen before its run.started (never on the real write path) is added. */
function ensureRun(fold: Fold): RunSummary {
  const { state, index, runId, event } = fold;
  const at = index.runById.get(runId);
  if (at !== undefined) return state.runs[at];
  return pushRun(state, index, {
    runId,
    status: 'running',
    agent: '',
    source: '',
    startedAt: event.recordedAt,
    activeTurnId: null,
  });
}

function endRun(fold: Fold, status: EndStatus): void {
  const { state, index, runId, event } = fold;
  const run = ensureRun(fold);
  if (run.status !== 'running') return;
  index.activeRuns -= 1;
  if (run.activeTurnId !== null) index.activeTurns -= 1;
  run.status = status;
  run.finishedAt = event.recordedAt;
  run.activeTurnId = null;
  closeIfRunOver(fold, run);
  clearActiveTools(state, runId);
  if (state.pendingApprovals.some((approval) => approval.runId === runId)) {
    state.pendingApprovals = state.pendingApprovals.filter((approval) => approval.runId !== runId);
  }
}

function statusOf(state: ThreadState, index: ThreadIndex): ThreadStatus {
  if (state.pendingApprovals.length > 0) return 'blocked';
  if (state.runs.length === 0) return 'idle';
  if (index.activeRuns === 0) return 'finished';
  if (index.activeTurns > 0 || state.activeTools.length > 0) return 'running';
  return 'idle';
}

// ---------------------------------------------------------------------------------------
// Messages

function upsertText(
  fold: Fold,
  id: string,
  role: UIMessage['role'],
  text: string,
  source: 'message' | 'transcript',
): void {
  const { state, index, runId, event } = fold;
  const at = index.messageById.get(id);
  if (at === undefined) {
    pushMessage(state, index, {
      id,
      role,
      parts: [{ type: 'text', text }],
      metadata: { runId, source, position: event.position },
    });
    return;
  }
  // The same id again is the same message: its words are replaced where they stand; its
  // role and place in the thread stay as first recorded, and its tool parts stay put.
  const parts = state.messages[at].parts;
  const textAt = parts.findIndex((part) => part.type === 'text');
  if (textAt === -1) parts.push({ type: 'text', text });
  else parts[textAt] = { type: 'text', text };
}

// ---------------------------------------------------------------------------------------
// Tool parts

/** Tool inputs are objects; anything else is kept under `raw` (BACKGROUND.md §1). */
function asInput(value: unknown): Record<string, unknown> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    return value as Record<string, unknown>;
  }
  return { raw: value === undefined ? null : value };
}

function isEmptyObject(value: unknown): boolean {
  return (
    value !== null &&
    typeof value === 'object' &&
    !Array.isArray(value) &&
    Object.keys(value).length === 0
  );
}

function partAt(state: ThreadState, location: ToolLocation): ToolPart {
  return state.messages[location.message].parts[location.part] as ToolPart;
}

function setPart(state: ThreadState, location: ToolLocation, part: ToolPart): void {
  state.messages[location.message].parts[location.part] = part;
}

function toolNameOf(part: ToolPart): string {
  return part.type.slice('tool-'.length);
}

/**
 * Adds a new part for a call: to the last message when it is an assistant message of the
 * same run, else to a new assistant message with an id derived from the call.
 */
function createPart(fold: Fold, part: ToolPart): ToolLocation {
  const { state, index, runId, event } = fold;
  const last = state.messages[state.messages.length - 1];
  let m: number;
  if (last !== undefined && last.role === 'assistant' && last.metadata?.runId === runId) {
    m = state.messages.length - 1;
    last.parts.push(part);
  } else {
    m = pushMessage(state, index, {
      id: toolMessageId(index, runId, part.toolCallId, event.position),
      role: 'assistant',
      parts: [part],
      metadata: { runId, source: 'tool', position: event.position },
    });
  }
  const location: ToolLocation = {
    message: m,
    part: state.messages[m].parts.length - 1,
    runId,
    toolCallId: part.toolCallId,
  };
  const key = toolKey(runId, part.toolCallId);
  index.tools.set(key, location);
  index.latestTool.set(part.toolCallId, key);
  if (!isTerminal(part.state)) openToolOf(index, runId).add(key);
  return location;
}

/** `tool-msg-<toolCallId>`, qualified by run (then position) only if that id is taken. */
function toolMessageId(
  index: ThreadIndex,
  runId: string,
  toolCallId: string,
  position: number,
): string {
  const plain = `tool-msg-${toolCallId}`;
  if (!index.messageById.has(plain)) return plain;
  const qualified = `tool-msg-${runId}-${toolCallId}`;
  if (!index.messageById.has(qualified)) return qualified;
  return `${qualified}-${position}`;
}

/** Moves a part to a terminal state and out of its run's open parts and the active tools. */
function settle(fold: Fold, location: ToolLocation, part: ToolPart): void {
  setPart(fold.state, location, part);
  fold.index.openTools.get(location.runId)?.delete(toolKey(location.runId, location.toolCallId));
  removeActiveTool(fold.state, location.runId, location.toolCallId);
}

function toolStarted(fold: Fold, data: EventDataByType['tool.started']): void {
  const run = ensureRun(fold);
  const { state, index, runId, event } = fold;
  const type = `tool-${data.toolName}` as const;
  const input = asInput(data.input);
  const location = index.tools.get(toolKey(runId, data.toolCallId));
  let part: ToolPart;
  if (location === undefined) {
    part = { type, toolCallId: data.toolCallId, state: 'input-available', input };
    createPart(fold, part);
  } else {
    // A start names the call and gives its input; it never moves the state backwards.
    part = { ...partAt(state, location), type, input };
    setPart(state, location, part);
  }
  if (closeIfRunOver(fold, run)) return;
  if (isTerminal(part.state)) return;
  const active = state.activeTools.find(
    (tool) => tool.runId === runId && tool.toolCallId === data.toolCallId,
  );
  if (active === undefined) {
    state.activeTools.push({
      toolCallId: data.toolCallId,
      toolName: data.toolName,
      label: toolLabel(data.toolName, input),
      runId,
      startedAt: event.recordedAt,
    });
  } else {
    active.toolName = data.toolName;
    active.label = toolLabel(data.toolName, input);
  }
}

function toolFinished(fold: Fold, data: EventDataByType['tool.finished']): void {
  ensureRun(fold);
  const { state, index, runId } = fold;
  const location = index.tools.get(toolKey(runId, data.toolCallId));
  const named = typeof data.toolName === 'string' && data.toolName !== '';
  if (location === undefined) {
    // The call is recorded beside its output, even when it never started (BACKGROUND.md §4).
    const type = `tool-${named ? data.toolName : UNKNOWN_TOOL_NAME}` as const;
    createPart(fold, finishedPart(type, data.toolCallId, {}, data, undefined));
    return;
  }
  const current = partAt(state, location);
  const type: ToolPart['type'] =
    named && toolNameOf(current) === UNKNOWN_TOOL_NAME ? `tool-${data.toolName}` : current.type;
  if (isTerminal(current.state)) {
    // The first terminal state stays: a repeated or late finish only fills in the name.
    if (type !== current.type) setPart(state, location, { ...current, type });
    return;
  }
  settle(
    fold,
    location,
    finishedPart(type, data.toolCallId, current.input ?? {}, data, current.approval),
  );
}

function finishedPart(
  type: ToolPart['type'],
  toolCallId: string,
  input: unknown,
  data: EventDataByType['tool.finished'],
  approval: ToolPart['approval'],
): ToolPart {
  // An approval rides along only when it was granted: the AI SDK rejects any other.
  const granted = approval?.approved === true ? { approval } : {};
  if (data.failed) {
    const errorText =
      typeof data.errorText === 'string' && data.errorText !== ''
        ? data.errorText
        : 'The tool failed.';
    return { type, toolCallId, state: 'output-error', input, errorText, ...granted };
  }
  const output = data.output === undefined ? null : data.output;
  return { type, toolCallId, state: 'output-available', input, output, ...granted };
}

function closeAsRunEnded(
  state: ThreadState,
  location: ToolLocation | undefined,
  status: string,
): void {
  if (location === undefined) return;
  const part = partAt(state, location);
  if (isTerminal(part.state)) return;
  const errorText =
    part.state === 'approval-requested'
      ? `The run ended first (${status}): this tool's approval was never answered.`
      : `The run ended first (${status}): this tool never finished.`;
  const granted = part.approval?.approved === true ? { approval: part.approval } : {};
  setPart(state, location, {
    type: part.type,
    toolCallId: part.toolCallId,
    state: 'output-error',
    input: part.input ?? {},
    errorText,
    ...granted,
  });
}

/**
 * The view never shows a tool running in a run that is over: a part left open by an event
 * after its run ended (never on the real write path, which refuses such appends) is closed.
 */
function closeIfRunOver(fold: Fold, run: RunSummary): boolean {
  if (run.status === 'running') return false;
  const open = fold.index.openTools.get(run.runId);
  if (open !== undefined) {
    for (const key of open) closeAsRunEnded(fold.state, fold.index.tools.get(key), run.status);
    fold.index.openTools.delete(run.runId);
  }
  return true;
}

function approvalRequested(fold: Fold, data: EventDataByType['approval.requested']): void {
  const run = ensureRun(fold);
  const { state, index, runId, event } = fold;
  const key = toolKey(runId, data.toolCallId);
  const input = asInput(data.input);
  const location = index.tools.get(key);
  const approval = { id: data.approvalId };
  if (location === undefined) {
    createPart(fold, {
      type: `tool-${data.toolName}`,
      toolCallId: data.toolCallId,
      state: 'approval-requested',
      input,
      approval,
    });
  } else {
    const current = partAt(state, location);
    if (!isTerminal(current.state)) {
      setPart(state, location, {
        type: toolNameOf(current) === UNKNOWN_TOOL_NAME ? `tool-${data.toolName}` : current.type,
        toolCallId: current.toolCallId,
        state: 'approval-requested',
        input: current.input === undefined || isEmptyObject(current.input) ? input : current.input,
        approval,
      });
    }
  }
  index.approvalTool.set(data.approvalId, key);
  if (closeIfRunOver(fold, run)) return;
  const pending: PendingApproval = {
    approvalId: data.approvalId,
    runId,
    toolCallId: data.toolCallId,
    toolName: data.toolName,
    input,
    ...(data.question === undefined ? {} : { question: data.question }),
    ...(data.options === undefined ? {} : { options: data.options }),
    requestedAt: event.recordedAt,
  };
  const at = state.pendingApprovals.findIndex((p) => p.approvalId === data.approvalId);
  if (at === -1) state.pendingApprovals.push(pending);
  else state.pendingApprovals[at] = pending;
}

/** The reason shown on a denial the policy imposed (BACKGROUND.md §2). */
export const DOWNGRADED_REASON =
  'The policy in force now forbids this call: the allow was downgraded to a one-time deny.';

function approvalResolved(fold: Fold, data: EventDataByType['approval.resolved']): void {
  ensureRun(fold);
  const { state, index } = fold;
  const at = state.pendingApprovals.findIndex((p) => p.approvalId === data.approvalId);
  if (at !== -1) state.pendingApprovals.splice(at, 1);
  const key = index.approvalTool.get(data.approvalId);
  const location = key === undefined ? undefined : index.tools.get(key);
  if (location === undefined) return;
  const part = partAt(state, location);
  if (part.state !== 'approval-requested' || part.approval?.id !== data.approvalId) return;
  const base = { type: part.type, toolCallId: part.toolCallId, input: part.input ?? {} };
  if (data.decision === 'allow') {
    setPart(state, location, {
      ...base,
      state: 'approval-responded',
      approval: { id: data.approvalId, approved: true },
    });
    return;
  }
  const reason = data.downgraded === true ? { reason: DOWNGRADED_REASON } : {};
  settle(fold, location, {
    ...base,
    state: 'output-denied',
    approval: { id: data.approvalId, approved: false, ...reason },
  });
}

// ---------------------------------------------------------------------------------------
// Active tools

function removeActiveTool(state: ThreadState, runId: string, toolCallId: string): void {
  const at = state.activeTools.findIndex(
    (tool) => tool.runId === runId && tool.toolCallId === toolCallId,
  );
  if (at !== -1) state.activeTools.splice(at, 1);
}

/** What is running NOW: the assistant speaking again, or a turn or run ending, clears it. */
function clearActiveTools(state: ThreadState, runId: string): void {
  if (state.activeTools.some((tool) => tool.runId === runId)) {
    state.activeTools = state.activeTools.filter((tool) => tool.runId !== runId);
  }
}
