/**
 * The run's commands as deciders (as emmett's): one run state, folded from the run's own
 * stream by one `evolve` (not from a read model that may lag), and a pure `decide` per
 * command, `(command, state) → events | refusal`. No I/O, no clock, no randomness: what a
 * decision needs from outside (now, the policy, a fresh receipt id, the secret) comes in the
 * command. The handler in services/api reads, decides, appends with the state's revision and
 * decides again when another writer moved the run first; refusals become HTTP statuses in
 * one table at the edge (services/api/src/http/refusals.ts).
 */
import type { Decision, EventType } from './event-types';
import { ChainSealer, type UnsealedEvent } from './hash-chain';
import type { PolicyVerdict } from './policy';
import type { PendingApproval } from './projections';
import {
  consumeRefusal,
  inputDigest,
  receiptDigest,
  signReceipt,
  type ConsumeAttempt,
  type ReceiptClaims,
} from './receipts';
import {
  checkRunAppend,
  nextActiveTurn,
  stampActiveTurns,
  type RunHead,
  type RunRuleViolation,
} from './run-rules';

export interface ApprovalRecord {
  approvalId: string;
  toolCallId: string;
  toolName: string;
  input: unknown;
  question?: string;
  /**
   * Revision of its tool call's finish, once the call finished: while the request waited
   * (nothing is left to resolve), or after its resolution (its receipt runs nothing).
   */
  finishedAt?: number;
  resolution?: {
    decision: string;
    downgraded: boolean;
    /** The receipt's id (or, in logs written before, the token itself). */
    receipt: string;
    receiptDigest?: string;
    decidedBy?: string;
    policyRevision?: string;
    revision: number;
  };
}

export interface RunState {
  /** Revision of the run's last event; -1 before its first. */
  revision: number;
  threadId: string;
  finished: { status: string } | null;
  activeTurnId: string | null;
  /** Revision of the steer the active turn already received, if any: a turn is redirected once. */
  activeTurnSteeredAt: number | null;
  approvals: Map<string, ApprovalRecord>;
  /** The newest approval asked for each tool call: an older one is superseded. */
  latestApprovalByToolCall: Map<string, string>;
}

/** What evolve reads of a recorded event. */
export interface RecordedRunEvent {
  type: string;
  revision: number;
  data: unknown;
  metadata: Record<string, unknown>;
}

export function initialRunState(): RunState {
  return {
    revision: -1,
    threadId: '',
    finished: null,
    activeTurnId: null,
    activeTurnSteeredAt: null,
    approvals: new Map(),
    latestApprovalByToolCall: new Map(),
  };
}

/**
 * The types whose data `evolve` reads; of every other event it reads only the revision and
 * metadata. A reader folding a long run asks the store for these types' data alone: a coding
 * agent's run is mostly `model.call` contexts of up to a megabyte each, which no command reads.
 */
export const RUN_STATE_DATA_TYPES: readonly EventType[] = [
  'run.finished',
  'turn.started',
  'turn.finished',
  'turn.steered',
  'approval.requested',
  'approval.resolved',
  'tool.finished',
];

