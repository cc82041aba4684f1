/**
 * "What needs me" (docs/client-surface.md: the default set is narrow): a thread that became
 * **blocked** (an approval or a question waits on a person) and a thread that **finished**
 * (with how: completed, failed, cancelled). A pure fold per thread over its run events that
 * answers, for each event, the one notification its transition causes, if any: exactly one
 * item per transition, however many approvals pile up while the thread is already blocked.
 *
 * The status rules are the thread view's (thread-fold.ts): blocked while an approval of a
 * running run is pending (neither resolved nor overtaken by its tool's finish); finished once
 * every run of the thread has ended.
 */
import { isEventType, type EndStatus, type EventType } from '../event-types';
import { toolLabel } from '../tool-labels';
import { boundedQuestion } from '../projections/thread-fold';
import type { ProjectedEvent } from '../projections/thread-state';

export const NOTIFICATION_KINDS = ['blocked', 'finished'] as const;
export type NotificationKind = (typeof NOTIFICATION_KINDS)[number];

/**
 * One item, shaped as data a model can be given as it is: state and event markers, a short
 * summary, and the position of the event that caused it (the resume point of every reader).
 */
export interface Notification {
  threadId: string;
  runId: string;
  kind: NotificationKind;
  /** `blocked`, or how the thread finished: `completed`, `failed`, `cancelled`. */
  state: 'blocked' | EndStatus;
  title: string | null;
  summary: string;
  position: number;
  /** The event that caused it: its type, id and time. */
  event: 'approval.requested' | 'run.finished';
  eventId: string;
  recordedAt: string;
  /** On `blocked`: what waits for a decision. */
  approvalId?: string;
  toolName?: string;
  /** Cut as the thread view cuts a pending approval's question (PENDING_DETAIL_MAX_CHARS). */
  question?: string;
  /** The whole question's length, when `question` was cut. */
  questionChars?: number;
}

/** What the fold keeps per thread: just enough to see its status change. */
export interface NotificationThread {
  tenantId: string;
  threadId: string;
  title: string | null;
  activeRuns: string[];
  /** The most recent ended runs (MAX_ENDED_RUNS), so a late event of one never revives it. */
  endedRuns: string[];
  endedCount: number;
  /** Approvals waiting, a tool call's newest only (as the thread view keeps them). */
  pending: { approvalId: string; runId: string; toolCallId: string }[];
  status: 'blocked' | 'finished' | 'open';
  /** Position of the last event folded in. */
  position: number;
}

/**
 * Ended runs remembered by id. A chat thread gains a run per finished conversation, so the
 * list is bounded; the write path refuses any event after a run's end, so only a redelivery
 * could name an older one, and the position check already drops those.
 */
export const MAX_ENDED_RUNS = 64;
/** Longest summary; a longer one is cut and ends with '…'. */
export const SUMMARY_MAX = 280;

/**
 * The types whose data `foldNotification` reads; of every other event it reads only the
 * position, id, time and metadata. The client surface follows the whole log on the api's
 * event loop and asks the store for these types' data alone.
 */
export const NOTIFICATION_DATA_TYPES: readonly EventType[] = [
  'run.started',
  'run.finished',
  'approval.requested',
  'approval.resolved',
  'tool.finished',
];

/** Types that only move the position: they name no run the thread view would add. */
const NOT_RUN_ACTIVITY = new Set(['turn.steered', 'model.call', 'append.rejected']);

/**
 * Who the event makes the thread for: the `metadata.user` of a run or turn start (a user's
 * name, or `key:<key id>`), else null. Every such user is the thread's, however many: a thread
 * is listed under `?user=` for each (their rows are the client surface store's, not this state's).
 */
export function threadUserOf(event: Pick<ProjectedEvent, 'type' | 'metadata'>): string | null {
  if (event.type !== 'run.started' && event.type !== 'turn.started') return null;
  const user = event.metadata.user;
  return typeof user === 'string' && user !== '' ? user : null;
}

export function emptyNotificationThread(tenantId: string, threadId: string): NotificationThread {
  return {
    tenantId,
    threadId,
    title: null,
    activeRuns: [],
    endedRuns: [],
    endedCount: 0,
    pending: [],
    status: 'open',
    position: 0,
  };
}

/**
 * Folds one event of the thread into `state` (in place) and answers the notification it
 * causes, or null. Events are expected in position order; one at or below the state's
 * position was already folded and changes nothing. Unknown types are left out.
 */
