/**
 * The run's lifecycle rules for an append, as a pure decision over what the stream's last
 * recorded event says. No I/O: the caller reads the head and acts on the verdict.
 */
/** What an append needs to know about a run: read from its last recorded event. */
export interface RunHead {
  revision: number;
  hash: string;
  tenantId: string;
  threadId: string;
  finished: boolean;
  /** The turn in progress once the last event was recorded, from its stamp; null when none. */
  activeTurnId: string | null;
}

export type RunRuleViolation =
  | { code: 'run_not_found'; message: string }
  | { code: 'run_already_started'; message: string; index: number }
  | { code: 'run_finished'; message: string; index?: number }
  | { code: 'turn_already_active'; message: string; index: number; activeTurnId: string };

/** What the rules read of an event: its type, and the turn id of the turn events. */
export interface RuleEvent {
  type: string;
  data: unknown;
}

/** Metadata key of the server's stamp: the run's active turn once the event is recorded. */
export const ACTIVE_TURN_STAMP = 'activeTurnId';

/**
 * Decides whether a batch may be appended to a run. A foreign tenant's run is reported
 * exactly like a missing one, so a tenant never learns another tenant's run exists.
 */
export function checkRunAppend(
  head: RunHead | null,
  tenantId: string,
  runId: string,
  events: readonly RuleEvent[],
): RunRuleViolation | null {
  const types = events.map((event) => event.type);
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
  let activeTurnId = head?.activeTurnId ?? null;
  for (let index = 0; index < types.length; index += 1) {
    const type = types[index];
    if (type === 'turn.started' && activeTurnId !== null) {
      return {
        code: 'turn_already_active',
        message: `run ${runId} has turn ${activeTurnId} in progress: finish it before starting another (at most one active turn per run)`,
        index,
        activeTurnId,
      };
    }
    activeTurnId = nextActiveTurn(activeTurnId, events[index]);
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

/**
 * The run's active turn after `event`. A turn ends with its own `turn.finished` (one naming
 * another turn changes nothing) or with the run.
 */
export function nextActiveTurn(active: string | null, event: RuleEvent): string | null {
  const turnId = (event.data as { turnId?: unknown } | null)?.turnId;
  switch (event.type) {
    case 'turn.started':
      return typeof turnId === 'string' ? turnId : active;
    case 'turn.finished':
      return turnId === active ? null : active;
    case 'run.finished':
      return null;
    default:
      return active;
  }
}

/**
 * Stamps each event's metadata with the run's active turn once it is recorded (the key is
 * absent when no turn is active, whatever the client sent), so the next append learns the
 * active turn from the stream's last event alone.
 */
export function stampActiveTurns<E extends RuleEvent & { metadata: Record<string, unknown> }>(
  head: RunHead | null,
  events: readonly E[],
): E[] {
  let active = head?.activeTurnId ?? null;
  return events.map((event) => {
    active = nextActiveTurn(active, event);
    const metadata = { ...event.metadata };
    delete metadata[ACTIVE_TURN_STAMP];
    if (active !== null) metadata[ACTIVE_TURN_STAMP] = active;
    return { ...event, metadata };
  });
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
    activeTurnId: text(ACTIVE_TURN_STAMP) || null,
  };
}