/** The one evolve: the state after `event`. Mutates and returns `state` (folds are hot). */
export function evolve(state: RunState, event: RecordedRunEvent): RunState {
  const data = event.data as Record<string, unknown>;
  state.revision = event.revision;
  if (typeof event.metadata.threadId === 'string') state.threadId = event.metadata.threadId;
  // The active-turn rule is the append rules' own (run-rules.ts), not a second copy.
  const active = nextActiveTurn(state.activeTurnId, event);
  if (active !== state.activeTurnId) state.activeTurnSteeredAt = null;
  state.activeTurnId = active;
  switch (event.type) {
    case 'turn.steered':
      if (state.activeTurnId === data.turnId && state.activeTurnSteeredAt === null) {
        state.activeTurnSteeredAt = event.revision;
      }
      break;
    case 'run.finished':
      state.finished = { status: data.status as string };
      break;
    case 'approval.requested': {
      // An approval id names its newest request, as the thread view shows it: asked again, the
      // request (and what a resolution binds) is the new one, and an earlier resolution's
      // receipt no longer matches it.
      const approvalId = data.approvalId as string;
      state.latestApprovalByToolCall.set(data.toolCallId as string, approvalId);
      state.approvals.set(approvalId, {
        approvalId,
        toolCallId: data.toolCallId as string,
        toolName: data.toolName as string,
        input: data.input,
        question: data.question as string | undefined,
      });
      break;
    }
    case 'approval.resolved': {
      const approval = state.approvals.get(data.approvalId as string);
      if (approval && !approval.resolution) {
        approval.resolution = {
          decision: data.decision as string,
          downgraded: data.downgraded === true,
          receipt: data.receipt as string,
          receiptDigest: data.receiptDigest as string | undefined,
          decidedBy: data.decidedBy as string | undefined,
          policyRevision: data.policyRevision as string | undefined,
          revision: event.revision,
        };
      }
      break;
    }
    case 'tool.finished': {
      // The call went ahead (or gave up): a request still waiting has nothing left to decide,
      // as the thread view no longer lists it, and a resolved one's receipt nothing to run.
      const approvalId = state.latestApprovalByToolCall.get(data.toolCallId as string);
      const approval = approvalId === undefined ? undefined : state.approvals.get(approvalId);
      if (approval !== undefined && approval.toolCallId === data.toolCallId) {
        approval.finishedAt ??= event.revision;
      }
      break;
    }
    default:
      break;
  }
  return state;
}

export function foldRunState(events: readonly RecordedRunEvent[]): RunState {
  return events.reduce(evolve, initialRunState());
}

export type RefusalCode =
  | RunRuleViolation['code']
  | 'turn_not_active'
  | 'steer_conflict'
  | 'approval_not_found'
  | 'already_resolved'
  | 'approval_superseded'
  | 'tool_finished'
  | 'no_pending_approval'
  | 'ambiguous'
  | 'receipt_refused'
  | 'receipt_not_found'
  | 'receipt_already_used';

/** Why a command changes nothing: a code, a sentence, and the facts a caller acts on. */
export interface Refusal {
  code: RefusalCode;
  message: string;
  /** Top-level fields of the answer (the active turn, the first resolution, the reason...). */
  fields?: Record<string, unknown>;
  details?: unknown;
}

/** A refusal on its way to the edge, where one table turns it into an HTTP answer. */
export class RefusedError extends Error {
  constructor(readonly refusal: Refusal) {
    super(refusal.message);
    this.name = 'RefusedError';
  }
}

export interface NewEvent {
  type: string;
  data: Record<string, unknown>;
}

export type Outcome<R = undefined> = { events: NewEvent[]; result: R } | { refusal: Refusal };

/** A run rule's violation (run-rules.ts) as a refusal: the batch index, the active turn. */
export function violationRefusal(violation: RunRuleViolation): Refusal {
  return {
    code: violation.code,
    message: violation.message,
    ...('index' in violation && violation.index !== undefined
      ? { details: { index: violation.index } }
      : {}),
    ...('activeTurnId' in violation ? { fields: { activeTurnId: violation.activeTurnId } } : {}),
  };
}

const refuse = (code: RefusalCode, message: string, fields?: Record<string, unknown>) => ({
  refusal: { code, message, ...(fields === undefined ? {} : { fields }) },
});

function finishedRefusal(state: RunState, runId: string): { refusal: Refusal } | null {
  if (!state.finished) return null;
  return refuse('run_finished', `run ${runId} is already ${state.finished.status}`, {
    status: state.finished.status,
  });
}

export interface AppendCommand {
  tenantId: string;
  runId: string;
  /** Validated and size-gated, with their ids. */
  events: readonly UnsealedEvent[];
}

/**
 * Appends a batch to a run if the run's rules allow it (run-rules.ts), decided on the run's
 * head: the part of the run state each recorded event carries in its stamps, so the busiest
 * path reads one event, not the stream. The events come back stamped with the active turn,
 * with the sealer that then stamps each, in order, with the run's context and the hash chain
 * (hashing a large batch is long enough that a caller gives the event loop turns meanwhile).
 */
