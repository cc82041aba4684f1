/**
 * The thread fold's lookup tables: message by id, tool part by (run, toolCallId), run by id,
 * the open tool parts of each run, approval to tool part. They make every fold step O(1)
 * amortised instead of a scan over all messages.
 *
 * The index is not part of ThreadState: it is derived from the state alone, built on first
 * use and cached beside the state object in a WeakMap. A state read back from JSON (the
 * projector stores it between batches) therefore carries nothing that could disagree with
 * its view; its index is rebuilt once, in one pass, the first time it is folded into.
 */
import { isToolPart } from './message-text';
import type { RunSummary, ThreadState, ToolPartState, UIMessage } from './thread-state';

export interface ToolLocation {
  message: number;
  part: number;
  runId: string;
  toolCallId: string;
}

export interface ThreadIndex {
  /** The arrays the index was built for: an index of other arrays is stale. */
  messagesRef: UIMessage[];
  messageCount: number;
  runsRef: RunSummary[];
  runCount: number;
  messageById: Map<string, number>;
  /** By toolKey(runId, toolCallId): tool call ids are unique within a run only. */
  tools: Map<string, ToolLocation>;
  /** toolCallId → toolKey of the latest part created with that id, for callers without a run. */
  latestTool: Map<string, string>;
  runById: Map<string, number>;
  /** runId → toolKeys of that run's parts not yet in a terminal state. */
  openTools: Map<string, Set<string>>;
  /** approvalId → toolKey of the part it was requested for. */
  approvalTool: Map<string, string>;
  /** Runs not finished, and those of them with an active turn: status without a scan. */
  activeRuns: number;
  activeTurns: number;
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

const INDEXES = new WeakMap<ThreadState, ThreadIndex>();

/** The state's index: cached while the state's arrays are the ones it was built for. */
export function indexOf(state: ThreadState): ThreadIndex {
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

/** One pass over the state; everything in the index is a function of the state. */
export function buildIndex(state: ThreadState): ThreadIndex {
  const index: ThreadIndex = {
    messagesRef: state.messages,
    messageCount: state.messages.length,
    runsRef: state.runs,
    runCount: state.runs.length,
    messageById: new Map(),
    tools: new Map(),
    latestTool: new Map(),
    runById: new Map(),
    openTools: new Map(),
    approvalTool: new Map(),
    activeRuns: 0,
    activeTurns: 0,
  };
  state.runs.forEach((run, i) => {
    index.runById.set(run.runId, i);
    if (run.status === 'running') {
      index.activeRuns += 1;
      if (run.activeTurnId !== null) index.activeTurns += 1;
    }
  });
  state.messages.forEach((message, m) => {
    index.messageById.set(message.id, m);
    const runId = message.metadata?.runId ?? '';
    message.parts.forEach((part, p) => {
      if (!isToolPart(part)) return;
      const key = toolKey(runId, part.toolCallId);
      index.tools.set(key, { message: m, part: p, runId, toolCallId: part.toolCallId });
      index.latestTool.set(part.toolCallId, key);
      if (!isTerminal(part.state)) openToolOf(index, runId).add(key);
      if (part.approval !== undefined) index.approvalTool.set(part.approval.id, key);
    });
  });
  for (const approval of state.pendingApprovals) {
    index.approvalTool.set(approval.approvalId, toolKey(approval.runId, approval.toolCallId));
  }
  return index;
}

export function openToolOf(index: ThreadIndex, runId: string): Set<string> {
  let open = index.openTools.get(runId);
  if (open === undefined) {
    open = new Set();
    index.openTools.set(runId, open);
  }
  return open;
}

/** Appends a message, keeping the index in step. */
export function pushMessage(state: ThreadState, index: ThreadIndex, message: UIMessage): number {
  const m = state.messages.push(message) - 1;
  index.messageCount = state.messages.length;
  index.messageById.set(message.id, m);
  return m;
}

/** Appends a run, keeping the index in step. */
export function pushRun(state: ThreadState, index: ThreadIndex, run: RunSummary): RunSummary {
  const r = state.runs.push(run) - 1;
  index.runCount = state.runs.length;
  index.runById.set(run.runId, r);
  if (run.status === 'running') index.activeRuns += 1;
  return run;
}
