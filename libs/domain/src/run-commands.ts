/**
 * What the commands need to know about a run, folded from its own stream (not from a read
 * model that may lag): the active turn, and each approval with its resolution.
 */
export interface ApprovalRecord {
  approvalId: string;
  toolCallId: string;
  toolName: string;
  input: unknown;
  question?: string;
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

export interface RunCommandState {
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

export function runCommandState(
  events: readonly {
    type: string;
    revision: number;
    data: unknown;
    metadata: Record<string, unknown>;
  }[],
): RunCommandState {
  const state: RunCommandState = {
    revision: -1,
    threadId: '',
    finished: null,
    activeTurnId: null,
    activeTurnSteeredAt: null,
    approvals: new Map(),
    latestApprovalByToolCall: new Map(),
  };
  for (const event of events) {
    const data = event.data as Record<string, unknown>;
    state.revision = event.revision;
    if (typeof event.metadata.threadId === 'string') state.threadId = event.metadata.threadId;
    switch (event.type) {
      case 'turn.started':
        state.activeTurnId = data.turnId as string;
        state.activeTurnSteeredAt = null;
        break;
      case 'turn.steered':
        if (state.activeTurnId === data.turnId && state.activeTurnSteeredAt === null) {
          state.activeTurnSteeredAt = event.revision;
        }
        break;
      case 'turn.finished':
        if (state.activeTurnId === data.turnId) {
          state.activeTurnId = null;
          state.activeTurnSteeredAt = null;
        }
        break;
      case 'run.finished':
        state.finished = { status: data.status as string };
        state.activeTurnId = null;
        state.activeTurnSteeredAt = null;
        break;
      case 'approval.requested':
        state.latestApprovalByToolCall.set(data.toolCallId as string, data.approvalId as string);
        if (!state.approvals.has(data.approvalId as string)) {
          state.approvals.set(data.approvalId as string, {
            approvalId: data.approvalId as string,
            toolCallId: data.toolCallId as string,
            toolName: data.toolName as string,
            input: data.input,
            question: data.question as string | undefined,
          });
        }
        break;
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
      default:
        break;
    }
  }
  return state;
}
