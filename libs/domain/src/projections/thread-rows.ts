/**
 * What the thread fold reads and writes, row by row: the thread's header (title, status,
 * runs, pending approvals, active tools, position), its messages in order, each message's
 * parts, and lookups from a tool call and from an approval to the part they name. The fold
 * is written against this port only, so one definition serves two storages:
 *
 * - `memoryRows(state)`: a ThreadState in memory, with lookup tables derived from it (the
 *   pure fold, the property tests, the definition);
 * - the read-model store's rows (libs/projections): a header row, one row per message and
 *   one per part, so folding one event touches O(1) rows however long the thread is.
 */
import { isToolPart } from './message-text';
import type {
  MessageSource,
  RunSummary,
  ThreadState,
  ToolPartState,
  UIMessage,
  UIMessagePart,
} from './thread-state';

/** Everything of a thread but its messages: what one header row holds. */
export type ThreadHeader = Omit<ThreadState, 'messages'>;

/** Where a part is: its message's place in the thread and its place in that message. */
export interface PartLocation {
  message: number;
  part: number;
}

/** A tool part's place, with the run and call that identify it. */
export interface ToolLocation extends PartLocation {
  runId: string;
  toolCallId: string;
}

/** What the fold needs to know of the last message to decide where a tool part goes. */
export interface MessageTail {
  message: number;
  role: UIMessage['role'];
  runId: string | undefined;
  partCount: number;
}

export interface ThreadRows {
  /** Changed in place by the fold. */
  readonly header: ThreadHeader;
  /** Runs not finished, and those of them with an active turn: status without a scan. */
  readonly counts: { activeRuns: number; activeTurns: number };
  run(runId: string): RunSummary | undefined;
  addRun(run: RunSummary): RunSummary;
  /** Takes a run out of the header (a finished one, past FINISHED_RUNS_KEPT). */
  dropRun(runId: string): void;
  /** The place of the message with this id. */
  messageAt(id: string): number | undefined;
  /** Where the message at this place came from. */
  sourceOf(message: number): MessageSource | undefined;
  /** The client's id of the message at this place: `metadata.clientId`, else its id. */
  clientIdOf(message: number): string;
  lastMessage(): MessageTail | undefined;
  /** Appends a message (with its parts); answers its place. */
  addMessage(message: UIMessage): number;
  part(location: PartLocation): UIMessagePart;
  /** The place of the message's first text part, -1 when it has none. */
  textPartOf(message: number): number;
  /** Appends a part to a message; answers its place in the message. */
  addPart(message: number, part: UIMessagePart): number;
  setPart(location: PartLocation, part: UIMessagePart): void;
  /** By run and call: tool call ids are unique within a run only. */
  tool(runId: string, toolCallId: string): ToolLocation | undefined;
  /** The run's tool parts not yet in a terminal state. */
  openTools(runId: string): ToolLocation[];
  /** The tool part an approval was last requested for. */
  approvalTool(runId: string, approvalId: string): ToolLocation | undefined;
  linkApproval(runId: string, approvalId: string, toolCallId: string): void;
}

export const TERMINAL_TOOL_STATES: ReadonlySet<ToolPartState> = new Set<ToolPartState>([
  'output-available',
  'output-error',
  'output-denied',
]);

export function isTerminal(state: ToolPartState): boolean {
  return TERMINAL_TOOL_STATES.has(state);
}

/** Unambiguous for any ids: the run id's length says where it ends. */
export function toolKey(runId: string, toolCallId: string): string {
  return `${runId.length}:${runId}:${toolCallId}`;
}

/** Whether a part is a tool part still waiting for an outcome. */
export function isOpenToolPart(part: UIMessagePart): boolean {
  return isToolPart(part) && !isTerminal(part.state);
}

// ---------------------------------------------------------------------------------------
// In memory: a ThreadState and its lookup tables.

interface MemoryIndex {
  /** The arrays the index was built for: an index of other arrays is stale. */
  messagesRef: UIMessage[];
  messageCount: number;
  runsRef: RunSummary[];
  runCount: number;
  messageById: Map<string, number>;
  tools: Map<string, ToolLocation>;
  runById: Map<string, number>;
  openTools: Map<string, Set<string>>;
  approvalTool: Map<string, string>;
  counts: { activeRuns: number; activeTurns: number };
}

/**
 * The index is not part of ThreadState: it is derived from the state alone, built on first
 * use and cached beside the state object, so a state read back from JSON carries nothing
 * that could disagree with its view; its index is rebuilt once, in one pass.
 */
const INDEXES = new WeakMap<ThreadState, MemoryIndex>();

function indexOf(state: ThreadState): MemoryIndex {
  const cached = INDEXES.get(state);
  if (
    cached !== undefined &&
    cached.messagesRef === state.messages &&
    cached.messageCount === state.messages.length &&
    cached.runsRef === state.runs &&
    cached.runCount === state.runs.length
  ) {
    return cached;
  }
  const built = buildIndex(state);
  INDEXES.set(state, built);
  return built;
}

