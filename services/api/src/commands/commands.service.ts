/**
 * Commands with preconditions (docs/api.md): steer, stop, resolve an approval once,
 * answer "yes" safely, and consume a one-use receipt. Each reads the run's own stream, decides,
 * and appends with the revision it read as the expected revision, so a concurrent command that
 * changed the run first makes this one re-decide instead of applying twice.
 */
import { Inject, Injectable } from '@nestjs/common';
import { v7 as uuidv7 } from 'uuid';
import {
  inputDigest,
  normalizeToolInput,
  runCommandState,
  signReceipt,
  verifyReceipt,
  type ApprovalRecord,
  type Decision,
  type RunCommandState,
} from '@runledger/domain';
import { EVENT_STORE, WrongExpectedRevisionError, type EventStore } from '@runledger/event-store';
import { provisionSecretFile } from '../auth/api-keys';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';
import { validateBody } from '../http/validate-body';
import { RunLogService } from '../runs/run-log.service';
import { ProjectionsService } from '../threads/projections.service';
import { ConsumeBody, DecisionBody, SteerBody, StopBody } from './command-bodies';
import { PolicyService } from './policy.service';

export const RECEIPT_SECRET_FILE = 'receipt-secret';
export const RECEIPT_STREAM_PREFIX = 'receipt-';
/** Concurrent resolutions re-read the run this often before giving up. */
const MAX_ATTEMPTS = 5;

export interface Caller {
  tenantId: string;
  /** From X-Runledger-User, else the API key's own identity. */
  user: string;
}

@Injectable()
export class CommandsService {
  private readonly secret: string;

