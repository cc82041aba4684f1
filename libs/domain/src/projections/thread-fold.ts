/**
 * The thread view's fold (docs/architecture.md, "The read side"): recorded events in, the
 * thread's state out. The projector applies it live and a rebuild applies it to the same
 * events from scratch, so the two agree (docs/architecture.md, "Why it exists", shaped the tool rules).
 *
 * `applyToThread` changes the state in place: a rebuild folds a million events, and a copy
 * per event would make that quadratic. `evolveThread` is the pure form: a copy, then apply.
 */
import type { EventDataByType } from '../event-catalogue';
import { cutChars } from '../canonical-json';
import { isPlainObject } from '../plain-object';
import { EVENT_TYPES, type EndStatus, type EventType } from '../event-types';
import { toolLabel } from '../tool-labels';
import {
  isTerminal,
  memoryRows,
  type PartLocation,
  type ThreadHeader,
  type ThreadRows,
  type ToolLocation,
} from './thread-rows';
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

/**
 * Most parts a tool part is grouped into: past it, the next tool part starts a new
 * assistant message, so a page of messages stays a page however many calls a run makes.
 */
export const MAX_PARTS_PER_MESSAGE = 10;

export function emptyThread(tenantId: string, threadId: string): ThreadState {
  return { ...emptyHeader(tenantId, threadId), messages: [] };
}

