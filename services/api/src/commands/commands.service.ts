/**
 * Commands with preconditions (docs/api.md): steer, stop, resolve an approval once,
 * answer "yes" safely, and consume a one-use receipt. Each is a decider in libs/domain
 * (run-decider.ts); `decideAndAppend` is the one handler that reads the run's own stream,
 * decides, and appends with the revision it read, deciding again when another writer moved
 * the run first, so a command never applies twice. A refusal travels as a RefusedError to
 * the one table at the edge (http/refusals.ts).
 */
import { Inject, Injectable } from '@nestjs/common';
import { v7 as uuidv7 } from 'uuid';
import {
  RefusedError,
  decideAnswer,
  decideConsume,
  decideResolve,
  decideSteer,
  decideStop,
  inputDigest,
  normalizeToolInput,
  receiptStream,
  RUN_STATE_DATA_TYPES,
  runStream,
  verifyReceipt,
  type Outcome,
  type RunState,
} from '@runledger/domain';
import { EVENT_STORE, WrongExpectedRevisionError, type EventStore } from '@runledger/event-store';
import { provisionSecretFile } from '../auth/api-keys';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';
import type { ClientCaller } from '../http/caller';
import { validateBody } from '../http/validate-body';
import { RunLogService } from '../runs/run-log.service';
import { ProjectionsService } from '../threads/projections.service';
import { assertThreadId } from '../threads/threads.service';
import { ConsumeBody, DecisionBody, SteerBody, StopBody } from './command-bodies';
import { PolicyService } from './policy.service';
import { FoldedRun, RunStates } from './run-states';

export const RECEIPT_SECRET_FILE = 'receipt-secret';
/** Concurrent commands re-read the run this often before giving up. */
const MAX_ATTEMPTS = 5;
/** Bytes of run states kept between commands (about). */
const RUN_STATES_BYTES = 32 * 1024 * 1024;

@Injectable()
export class CommandsService {
  private readonly secret: string;
  private readonly states = new RunStates(RUN_STATES_BYTES);

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

  async steer(caller: ClientCaller, runId: string, raw: unknown) {
    const body = validateBody(SteerBody, raw);
    const { appended } = await this.decideAndAppend(caller, runId, (state) =>
      decideSteer({ runId, ...body }, state),
    );
    return {
      runId,
      turnId: body.expectedTurnId,
      revision: appended.firstRevision,
      position: appended.position,
    };
  }

  async stop(caller: ClientCaller, runId: string, raw: unknown) {
    // A stop needs nothing but its run: no body at all is a stop without a reason.
    const body = validateBody(StopBody, raw === undefined ? {} : raw);
    const { appended } = await this.decideAndAppend(caller, runId, (state) =>
      decideStop({ runId, ...body }, state),
    );
    return {
      runId,
      status: 'cancelled',
      revision: appended.firstRevision,
      position: appended.position,
    };
  }

  async resolve(caller: ClientCaller, runId: string, approvalId: string, raw: unknown) {
    const { decision } = validateBody(DecisionBody, raw);
    const expiresAt = Math.floor(Date.now() / 1000) + this.config.receiptTtlSeconds;
    const receiptId = uuidv7();
    const { result, appended } = await this.decideAndAppend(caller, runId, (state) =>
      decideResolve(
        {
          tenantId: caller.tenantId,
          runId,
          approvalId,
          decision,
          user: caller.user,
          policy: (threadId, toolName) => this.policy.evaluate(caller.tenantId, threadId, toolName),
          receiptId,
          expiresAt,
          secret: this.secret,
        },
        state,
      ),
    );
    return {
      runId,
      approvalId,
      toolName: result.approval.toolName,
      requested: decision,
      decision: result.decision,
      downgraded: result.downgraded,
      ...(result.verdict.allowed ? {} : { policyRule: result.verdict.rule }),
      policyRevision: result.verdict.revision,
      receipt: result.receipt,
      receiptId,
      expiresAt: new Date(expiresAt * 1000).toISOString(),
      revision: appended.firstRevision,
      position: appended.position,
    };
  }

  /** "Yes" names nothing: it resolves the only pending approval, or asks which one. */
  async answer(caller: ClientCaller, threadId: string, raw: unknown, minPosition?: number) {
    assertThreadId(threadId);
    validateBody(DecisionBody, raw);
    await this.projections.waitForRecorded(minPosition);
    const thread = this.projections.threadHead(caller.tenantId, threadId);
    const answered = decideAnswer(threadId, thread.header.pendingApprovals);
    if ('refusal' in answered) throw new RefusedError(answered.refusal);
    return this.resolve(caller, answered.target.runId, answered.target.approvalId, raw);
  }

