/**
 * The run's lifecycle rules for an append, as a pure decision over what the stream's last
 * recorded event says. No I/O: the caller reads the head and acts on the verdict.
 */
import type { EventType } from './event-types';

export const RUN_STREAM_PREFIX = 'run-';

export function runStream(runId: string): string {
  return `${RUN_STREAM_PREFIX}${runId}`;
}

/** What an append needs to know about a run: read from its last recorded event. */
export interface RunHead {
  revision: number;
  hash: string;
  tenantId: string;
  threadId: string;
  finished: boolean;
}

export type RunRuleViolation =
  | { code: 'run_not_found'; message: string }
  | { code: 'run_already_started'; message: string; index: number }
  | { code: 'run_finished'; message: string; index?: number };

/**
 * Decides whether a batch may be appended to a run. A foreign tenant's run is reported
 * exactly like a missing one, so a tenant never learns another tenant's run exists.
 */
export function checkRunAppend(
  head: RunHead | null,
  tenantId: string,
  runId: string,
  types: readonly EventType[],
): RunRuleViolation | null {
  // A foreign run and a run not yet started answer alike, so a tenant never learns another's run exists.
  const notFound: RunRuleViolation = {
    code: 'run_not_found',
    message: `run ${runId} not found: a run's first event must be run.started`,
  };
  if (head !== null && head.tenantId !== tenantId) return notFound;
  if (head === null && types[0] !== 'run.started') return notFound;
  if (head?.finished) {
    return { code: 'run_finished', message: `run ${runId} is finished: nothing can be appended` };
  }
  for (let index = 0; index < types.length; index += 1) {
    const type = types[index];
    if (type === 'run.started' && (head !== null || index > 0)) {
      return { code: 'run_already_started', message: `run ${runId} is already started`, index };
    }
    if (index > 0 && types[index - 1] === 'run.finished') {
      return {
        code: 'run_finished',
        message: `run ${runId} finishes at event ${index - 1} of the batch: nothing may follow`,
        index,
      };
    }
  }
  return null;
}

/** Reads a run's head from its last recorded event's server-stamped metadata. */
export function runHeadOf(last: {
  type: string;
  revision: number;
  metadata: Record<string, unknown>;
}): RunHead {
  const text = (key: string) =>
    typeof last.metadata[key] === 'string' ? (last.metadata[key] as string) : '';
  return {
    revision: last.revision,
    hash: text('hash'),
    tenantId: text('tenantId'),
    threadId: text('threadId'),
    finished: last.type === 'run.finished',
  };
}