export function emptyHeader(tenantId: string, threadId: string): ThreadHeader {
  return {
    tenantId,
    threadId,
    title: null,
    status: 'idle',
    runs: [],
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

/** One thread's key among every tenant's threads (ids never hold a NUL). */
export function threadKey(tenantId: string, threadId: string): string {
  return `${tenantId}\u0000${threadId}`;
}

/** The pure fold: `state` is left as it was; the answer is a new state. */
export function evolveThread(state: ThreadState, event: ProjectedEvent): ThreadState {
  const next = structuredClone(state);
  applyToThread(next, event);
  return next;
}

/** Folds one event into a ThreadState in memory, in place (O(1) amortised per event). */
export function applyToThread(state: ThreadState, event: ProjectedEvent): void {
  applyToRows(memoryRows(state), event);
}

/**
 * Folds one event into a thread's rows, changing them in place; O(1) rows are read and
 * written whatever the thread's length.
 *
 * - An event of a type the thread view does not know is left out entirely.
 * - An event at a position below the thread's position was already folded (a redelivery)
 *   and changes nothing; the fold expects events in position order.
 * - An event stamped for another tenant or thread is a routing error and throws.
 */
export function applyToRows(rows: ThreadRows, event: ProjectedEvent): void {
  const state = rows.header;
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
  if (handler !== IGNORED) {
    const runId = typeof event.metadata.runId === 'string' ? event.metadata.runId : '';
    const fold = { state, rows, event, runId };
    (handler as Handler<EventType>)(fold, event.data as never);
  }
  state.position = event.position;
  state.lastActivityAt = event.recordedAt;
  state.status = statusOf(rows);
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

export function threadSummary(state: ThreadHeader): ThreadSummary {
  return {
    threadId: state.threadId,
    title: state.title,
    status: state.status,
    lastActivityAt: state.lastActivityAt,
    pendingApprovalCount: state.pendingApprovals.length,
    position: state.position,
  };
}

/** Where a page of messages sits in its thread, and how to ask for the one before it. */
export interface MessagePageInfo {
  /** Most messages the page could hold. */
  limit: number;
  /** Pass as `?before=` to read the page of older messages; null when there are none. */
  before: string | null;
  hasMore: boolean;
}

/** What `GET /v1/threads/{threadId}` serves beside its page of messages. */
export interface ThreadViewHeader extends Pick<
  ThreadHeader,
  'threadId' | 'title' | 'status' | 'runs' | 'pendingApprovals' | 'activeTools' | 'position'
> {
  /** Messages in the whole thread. */
  messageCount: number;
  page: MessagePageInfo;
}

/**
 * The thread as `GET /v1/threads/{threadId}` serves it: the header and one page of
 * messages, oldest first within the page (the order a chat UI renders).
 */
export interface ThreadView extends ThreadViewHeader {
  messages: UIMessage[];
}

/** The served fields of the header (shared, not copied). */
export function threadView(
  header: ThreadHeader,
  messageCount: number,
  page: MessagePageInfo,
): ThreadViewHeader {
  return {
    threadId: header.threadId,
    title: header.title,
    status: header.status,
    runs: header.runs,
    pendingApprovals: header.pendingApprovals,
    activeTools: header.activeTools,
    position: header.position,
    messageCount,
    page,
  };
}

// ---------------------------------------------------------------------------------------
// One handler per catalogue type. IGNORED types move only position and lastActivityAt.

interface Fold {
  state: ThreadHeader;
  rows: ThreadRows;
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
    if (run.activeTurnId === null) fold.rows.counts.activeTurns += 1;
    run.activeTurnId = data.turnId;
  },
  'turn.finished': (fold, data) => {
    const run = ensureRun(fold);
    if (run.activeTurnId !== null && run.activeTurnId === data.turnId) {
      run.activeTurnId = null;
      fold.rows.counts.activeTurns -= 1;
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

/**
 * The types whose data the thread view reads: those it folds. An ignored event moves only the
 * position and last activity, so the projector reads model calls (a coding agent's run is
 * mostly their contexts, up to a megabyte each) without their data.
 */
export const THREAD_DATA_TYPES: readonly EventType[] = Object.freeze(
  EVENT_TYPES.filter((type) => THREAD_EVENT_HANDLING[type] === 'folded'),
);

// ---------------------------------------------------------------------------------------
// Runs and status

/** The event's run; a run seen before its run.started (never on the real write path) is added. */
function ensureRun(fold: Fold): RunSummary {
  const { rows, runId, event } = fold;
  const known = rows.run(runId);
  if (known !== undefined) return known;
  rows.counts.activeRuns += 1;
  return rows.addRun({
    runId,
    status: 'running',
    agent: '',
    source: '',
    startedAt: event.recordedAt,
    activeTurnId: null,
  });
}

function endRun(fold: Fold, status: EndStatus): void {
  const { state, rows, runId, event } = fold;
  const run = ensureRun(fold);
  if (run.status !== 'running') return;
  rows.counts.activeRuns -= 1;
  if (run.activeTurnId !== null) rows.counts.activeTurns -= 1;
  run.status = status;
  run.finishedAt = event.recordedAt;
  run.activeTurnId = null;
  closeIfRunOver(fold, run);
  clearActiveTools(state, runId);
  if (state.pendingApprovals.some((approval) => approval.runId === runId)) {
    state.pendingApprovals = state.pendingApprovals.filter((approval) => approval.runId !== runId);
  }
  forgetOldRuns(rows, runId);
}

/**
 * Finished runs a thread's header keeps, the newest: a chat thread may see a run per
 * question for years, and the header is written with every batch that touches the thread
 * and read with every page. A finished run takes no more events, so the fold never needs
 * one it has let go; the log keeps them all.
 */
export const FINISHED_RUNS_KEPT = 100;

function forgetOldRuns(rows: ThreadRows, justFinished: string): void {
  let finished = rows.header.runs.length - rows.counts.activeRuns;
  while (finished > FINISHED_RUNS_KEPT) {
    // The one that finished longest ago, not the one that started first: a long run that
    // started before a hundred short ones would otherwise leave the header as it finished.
    let oldest: RunSummary | undefined;
    for (const run of rows.header.runs) {
      if (run.status === 'running' || run.runId === justFinished) continue;
      if (oldest === undefined || (run.finishedAt ?? '') < (oldest.finishedAt ?? '')) oldest = run;
    }
    if (oldest === undefined) return;
    rows.dropRun(oldest.runId);
    finished -= 1;
  }
}

function statusOf(rows: ThreadRows): ThreadStatus {
  const state = rows.header;
  if (state.pendingApprovals.length > 0) return 'blocked';
  if (state.runs.length === 0) return 'idle';
  if (rows.counts.activeRuns === 0) return 'finished';
  if (rows.counts.activeTurns > 0 || state.activeTools.length > 0) return 'running';
  return 'idle';
}

// ---------------------------------------------------------------------------------------
// Messages

/**
 * The message a text event's id names: the one of the same source made from that client id,
 * under the id itself, else under it prefixed with the source (`transcript:<id>`), as often
 * as that is taken by another. Ids are the client's, one namespace per source: an utterance
 * whose id equals a typed message's, a message named like a tool message, or one named like
 * another's prefixed id (`message:y`) is a message of its own.
 */
function textMessage(
  rows: ThreadRows,
  clientId: string,
  source: 'message' | 'transcript',
): { id: string; at: number | undefined } {
  let id = clientId;
  for (;;) {
    const at = rows.messageAt(id);
    if (at === undefined) return { id, at };
    if (rows.sourceOf(at) === source && rows.clientIdOf(at) === clientId) return { id, at };
    id = `${source}:${id}`;
  }
}

function upsertText(
  fold: Fold,
  clientId: string,
  role: UIMessage['role'],
  text: string,
  source: 'message' | 'transcript',
): void {
  const { rows, runId, event } = fold;
  const { id, at } = textMessage(rows, clientId, source);
  if (at === undefined) {
    rows.addMessage({
      id,
      role,
      parts: [{ type: 'text', text }],
      metadata: {
        runId,
        source,
        position: event.position,
        ...(id === clientId ? {} : { clientId }),
      },
    });
    return;
  }
  // The same id again is the same message (of this source, so made with a text part): its
  // words are replaced where they stand; its role and place in the thread stay as first
  // recorded, and tool parts added to it since stay put.
  rows.setPart({ message: at, part: rows.textPartOf(at) }, { type: 'text', text });
}

// ---------------------------------------------------------------------------------------
// Tool parts

/** Tool inputs are objects; anything else is kept under `raw` (docs/architecture.md, "Why it exists"). */
function asInput(value: unknown): Record<string, unknown> {
  if (isPlainObject(value)) return value;
  return { raw: value === undefined ? null : value };
}

function partAt(rows: ThreadRows, location: PartLocation): ToolPart {
  return rows.part(location) as ToolPart;
}

function toolNameOf(part: ToolPart): string {
  return part.type.slice('tool-'.length);
}

/**
 * Adds a new part for a call: to the last message when it is an assistant message of the
 * same run with room left, else to a new assistant message with an id derived from the call.
 */
function createPart(fold: Fold, part: ToolPart): void {
  const { rows, runId, event } = fold;
  const last = rows.lastMessage();
  if (
    last !== undefined &&
    last.role === 'assistant' &&
    last.runId === runId &&
    last.partCount < MAX_PARTS_PER_MESSAGE
  ) {
    rows.addPart(last.message, part);
    return;
  }
  rows.addMessage({
    id: toolMessageId(rows, runId, part.toolCallId, event.position),
    role: 'assistant',
    parts: [part],
    metadata: { runId, source: 'tool', position: event.position },
  });
}

/** `tool-msg-<toolCallId>`, qualified by run (then position) only if that id is taken. */
function toolMessageId(
  rows: ThreadRows,
  runId: string,
  toolCallId: string,
  position: number,
): string {
  const plain = `tool-msg-${toolCallId}`;
  if (rows.messageAt(plain) === undefined) return plain;
  const qualified = `tool-msg-${runId}-${toolCallId}`;
  if (rows.messageAt(qualified) === undefined) return qualified;
  return `${qualified}-${position}`;
}

/** Moves a part to a terminal state; it leaves the active tools with it. */
function settle(fold: Fold, location: ToolLocation, part: ToolPart): void {
  fold.rows.setPart(location, part);
  removeActiveTool(fold.state, location.runId, location.toolCallId);
}

function toolStarted(fold: Fold, data: EventDataByType['tool.started']): void {
  const run = ensureRun(fold);
  const { state, rows, runId, event } = fold;
  const type = `tool-${data.toolName}` as const;
  const input = asInput(data.input);
  const location = rows.tool(runId, data.toolCallId);
  let part: ToolPart;
  if (location === undefined) {
    part = { type, toolCallId: data.toolCallId, state: 'input-available', input };
    createPart(fold, part);
  } else {
    // A start gives the call's input; it never moves the state backwards, and never renames a
    // call another event named (a call is one tool): it names only one a lone finish left
    // unknown. While an approval waits, and once it was granted, the part keeps showing the
    // input the approval's receipt is bound to; once the call finished, the input its output
    // came from. A finish that came alone recorded no input ({}): a late start fills it in.
    const current = partAt(rows, location);
    const kept =
      current.state === 'approval-requested' ||
      current.state === 'approval-responded' ||
      (isTerminal(current.state) && !isEmptyInput(current.input));
    part = {
      ...current,
      type: toolNameOf(current) === UNKNOWN_TOOL_NAME ? type : current.type,
      input: kept ? current.input : input,
    };
    rows.setPart(location, part);
  }
  if (closeIfRunOver(fold, run)) return;
  if (isTerminal(part.state)) return;
  const active = state.activeTools.find(
    (tool) => tool.runId === runId && tool.toolCallId === data.toolCallId,
  );
  const toolName = toolNameOf(part);
  if (active === undefined) {
    state.activeTools.push({
      toolCallId: data.toolCallId,
      toolName,
      label: toolLabel(toolName, part.input),
      runId,
      startedAt: event.recordedAt,
    });
  } else {
    active.toolName = toolName;
    active.label = toolLabel(toolName, part.input);
  }
}

/**
 * What a pending approval keeps in the thread's header is bounded: the header is read and
 * written with every event of the thread, and 70 approvals of 900 KB inputs took the projector
 * past its heap. The approval.requested event in the log keeps every detail whole.
 * - An input is kept only while it is at most PENDING_DETAIL_MAX_CHARS characters of JSON, and
 *   among the first MAX_PENDING_DETAILS pending approvals that keep one; the tool part asking
 *   for the approval keeps it whole.
 * - A question is cut to PENDING_DETAIL_MAX_CHARS characters among the first
 *   MAX_PENDING_DETAILS pending approvals that keep a long one (over PENDING_BRIEF_CHARS), and
 *   to PENDING_BRIEF_CHARS past them.
 * - Options are kept while their JSON is at most PENDING_BRIEF_CHARS characters, or at most
 *   PENDING_DETAIL_MAX_CHARS among the first MAX_PENDING_DETAILS that keep long ones.
 * A detail not kept whole says its size (`inputChars`, `questionChars`, `optionsChars`).
 */
export const PENDING_DETAIL_MAX_CHARS = 4096;
export const PENDING_BRIEF_CHARS = 256;
export const MAX_PENDING_DETAILS = 16;

/**
 * Whether fewer than MAX_PENDING_DETAILS pending approvals, the one being replaced aside, keep
 * a detail `kept` answers true for.
 */
function roomFor(
  state: Pick<ThreadHeader, 'pendingApprovals'>,
  replacing: number,
  kept: (pending: PendingApproval) => boolean,
): boolean {
  const count = state.pendingApprovals.filter((p, i) => i !== replacing && kept(p)).length;
  return count < MAX_PENDING_DETAILS;
}

/** `{ input }` when the header keeps it, else `{ inputChars }`, its size as JSON. */
function pendingInput(
  state: Pick<ThreadHeader, 'pendingApprovals'>,
  input: unknown,
  replacing: number,
): Pick<PendingApproval, 'input' | 'inputChars'> {
  const chars = JSON.stringify(input).length;
  return chars <= PENDING_DETAIL_MAX_CHARS && roomFor(state, replacing, (p) => 'input' in p)
    ? { input }
    : { inputChars: chars };
}

/** The question as the header keeps it; nothing for a question that is not text (null). */
function pendingQuestion(
  state: Pick<ThreadHeader, 'pendingApprovals'>,
  question: unknown,
  replacing: number,
): Pick<PendingApproval, 'question' | 'questionChars'> {
  if (typeof question !== 'string') return {};
  const long = (p: PendingApproval) => (p.question?.length ?? 0) > PENDING_BRIEF_CHARS;
  return boundedQuestion(
    question,
    roomFor(state, replacing, long) ? PENDING_DETAIL_MAX_CHARS : PENDING_BRIEF_CHARS,
  );
}

/** `{ question }`, cut to `maxChars` with `questionChars` (its length) when longer. */
export function boundedQuestion(
  question: string,
  maxChars = PENDING_DETAIL_MAX_CHARS,
): { question: string; questionChars?: number } {
  if (question.length <= maxChars) return { question };
  return { question: cutChars(question, maxChars), questionChars: question.length };
}

/** The options as the header keeps them, else `{ optionsChars }`; nothing for null. */
function pendingOptions(
  state: Pick<ThreadHeader, 'pendingApprovals'>,
  options: unknown,
  replacing: number,
): Pick<PendingApproval, 'options' | 'optionsChars'> {
  if (!Array.isArray(options)) return {};
  const chars = JSON.stringify(options).length;
  const long = (p: PendingApproval) =>
    p.options !== undefined && JSON.stringify(p.options).length > PENDING_BRIEF_CHARS;
  const kept =
    chars <= PENDING_BRIEF_CHARS ||
    (chars <= PENDING_DETAIL_MAX_CHARS && roomFor(state, replacing, long));
  return kept ? { options: options as string[] } : { optionsChars: chars };
}

/** `{}`, what a finish that came alone records. */
function isEmptyInput(input: unknown): boolean {
  return isPlainObject(input) && Object.keys(input).length === 0;
}

function toolFinished(fold: Fold, data: EventDataByType['tool.finished']): void {
  ensureRun(fold);
  const { state, rows, runId } = fold;
  // The call went ahead without an answer (the runtime timed the approval out, say): no
  // person is left anything to decide on it, so the thread is not blocked on it.
  dropPendingApproval(state, runId, data.toolCallId);
  const location = rows.tool(runId, data.toolCallId);
  const named = typeof data.toolName === 'string' && data.toolName !== '';
  if (location === undefined) {
    // The call is recorded beside its output, even when it never started (docs/architecture.md, "Why it exists").
    const type = `tool-${named ? data.toolName : UNKNOWN_TOOL_NAME}` as const;
    createPart(fold, finishedPart(type, data.toolCallId, {}, data, undefined));
    return;
  }
  const current = partAt(rows, location);
  const type: ToolPart['type'] =
    named && toolNameOf(current) === UNKNOWN_TOOL_NAME ? `tool-${data.toolName}` : current.type;
  if (isTerminal(current.state)) {
    // The first terminal state stays: a repeated or late finish only fills in the name.
    if (type !== current.type) rows.setPart(location, { ...current, type });
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

function closeAsRunEnded(rows: ThreadRows, location: ToolLocation, status: string): void {
  const part = partAt(rows, location);
  if (isTerminal(part.state)) return;
  const errorText =
    part.state === 'approval-requested'
      ? `the run ended first (${status}): this tool's approval was never answered.`
      : `the run ended first (${status}): this tool never finished.`;
  const granted = part.approval?.approved === true ? { approval: part.approval } : {};
  rows.setPart(location, {
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
  for (const location of fold.rows.openTools(run.runId)) {
    closeAsRunEnded(fold.rows, location, run.status);
  }
  return true;
}

function approvalRequested(fold: Fold, data: EventDataByType['approval.requested']): void {
  const run = ensureRun(fold);
  const { state, rows, runId, event } = fold;
  const input = asInput(data.input);
  const location = rows.tool(runId, data.toolCallId);
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
    const current = partAt(rows, location);
    if (!isTerminal(current.state)) {
      // A part not yet terminal was made by a start or a request, both of which name it. It
      // shows the input of the approval now asked for: the one a person decides, and the one
      // the resolution's receipt is bound to.
      rows.setPart(location, {
        type: current.type,
        toolCallId: current.toolCallId,
        state: 'approval-requested',
        input,
        approval,
      });
    }
  }
  rows.linkApproval(runId, data.approvalId, data.toolCallId);
  if (closeIfRunOver(fold, run)) return;
  // Asked again, a call waits on its newest request only: the older one is superseded.
  dropPendingApproval(state, runId, data.toolCallId);
  // An approval id is its run's: another run of the thread may use the same one.
  const at = state.pendingApprovals.findIndex(
    (p) => p.runId === runId && p.approvalId === data.approvalId,
  );
  const pending: PendingApproval = {
    approvalId: data.approvalId,
    runId,
    toolCallId: data.toolCallId,
    toolName: data.toolName,
    ...pendingInput(state, input, at),
    ...pendingQuestion(state, data.question, at),
    ...pendingOptions(state, data.options, at),
    requestedAt: event.recordedAt,
  };
  if (at === -1) state.pendingApprovals.push(pending);
  else state.pendingApprovals[at] = pending;
}

/** The reason shown on a denial the policy imposed (docs/architecture.md, "Why it exists"). */
export const DOWNGRADED_REASON =
  'The policy in force now forbids this call: the allow was downgraded to a one-time deny.';

function approvalResolved(fold: Fold, data: EventDataByType['approval.resolved']): void {
  ensureRun(fold);
  const { state, rows, runId } = fold;
  const at = state.pendingApprovals.findIndex(
    (p) => p.runId === runId && p.approvalId === data.approvalId,
  );
  // Only a pending approval has a part waiting on it: one superseded, overtaken by its
  // tool's finish or already resolved has nothing left to decide.
  if (at === -1) return;
  const location = rows.approvalTool(runId, data.approvalId);
  state.pendingApprovals.splice(at, 1);
  if (location === undefined) return;
  const part = partAt(rows, location);
  // A pending approval's part shows it, unless the call had already ended when asked about.
  if (part.state !== 'approval-requested') return;
  const base = { type: part.type, toolCallId: part.toolCallId, input: part.input ?? {} };
  if (data.decision === 'allow') {
    rows.setPart(location, {
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

/** Takes the approval a call waits on off the pending list: one at most, its newest request. */
function dropPendingApproval(state: ThreadHeader, runId: string, toolCallId: string): void {
  const at = state.pendingApprovals.findIndex(
    (p) => p.runId === runId && p.toolCallId === toolCallId,
  );
  if (at !== -1) state.pendingApprovals.splice(at, 1);
}

// ---------------------------------------------------------------------------------------
// Active tools

function removeActiveTool(state: ThreadHeader, runId: string, toolCallId: string): void {
  const at = state.activeTools.findIndex(
    (tool) => tool.runId === runId && tool.toolCallId === toolCallId,
  );
  if (at !== -1) state.activeTools.splice(at, 1);
}

/** What is running NOW: the assistant speaking again, or a turn or run ending, clears it. */
function clearActiveTools(state: ThreadHeader, runId: string): void {
  if (state.activeTools.some((tool) => tool.runId === runId)) {
    state.activeTools = state.activeTools.filter((tool) => tool.runId !== runId);
  }
}