export function decideAppend(
  command: AppendCommand,
  head: RunHead | null,
): { events: UnsealedEvent[]; chain: ChainSealer } | { refusal: Refusal } {
  const { tenantId, runId, events } = command;
  const violation = checkRunAppend(head, tenantId, runId, events);
  if (violation) return { refusal: violationRefusal(violation) };
  const threadId = head?.threadId ?? (events[0].data as { threadId: string }).threadId;
  return {
    events: stampActiveTurns(head, events),
    chain: new ChainSealer(head, { tenantId, runId, threadId }),
  };
}

export interface SteerCommand {
  runId: string;
  expectedTurnId: string;
  instruction: string;
}

/**
 * Steers the active turn once; any other turn (or none) is `turn_not_active` with the active
 * one. A finished run is `run_finished`: `turn_not_active` tells a client it may start a fresh
 * turn instead, which a finished run refuses too.
 */
export function decideSteer(command: SteerCommand, state: RunState): Outcome {
  const finished = finishedRefusal(state, command.runId);
  if (finished) return finished;
  const { expectedTurnId } = command;
  if (state.activeTurnId === expectedTurnId && state.activeTurnSteeredAt !== null) {
    // Two steers of one turn race: the first redirects it, the second must not also win.
    return refuse(
      'steer_conflict',
      `turn ${expectedTurnId} was already steered (revision ${state.activeTurnSteeredAt}); wait for the turn it leads to`,
      { activeTurnId: state.activeTurnId, steeredAtRevision: state.activeTurnSteeredAt },
    );
  }
  if (state.activeTurnId !== expectedTurnId) {
    return refuse(
      'turn_not_active',
      state.activeTurnId === null
        ? `turn ${expectedTurnId} is not active: no turn is`
        : `turn ${expectedTurnId} is not active: turn ${state.activeTurnId} is`,
      { activeTurnId: state.activeTurnId },
    );
  }
  return {
    events: [
      { type: 'turn.steered', data: { turnId: expectedTurnId, instruction: command.instruction } },
    ],
    result: undefined,
  };
}

export interface StopCommand {
  runId: string;
  reason?: string;
}

export function decideStop(command: StopCommand, state: RunState): Outcome {
  const finished = finishedRefusal(state, command.runId);
  if (finished) return finished;
  return {
    events: [
      {
        type: 'run.finished',
        data: {
          status: 'cancelled',
          ...(command.reason === undefined ? {} : { reason: command.reason }),
        },
      },
    ],
    result: undefined,
  };
}

export interface ResolveCommand {
  tenantId: string;
  runId: string;
  approvalId: string;
  decision: Decision;
  user: string;
  /** The policy as it is now, for the run's thread and the approval's tool. */
  policy: (threadId: string, toolName: string) => PolicyVerdict & { revision: string };
  /** A fresh id for the receipt, and when it expires (seconds since the epoch). */
  receiptId: string;
  expiresAt: number;
  secret: string;
}

export interface Resolution {
  approval: ApprovalRecord;
  decision: Decision;
  downgraded: boolean;
  verdict: PolicyVerdict & { revision: string };
  /** The bearer receipt: for the resolver's answer only, never for the log. */
  receipt: string;
}

/**
 * Resolves an approval once, against the policy as it is now: an allow the policy forbids
 * becomes a one-time deny (`downgraded`). The log records the receipt's id and digest.
 */
