/**
 * Recorded events of one thread for the projection tests, stamped the way the server stamps
 * them (tenant, run, thread in metadata; strictly increasing positions), and a
 * given/when helper that folds them.
 */
import type { EventDataByType } from '../../event-catalogue';
import type { EventType } from '../../event-types';
import { isToolPart } from '../message-text';
import { applyToThread, emptyThread } from '../thread-fold';
import type { ProjectedEvent, ThreadState, ToolPart } from '../thread-state';

export const TENANT = 'tenant-1';
export const THREAD = 'thread-1';

const EPOCH = Date.UTC(2025, 0, 1);

export function recordedAt(position: number): string {
  return new Date(EPOCH + position * 1000).toISOString();
}

/** Hands out events in position order, each stamped for its run and this thread. */
export class ThreadLog {
  private position = 0;

  constructor(
    readonly tenantId = TENANT,
    readonly threadId = THREAD,
  ) {}

  event<K extends EventType>(runId: string, type: K, data: EventDataByType[K]): ProjectedEvent {
    this.position += 1;
    return {
      id: `evt-${this.position}`,
      type,
      data: data as unknown as Record<string, unknown>,
      metadata: { tenantId: this.tenantId, threadId: this.threadId, runId },
      revision: this.position,
      position: this.position,
      recordedAt: recordedAt(this.position),
    };
  }

  runStarted(runId: string, data: Partial<EventDataByType['run.started']> = {}): ProjectedEvent {
    return this.event(runId, 'run.started', {
      threadId: this.threadId,
      agent: 'support-bot',
      source: 'typed',
      ...data,
    });
  }

  runFinished(runId: string, status: 'completed' | 'failed' | 'cancelled' = 'completed') {
    return this.event(runId, 'run.finished', { status });
  }

  turnStarted(runId: string, turnId: string): ProjectedEvent {
    return this.event(runId, 'turn.started', { turnId, source: 'typed' });
  }

  turnFinished(runId: string, turnId: string): ProjectedEvent {
    return this.event(runId, 'turn.finished', { turnId, status: 'completed' });
  }

  message(
    runId: string,
    messageId: string,
    role: 'user' | 'assistant' | 'system',
    text: string,
  ): ProjectedEvent {
    return this.event(runId, 'message.added', { messageId, role, text });
  }

  transcript(
    runId: string,
    utteranceId: string,
    role: 'user' | 'assistant',
    text: string,
  ): ProjectedEvent {
    return this.event(runId, 'transcript.added', { utteranceId, role, text });
  }

  toolStarted(
    runId: string,
    toolCallId: string,
    toolName = 'lookup',
    input: Record<string, unknown> = { orderId: 1042 },
  ): ProjectedEvent {
    return this.event(runId, 'tool.started', { toolCallId, toolName, input });
  }

  toolFinished(
    runId: string,
    toolCallId: string,
    finish: Partial<EventDataByType['tool.finished']> = {},
  ): ProjectedEvent {
    return this.event(runId, 'tool.finished', {
      toolCallId,
      toolName: 'lookup',
      output: { status: 'shipped' },
      failed: false,
      ...finish,
    });
  }

  approvalRequested(
    runId: string,
    approvalId: string,
    toolCallId: string,
    toolName = 'refund',
    input: Record<string, unknown> = { orderId: 1042, amount: 19.99 },
  ): ProjectedEvent {
    return this.event(runId, 'approval.requested', {
      approvalId,
      toolCallId,
      toolName,
      input,
      question: 'Refund 19.99 EUR?',
    });
  }

  approvalResolved(
    runId: string,
    approvalId: string,
    decision: 'allow' | 'deny',
    extra: Partial<EventDataByType['approval.resolved']> = {},
  ): ProjectedEvent {
    return this.event(runId, 'approval.resolved', {
      approvalId,
      decision,
      receipt: `receipt-${approvalId}`,
      ...extra,
    });
  }
}

/** Folds events, in order, into a new thread (or into `state`, in place). */
export function fold(
  events: readonly ProjectedEvent[],
  state: ThreadState = emptyThread(TENANT, THREAD),
): ThreadState {
  for (const event of events) applyToThread(state, event);
  return state;
}

const folded: ThreadState[] = [];

/**
 * given(...history).when(...events): the thread after all of them, in order. Each state it
 * answers is kept until takeFolded(), so a spec can check every example it built (e.g. that
 * the AI SDK accepts its messages) in one afterEach.
 */
export function given(...history: ProjectedEvent[]): {
  when: (...events: ProjectedEvent[]) => ThreadState;
} {
  return {
    when: (...events) => {
      const all = [...history, ...events];
      // Positions are handed out when an event is made: one made out of order would be
      // skipped by the fold as a redelivery, and the test would check less than it says.
      all.forEach((event, i) => {
        if (i > 0 && event.position <= all[i - 1].position) {
          throw new Error(
            `event ${event.id} (${event.type}) is folded after position ${all[i - 1].position}: make events in the order they are folded`,
          );
        }
      });
      const state = fold(all);
      folded.push(state);
      return state;
    },
  };
}

export function takeFolded(): ThreadState[] {
  return folded.splice(0, folded.length);
}

export function toolParts(state: ThreadState): ToolPart[] {
  return state.messages.flatMap((message) => message.parts.filter(isToolPart));
}

/** The only part of the call: fails the test when there is none, or more than one. */
export function toolPart(state: ThreadState, toolCallId: string): ToolPart {
  const parts = toolParts(state).filter((part) => part.toolCallId === toolCallId);
  if (parts.length !== 1) {
    throw new Error(`expected one tool part for ${toolCallId}, found ${parts.length}`);
  }
  return parts[0];
}