  constructor(
    private readonly runLog: RunLogService,
    private readonly projections: ProjectionsService,
    private readonly policy: PolicyService,
    @Inject(EVENT_STORE) private readonly store: EventStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {
    this.secret =
      config.receiptSecret ?? provisionSecretFile(config.dataDir, RECEIPT_SECRET_FILE).value;
  }

  async steer(caller: Caller, runId: string, raw: unknown) {
    const body = validateBody(SteerBody, raw);
    const state = await this.state(caller, runId);
    this.assertActiveTurn(state, body.expectedTurnId);
    try {
      const result = await this.runLog.appendAsServer(
        caller.tenantId,
        runId,
        [
          {
            type: 'turn.steered',
            data: { turnId: body.expectedTurnId, instruction: body.instruction },
          },
        ],
        state.revision,
      );
      return {
        runId,
        turnId: body.expectedTurnId,
        revision: result.firstRevision,
        position: result.position,
      };
    } catch (error) {
      if (!isRevisionConflict(error)) throw error;
      // Another command changed the run first: decide again on what it is now.
      const now = await this.state(caller, runId);
      this.assertActiveTurn(now, body.expectedTurnId);
      throw new ApiError(
        409,
        'steer_conflict',
        `another command changed run ${runId} while this steer was decided; the turn is still active, read it and decide again`,
        undefined,
        { activeTurnId: now.activeTurnId },
      );
    }
  }

  async stop(caller: Caller, runId: string, raw: unknown) {
    // A stop needs nothing but its run: no body at all is a stop without a reason.
    const body = validateBody(StopBody, raw === undefined ? {} : raw);
    const state = await this.state(caller, runId);
    assertNotFinished(state, runId);
    try {
      const result = await this.runLog.appendAsServer(
        caller.tenantId,
        runId,
        [
          {
            type: 'run.finished',
            data: {
              status: 'cancelled',
              ...(body.reason === undefined ? {} : { reason: body.reason }),
            },
          },
        ],
        'any',
      );
      return {
        runId,
        status: 'cancelled',
        revision: result.firstRevision,
        position: result.position,
      };
    } catch (error) {
      if (error instanceof ApiError && error.error === 'run_finished') {
        assertNotFinished(await this.state(caller, runId), runId);
      }
      throw error;
    }
  }

  async resolve(caller: Caller, runId: string, approvalId: string, raw: unknown) {
    const { decision } = validateBody(DecisionBody, raw);
    for (let attempt = 1; ; attempt += 1) {
      const state = await this.state(caller, runId);
      const approval = state.approvals.get(approvalId);
      if (!approval)
        throw new ApiError(
          404,
          'approval_not_found',
          `approval ${approvalId} not found in run ${runId}`,
        );
      if (approval.resolution) throw alreadyResolved(approval);
      assertNotFinished(state, runId);
      const verdict = this.policy.evaluate(caller.tenantId, state.threadId, approval.toolName);
      // An allow the policy forbids now becomes a one-time deny, recorded as downgraded.
      const downgraded = decision === 'allow' && !verdict.allowed;
      const final: Decision = downgraded ? 'deny' : decision;
      const expiresAt = Math.floor(Date.now() / 1000) + this.config.receiptTtlSeconds;
      const receipt = signReceipt(
        {
          rid: uuidv7(),
          tool: approval.toolName,
          inputDigest: inputDigest(approval.input),
          policyRevision: verdict.revision,
          tenant: caller.tenantId,
          user: caller.user,
          thread: state.threadId,
          run: runId,
          approvalId,
          decision: final,
          exp: expiresAt,
        },
        this.secret,
      );
      try {
        const result = await this.runLog.appendAsServer(
          caller.tenantId,
          runId,
          [
            {
              type: 'approval.resolved',
              data: {
                approvalId,
                decision: final,
                receipt,
                decidedBy: caller.user,
                downgraded,
                policyRevision: verdict.revision,
              },
            },
          ],
          state.revision,
        );
        return {
          runId,
          approvalId,
          toolName: approval.toolName,
          requested: decision,
          decision: final,
          downgraded,
          ...(verdict.allowed ? {} : { policyRule: verdict.rule }),
          policyRevision: verdict.revision,
          receipt,
          expiresAt: new Date(expiresAt * 1000).toISOString(),
          revision: result.firstRevision,
          position: result.position,
        };
      } catch (error) {
        if (!isRevisionConflict(error) || attempt >= MAX_ATTEMPTS) throw error;
      }
    }
  }

  /** "Yes" names nothing: it resolves the only pending approval, or asks which one. */
  async answer(caller: Caller, threadId: string, raw: unknown, minPosition?: number) {
    validateBody(DecisionBody, raw);
    await this.projections.waitFor(minPosition);
    const thread = this.projections.readModels.thread(caller.tenantId, threadId);
    if (!thread) throw new ApiError(404, 'thread_not_found', `thread ${threadId} not found`);
    const pending = thread.pendingApprovals;
    if (pending.length === 0) {
      throw new ApiError(409, 'no_pending_approval', `thread ${threadId} has no pending approval`);
    }
    if (pending.length > 1) {
      throw new ApiError(
        409,
        'ambiguous',
        `thread ${threadId} has ${pending.length} pending approvals: name the one to resolve`,
        undefined,
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
    return this.resolve(caller, pending[0].runId, pending[0].approvalId, raw);
  }

  async consume(caller: Caller, raw: unknown) {
    const body = validateBody(ConsumeBody, raw);
    if (body.input === undefined) {
      throw new ApiError(400, 'validation_failed', 'input is required', [
        { field: 'input', rule: 'isDefined', message: 'input is required' },
      ]);
    }
    const check = verifyReceipt(body.receipt, this.secret, Math.floor(Date.now() / 1000));
    if (!check.ok) throw refused(check.reason);
    const claims = check.claims;
    if (claims.tenant !== caller.tenantId)
      throw new ApiError(404, 'receipt_not_found', 'receipt not found');
    if (claims.tool !== body.toolName) throw refused('tool_mismatch');
    if (claims.inputDigest !== inputDigest(normalizeToolInput(body.input)))
      throw refused('input_mismatch');
    if (claims.decision !== 'allow') throw refused('denied');
    try {
      // Insert-if-absent in the log itself: across any number of replicas, one append wins.
      const result = await this.store.append(
        `${RECEIPT_STREAM_PREFIX}${claims.rid}`,
        [
          {
            id: uuidv7(),
            type: 'receipt.consumed',
            data: {
              approvalId: claims.approvalId,
              runId: claims.run,
              threadId: claims.thread,
              toolName: claims.tool,
              consumedBy: caller.user,
            },
            metadata: { tenantId: caller.tenantId },
          },
        ],
        { expectedRevision: 'no_stream' },
      );
      return {
        consumed: true,
        receiptId: claims.rid,
        approvalId: claims.approvalId,
        runId: claims.run,
        threadId: claims.thread,
        toolName: claims.tool,
        position: result.position,
      };
    } catch (error) {
      if (!(error instanceof WrongExpectedRevisionError)) throw error;
      throw new ApiError(409, 'receipt_already_used', `receipt ${claims.rid} was already consumed`);
    }
  }

  private async state(caller: Caller, runId: string): Promise<RunCommandState> {
    return runCommandState(await this.runLog.readRun(caller.tenantId, runId));
  }

  private assertActiveTurn(state: RunCommandState, expectedTurnId: string): void {
    if (state.activeTurnId === expectedTurnId && state.activeTurnSteeredAt !== null) {
      // Two steers of one turn race: the first redirects it, the second must not also win.
      throw new ApiError(
        409,
        'steer_conflict',
        `turn ${expectedTurnId} was already steered (revision ${state.activeTurnSteeredAt}); wait for the turn it leads to`,
        undefined,
        { activeTurnId: state.activeTurnId, steeredAtRevision: state.activeTurnSteeredAt },
      );
    }
    if (state.activeTurnId !== expectedTurnId) {
      throw new ApiError(
        409,
        'turn_not_active',
        state.activeTurnId === null
          ? `turn ${expectedTurnId} is not active: no turn is`
          : `turn ${expectedTurnId} is not active: turn ${state.activeTurnId} is`,
        undefined,
        { activeTurnId: state.activeTurnId },
      );
    }
  }
}

function assertNotFinished(state: RunCommandState, runId: string): void {
  if (state.finished) {
    throw new ApiError(
      409,
      'run_finished',
      `run ${runId} is already ${state.finished.status}`,
      undefined,
      {
        status: state.finished.status,
      },
    );
  }
}

function alreadyResolved(approval: ApprovalRecord): ApiError {
  const resolution = approval.resolution!;
  return new ApiError(
    409,
    'already_resolved',
    `approval ${approval.approvalId} was already resolved: ${resolution.decision}`,
    undefined,
    {
      resolution: {
        approvalId: approval.approvalId,
        decision: resolution.decision,
        downgraded: resolution.downgraded,
        decidedBy: resolution.decidedBy ?? null,
        policyRevision: resolution.policyRevision ?? null,
        receipt: resolution.receipt,
        revision: resolution.revision,
      },
    },
  );
}

function refused(reason: string): ApiError {
  return new ApiError(403, 'receipt_refused', `the receipt is refused: ${reason}`, undefined, {
    reason,
  });
}

function isRevisionConflict(error: unknown): boolean {
  return error instanceof ApiError && error.error === 'wrong_expected_revision';
}