export function foldNotification(
  state: NotificationThread,
  event: ProjectedEvent,
): Notification | null {
  if (!isEventType(event.type) || event.position <= state.position) return null;
  state.position = event.position;
  if (NOT_RUN_ACTIVITY.has(event.type)) return null;
  const runId = typeof event.metadata.runId === 'string' ? event.metadata.runId : '';
  const data = event.data;
  const before = state.status;
  ensureRun(state, runId);
  switch (event.type) {
    case 'run.started':
      if (state.title === null && typeof data.title === 'string' && data.title.trim() !== '') {
        state.title = data.title;
      }
      break;
    case 'run.finished':
      if (state.activeRuns.includes(runId)) {
        state.activeRuns = state.activeRuns.filter((id) => id !== runId);
        state.endedRuns.push(runId);
        if (state.endedRuns.length > MAX_ENDED_RUNS) state.endedRuns.shift();
        state.endedCount += 1;
      }
      state.pending = state.pending.filter((p) => p.runId !== runId);
      break;
    case 'approval.requested': {
      const approvalId = data.approvalId as string;
      const toolCallId = data.toolCallId as string;
      const running = state.activeRuns.includes(runId);
      // Asked again, a call waits on its newest request only: the older one is superseded;
      // and an approval id names one request of its run, its newest.
      state.pending = state.pending.filter(
        (p) => p.runId !== runId || (p.toolCallId !== toolCallId && p.approvalId !== approvalId),
      );
      if (running) state.pending.push({ approvalId, runId, toolCallId });
      break;
    }
    case 'approval.resolved':
      state.pending = state.pending.filter(
        (p) => !(p.runId === runId && p.approvalId === data.approvalId),
      );
      break;
    case 'tool.finished':
      state.pending = state.pending.filter(
        (p) => !(p.runId === runId && p.toolCallId === data.toolCallId),
      );
      break;
    default:
      break;
  }
  state.status = statusOf(state);
  if (state.status === before || state.status === 'open') return null;
  return state.status === 'blocked' ? blocked(state, event, runId) : finished(state, event, runId);
}

function ensureRun(state: NotificationThread, runId: string): void {
  if (state.activeRuns.includes(runId) || state.endedRuns.includes(runId)) return;
  state.activeRuns.push(runId);
}

function statusOf(state: NotificationThread): NotificationThread['status'] {
  if (state.pending.length > 0) return 'blocked';
  if (state.endedCount > 0 && state.activeRuns.length === 0) return 'finished';
  return 'open';
}

function blocked(state: NotificationThread, event: ProjectedEvent, runId: string): Notification {
  const data = event.data;
  const toolName = String(data.toolName);
  const question =
    typeof data.question === 'string' && data.question.trim() !== ''
      ? data.question.trim()
      : undefined;
  const label = toolLabel(toolName, data.input);
  return {
    ...base(state, event, runId),
    kind: 'blocked',
    state: 'blocked',
    summary: cut(
      question === undefined
        ? `approval requested: ${label}`
        : `approval requested: ${label} | ${question}`,
    ),
    event: 'approval.requested',
    approvalId: String(data.approvalId),
    toolName,
    ...(question === undefined ? {} : boundedQuestion(question)),
  };
}

function finished(state: NotificationThread, event: ProjectedEvent, runId: string): Notification {
  const status = event.data.status as EndStatus;
  const detail = [event.data.reason, event.data.errorText].filter(
    (text): text is string => typeof text === 'string' && text.trim() !== '',
  );
  return {
    ...base(state, event, runId),
    kind: 'finished',
    state: status,
    summary: cut([`run ${status}`, ...detail.map((text) => text.trim())].join(' | ')),
    event: 'run.finished',
  };
}

function base(state: NotificationThread, event: ProjectedEvent, runId: string) {
  return {
    threadId: state.threadId,
    runId,
    title: state.title,
    position: event.position,
    eventId: event.id,
    recordedAt: event.recordedAt,
  };
}

/**
 * Collapsing whitespace turns a prefix of the text into a prefix of the summary, so a long text
 * (a question of 1 MiB) is read only as far as its summary needs: the client surface folds on
 * the api's event loop.
 */
function cut(text: string): string {
  for (let read = 4 * SUMMARY_MAX; ; read *= 2) {
    const whole = read >= text.length;
    const collapsed = (whole ? text : text.slice(0, read)).replace(/\s+/g, ' ');
    if (whole && collapsed.length <= SUMMARY_MAX) return collapsed;
    const chars = [...collapsed];
    // Once the prefix holds more than SUMMARY_MAX characters, its first SUMMARY_MAX - 1 are
    // the summary's, whatever follows them.
    if (whole || chars.length > SUMMARY_MAX) return `${chars.slice(0, SUMMARY_MAX - 1).join('')}…`;
  }
}