function buildIndex(state: ThreadState): MemoryIndex {
  const index: MemoryIndex = {
    messagesRef: state.messages,
    messageCount: state.messages.length,
    runsRef: state.runs,
    runCount: state.runs.length,
    messageById: new Map(),
    tools: new Map(),
    runById: new Map(),
    openTools: new Map(),
    approvalTool: new Map(),
    counts: countRuns(state.runs),
  };
  state.runs.forEach((run, i) => index.runById.set(run.runId, i));
  state.messages.forEach((message, m) => {
    index.messageById.set(message.id, m);
    message.parts.forEach((part, p) => track(index, message, m, p, part));
  });
  for (const approval of state.pendingApprovals) {
    index.approvalTool.set(
      toolKey(approval.runId, approval.approvalId),
      toolKey(approval.runId, approval.toolCallId),
    );
  }
  return index;
}

/** Runs not finished and active turns, counted once when a thread is loaded. */
export function countRuns(runs: readonly RunSummary[]): {
  activeRuns: number;
  activeTurns: number;
} {
  let activeRuns = 0;
  let activeTurns = 0;
  for (const run of runs) {
    if (run.status !== 'running') continue;
    activeRuns += 1;
    if (run.activeTurnId !== null) activeTurns += 1;
  }
  return { activeRuns, activeTurns };
}

/** Keeps the tool lookups in step with a part placed at (m, p). */
function track(
  index: MemoryIndex,
  message: UIMessage,
  m: number,
  p: number,
  part: UIMessagePart,
): void {
  if (!isToolPart(part)) return;
  const runId = message.metadata?.runId ?? '';
  const key = toolKey(runId, part.toolCallId);
  if (!index.tools.has(key)) {
    index.tools.set(key, { message: m, part: p, runId, toolCallId: part.toolCallId });
    if (part.approval !== undefined) index.approvalTool.set(toolKey(runId, part.approval.id), key);
  }
  let open = index.openTools.get(runId);
  if (isTerminal(part.state)) {
    open?.delete(key);
    return;
  }
  if (open === undefined) {
    open = new Set();
    index.openTools.set(runId, open);
  }
  open.add(key);
}

/** The rows of a ThreadState held in memory (the pure fold's storage). */
export function memoryRows(state: ThreadState): ThreadRows {
  const index = indexOf(state);
  const lookup = (key: string | undefined) =>
    key === undefined ? undefined : index.tools.get(key);
  return {
    header: state,
    counts: index.counts,
    run: (runId) => {
      const at = index.runById.get(runId);
      return at === undefined ? undefined : state.runs[at];
    },
    addRun: (run) => {
      index.runById.set(run.runId, state.runs.push(run) - 1);
      index.runCount = state.runs.length;
      return run;
    },
    dropRun: (runId) => {
      const at = index.runById.get(runId);
      if (at === undefined) return;
      state.runs.splice(at, 1);
      index.runById.clear();
      state.runs.forEach((run, i) => index.runById.set(run.runId, i));
      index.runCount = state.runs.length;
    },
    messageAt: (id) => index.messageById.get(id),
    sourceOf: (m) => state.messages[m].metadata?.source,
    clientIdOf: (m) => state.messages[m].metadata?.clientId ?? state.messages[m].id,
    lastMessage: () => {
      const m = state.messages.length - 1;
      if (m < 0) return undefined;
      const last = state.messages[m];
      return {
        message: m,
        role: last.role,
        runId: last.metadata?.runId,
        partCount: last.parts.length,
      };
    },
    addMessage: (message) => {
      const m = state.messages.push(message) - 1;
      index.messageCount = state.messages.length;
      index.messageById.set(message.id, m);
      message.parts.forEach((part, p) => track(index, message, m, p, part));
      return m;
    },
    part: ({ message, part }) => state.messages[message].parts[part],
    textPartOf: (m) => state.messages[m].parts.findIndex((part) => part.type === 'text'),
    addPart: (m, part) => {
      const message = state.messages[m];
      const p = message.parts.push(part) - 1;
      track(index, message, m, p, part);
      return p;
    },
    setPart: (location, part) => {
      const message = state.messages[location.message];
      message.parts[location.part] = part;
      track(index, message, location.message, location.part, part);
    },
    tool: (runId, toolCallId) => index.tools.get(toolKey(runId, toolCallId)),
    // track() files every key in `tools` before it is open.
    openTools: (runId) =>
      [...(index.openTools.get(runId) ?? [])].map((key) => index.tools.get(key) as ToolLocation),
    approvalTool: (runId, approvalId) => lookup(index.approvalTool.get(toolKey(runId, approvalId))),
    linkApproval: (runId, approvalId, toolCallId) => {
      index.approvalTool.set(toolKey(runId, approvalId), toolKey(runId, toolCallId));
    },
  };
}