export function decideResolve(command: ResolveCommand, state: RunState): Outcome<Resolution> {
  const { approvalId, runId } = command;
  const approval = state.approvals.get(approvalId);
  if (!approval) {
    return refuse('approval_not_found', `approval ${approvalId} not found in run ${runId}`);
  }
  const first = approval.resolution;
  if (first) {
    // The first resolution, without its receipt: the bearer token went to its resolver only.
    return refuse(
      'already_resolved',
      `approval ${approvalId} was already resolved: ${first.decision}`,
      {
        resolution: {
          approvalId,
          decision: first.decision,
          downgraded: first.downgraded,
          decidedBy: first.decidedBy ?? null,
          policyRevision: first.policyRevision ?? null,
          revision: first.revision,
        },
      },
    );
  }
  const finished = finishedRefusal(state, runId);
  if (finished) return finished;
  // The call was asked about again: a person decides on the newest request, whose input the
  // tool part shows; a receipt for this one could never be consumed.
  const latest = state.latestApprovalByToolCall.get(approval.toolCallId);
  if (latest !== approvalId) {
    return refuse(
      'approval_superseded',
      `approval ${approvalId} was asked again for tool call ${approval.toolCallId} as ${latest}: resolve that one`,
      { supersededBy: latest },
    );
  }
  if (approval.finishedAt !== undefined) {
    return refuse(
      'tool_finished',
      `tool call ${approval.toolCallId} finished while approval ${approvalId} waited: nothing is left to decide`,
      { toolCallId: approval.toolCallId, finishedAtRevision: approval.finishedAt },
    );
  }
  const verdict = command.policy(state.threadId, approval.toolName);
  const downgraded = command.decision === 'allow' && !verdict.allowed;
  const decision: Decision = downgraded ? 'deny' : command.decision;
  const claims: ReceiptClaims = {
    rid: command.receiptId,
    tool: approval.toolName,
    toolCallId: approval.toolCallId,
    inputDigest: inputDigest(approval.input),
    policyRevision: verdict.revision,
    tenant: command.tenantId,
    user: command.user,
    thread: state.threadId,
    run: runId,
    approvalId,
    decision,
    exp: command.expiresAt,
  };
  const receipt = signReceipt(claims, command.secret);
  return {
    events: [
      {
        type: 'approval.resolved',
        data: {
          approvalId,
          decision,
          receipt: command.receiptId,
          receiptDigest: receiptDigest(receipt),
          decidedBy: command.user,
          downgraded,
          policyRevision: verdict.revision,
        },
      },
    ],
    result: { approval, decision, downgraded, verdict, receipt },
  };
}

/** "Yes" names nothing: it answers the only pending approval, or asks which one. */
export function decideAnswer(
  threadId: string,
  pending: readonly Pick<PendingApproval, 'approvalId' | 'runId' | 'toolName' | 'question'>[],
): { target: Pick<PendingApproval, 'approvalId' | 'runId'> } | { refusal: Refusal } {
  if (pending.length === 0) {
    return refuse('no_pending_approval', `thread ${threadId} has no pending approval`);
  }
  if (pending.length > 1) {
    return refuse(
      'ambiguous',
      `thread ${threadId} has ${pending.length} pending approvals: name the one to resolve`,
      {
        pendingCount: pending.length,
        pending: pending.slice(0, 4).map((p) => ({
          approvalId: p.approvalId,
          runId: p.runId,
          toolName: p.toolName,
          question: p.question ?? null,
        })),
      },
    );
  }
  return { target: pending[0] };
}

export interface ConsumeCommand {
  claims: ReceiptClaims;
  attempt: ConsumeAttempt;
  /** Whether the policy allows the receipt's tool now, in the run's thread. */
  policyAllows: (threadId: string) => boolean;
}

/**
 * Consumes a verified receipt if what it is bound to still holds (`consumeRefusal`). The
 * event goes to the receipt's own stream, appended only if that stream does not exist yet.
 */
export function decideConsume(command: ConsumeCommand, state: RunState): Outcome {
  const { claims, attempt } = command;
  const approval = state.approvals.get(claims.approvalId);
  const reason = consumeRefusal(
    claims,
    attempt,
    {
      threadId: state.threadId,
      finished: state.finished !== null,
      ...(approval === undefined
        ? {}
        : {
            approval: {
              toolCallId: approval.toolCallId,
              resolvedReceipt: approval.resolution?.receipt,
              resolvedDigest: approval.resolution?.receiptDigest,
              toolFinished: approval.finishedAt !== undefined,
            },
          }),
      latestApprovalId: state.latestApprovalByToolCall.get(claims.toolCallId),
    },
    command.policyAllows(state.threadId),
  );
  if (reason !== null) {
    return refuse('receipt_refused', `the receipt is refused: ${reason}`, { reason });
  }
  return {
    events: [
      {
        type: 'receipt.consumed',
        data: {
          approvalId: claims.approvalId,
          runId: claims.run,
          threadId: claims.thread,
          toolCallId: claims.toolCallId,
          toolName: claims.tool,
          consumedBy: attempt.user,
        },
      },
    ],
    result: undefined,
  };
}