  async consume(caller: ClientCaller, raw: unknown) {
    const body = validateBody(ConsumeBody, raw);
    if (body.input === undefined) {
      throw new ApiError(400, 'validation_failed', 'input is required', [
        { field: 'input', rule: 'isDefined', message: 'input is required' },
      ]);
    }
    const check = verifyReceipt(body.receipt, this.secret, Math.floor(Date.now() / 1000));
    if (!check.ok) {
      // A receipt spent before it expired answers a late retry as the replay it is.
      if (
        check.reason === 'expired' &&
        check.claims.tenant === caller.tenantId &&
        (await this.consumed(caller.tenantId, check.claims.rid))
      ) {
        throw alreadyConsumed(check.claims.rid);
      }
      throw new RefusedError({
        code: 'receipt_refused',
        message: `the receipt is refused: ${check.reason}`,
        fields: { reason: check.reason },
      });
    }
    const claims = check.claims;
    if (claims.tenant !== caller.tenantId) {
      // Another tenant's receipt is not found, as its runs are not: nothing about it is told.
      throw new RefusedError({ code: 'receipt_not_found', message: 'receipt not found' });
    }
    // What the receipt is bound to, as it is now: the run, its approvals, the policy.
    const outcome = decideConsume(
      {
        claims,
        attempt: {
          toolName: body.toolName,
          ...(body.toolCallId === undefined ? {} : { toolCallId: body.toolCallId }),
          inputDigest: inputDigest(normalizeToolInput(body.input)),
          user: caller.user,
          receipt: body.receipt,
        },
        policyAllows: (threadId) =>
          this.policy.evaluate(caller.tenantId, threadId, claims.tool).allowed,
      },
      (await this.state(caller, claims.run)).state,
    );
    if ('refusal' in outcome) {
      // A replay is a replay whatever else it gets wrong (another input, a run ended since).
      if (await this.consumed(caller.tenantId, claims.rid)) throw alreadyConsumed(claims.rid);
      throw new RefusedError(outcome.refusal);
    }
    try {
      // Insert-if-absent in the log itself: across any number of replicas, one append wins.
      const appended = await this.store.append(
        receiptStream(caller.tenantId, claims.rid),
        outcome.events.map((event) => ({
          ...event,
          id: uuidv7(),
          metadata: { tenantId: caller.tenantId, runId: claims.run, threadId: claims.thread },
        })),
        { expectedRevision: 'no_stream' },
      );
      return {
        consumed: true,
        receiptId: claims.rid,
        approvalId: claims.approvalId,
        runId: claims.run,
        threadId: claims.thread,
        toolName: claims.tool,
        position: appended.position,
      };
    } catch (error) {
      if (!(error instanceof WrongExpectedRevisionError)) throw error;
      throw alreadyConsumed(claims.rid);
    }
  }

  private async consumed(tenantId: string, receiptId: string): Promise<boolean> {
    const recorded = await this.store.readStream(receiptStream(tenantId, receiptId), {
      maxCount: 1,
    });
    return recorded.length > 0;
  }

  /**
   * The one read → decide → append loop. The run is folded first, outside its append queue,
   * so a long run's read holds no appends back; then, in the queue, the events since are
   * folded in, the decider decides, and its events are appended at the revision decided on
   * (RunLogService.appendDecided). Only another replica can move the run in between: the
   * append then fails its expected revision, and the loop folds in what it missed and
   * decides again (which may now refuse: the turn another steer redirected, the approval
   * another call resolved). A state folded to the end is kept for the next command.
   */
  private async decideAndAppend<R>(
    caller: ClientCaller,
    runId: string,
    decide: (state: RunState) => Outcome<R>,
  ) {
    const folded = await this.state(caller, runId);
    const { state } = folded;
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await this.runLog.appendDecided(
          caller.tenantId,
          runId,
          state.revision + 1,
          (newer) => {
            for (const event of newer) folded.add(event);
            this.states.keep(runStream(caller.tenantId, runId), folded);
            const outcome = decide(state);
            if ('refusal' in outcome) throw new RefusedError(outcome.refusal);
            const { events, result } = outcome;
            return { events, expectedRevision: state.revision, result };
          },
          RUN_STATE_DATA_TYPES,
        );
      } catch (error) {
        if (!(error instanceof WrongExpectedRevisionError) || attempt >= MAX_ATTEMPTS) throw error;
      }
    }
  }

  /** The run folded to its last event: from the state kept for it, or from its start. */
  private async state(caller: ClientCaller, runId: string): Promise<FoldedRun> {
    const stream = runStream(caller.tenantId, runId);
    const folded = this.states.take(stream);
    const from = folded.state.revision + 1;
    for await (const event of this.runLog.runEvents(
      caller.tenantId,
      runId,
      from,
      RUN_STATE_DATA_TYPES,
    )) {
      folded.add(event);
    }
    this.states.keep(stream, folded);
    return folded;
  }
}

function alreadyConsumed(receiptId: string): RefusedError {
  return new RefusedError({
    code: 'receipt_already_used',
    message: `receipt ${receiptId} was already consumed`,
  });
}
