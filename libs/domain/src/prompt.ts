/**
 * A client-started turn (`POST /v1/threads/{id}/prompt`): the user's words and a
 * `turn.started`, unless the thread already has a turn in progress; then the prompt is
 * refused with that turn, so a chat bot can say "still working" instead of queueing or
 * steering by accident. Pure: the caller reads the thread, decides here, and appends.
 */
import { v5 as uuidv5 } from 'uuid';
import type { RunSource } from './event-types';
import type { RunSummary, ThreadStatus } from './projections/thread-state';

export interface PromptThread {
  status: ThreadStatus;
  title: string | null;
  /** In the order they started. */
  runs: Pick<RunSummary, 'runId' | 'status' | 'activeTurnId' | 'agent'>[];
}

export type PromptDecision =
  /** A turn is active: nothing may be written. */
  | { kind: 'refused'; activeTurnId: string; runId: string; status: ThreadStatus }
  /** A run is open with no turn in progress: the turn starts in it. */
  | { kind: 'continue'; runId: string }
  /** No run is open (a new or finished thread): a run starts for the turn. */
  | { kind: 'start'; previousRunId: string | null; agent: string | null };

export function decidePrompt(thread: PromptThread): PromptDecision {
  const active = thread.runs.find((run) => run.status === 'running' && run.activeTurnId !== null);
  if (active) {
    return {
      kind: 'refused',
      activeTurnId: active.activeTurnId!,
      runId: active.runId,
      status: thread.status,
    };
  }
  const open = [...thread.runs].reverse().find((run) => run.status === 'running');
  if (open) return { kind: 'continue', runId: open.runId };
  const last = thread.runs[thread.runs.length - 1];
  return {
    kind: 'start',
    previousRunId: last?.runId ?? null,
    agent: last !== undefined && last.agent !== '' ? last.agent : null,
  };
}

const PROMPT_RUN_NAMESPACE = '1b0d7a52-5d5f-4c7e-9a8e-7f1c2b7d6e10';

/**
 * The id of the run a prompt starts after `previousRunId`: derived, not random, so two
 * prompts racing to open the thread's next run name the same run, and the store's
 * `no_stream` check lets only one of them start it.
 */
export function promptRunId(
  tenantId: string,
  threadId: string,
  previousRunId: string | null,
): string {
  return uuidv5(JSON.stringify([tenantId, threadId, previousRunId]), PROMPT_RUN_NAMESPACE);
}

/** Longest thread title taken from a first prompt's words. */
export const PROMPT_TITLE_MAX = 80;

export interface PromptInput {
  text: string;
  threadId: string;
  messageId: string;
  turnId: string;
  source: RunSource;
  /** Server-stamped into every event: the acting user, the channel the turn came through. */
  metadata: Record<string, unknown>;
}

/**
 * The events a prompt records: a `run.started` when the decision starts a run (titled by the
 * prompt when the thread has no title yet), then the user's message and the turn.
 */
export function promptEvents(
  input: PromptInput,
  decision: Extract<PromptDecision, { kind: 'continue' | 'start' }>,
  thread: Pick<PromptThread, 'title'>,
  defaultAgent: string,
): { type: string; data: Record<string, unknown>; metadata: Record<string, unknown> }[] {
  const { metadata } = input;
  const events = [];
  if (decision.kind === 'start') {
    const title = thread.title === null ? titleOf(input.text) : null;
    events.push({
      type: 'run.started',
      data: {
        threadId: input.threadId,
        agent: decision.agent ?? defaultAgent,
        source: input.source,
        ...(title === null ? {} : { title }),
      },
      metadata,
    });
  }
  events.push(
    {
      type: 'message.added',
      data: { messageId: input.messageId, role: 'user', text: input.text },
      metadata,
    },
    { type: 'turn.started', data: { turnId: input.turnId, source: input.source }, metadata },
  );
  return events;
}

function titleOf(text: string): string | null {
  const collapsed = text.replace(/\s+/g, ' ').trim();
  if (collapsed === '') return null;
  const chars = [...collapsed];
  return chars.length <= PROMPT_TITLE_MAX
    ? collapsed
    : `${chars
        .slice(0, PROMPT_TITLE_MAX - 1)
        .join('')
        .trimEnd()}…`;
}
