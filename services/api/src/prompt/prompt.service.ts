/**
 * A client-started turn: records the user's words and a `turn.started` on the thread's open
 * run (or a run it starts), unless the thread has a turn in progress: then 409 `turn_active`
 * with that turn and the thread's status, and nothing is written. The rule is libs/domain's
 * `decidePrompt`; the run's own append rules (one active turn per run, checked on the run's
 * stream under its revision) make the decision hold against a racing prompt or runtime.
 */
import { Injectable } from '@nestjs/common';
import { v7 as uuidv7 } from 'uuid';
import {
  RUN_SOURCES,
  decidePrompt,
  promptEvents,
  promptRunId,
  type ChannelStamp,
  type RunSource,
} from '@runledger/domain';
import { BindingsService, channelKeyOf } from '../bindings/bindings.service';
import { ChannelKeyBody } from '../bindings/binding-bodies';
import { ApiError } from '../http/api-error';
import { refusalToApiError } from '../http/refusals';
import type { ClientCaller } from '../http/caller';
import { validateBody } from '../http/validate-body';
import { RunLogService } from '../runs/run-log.service';
import { ThreadDirectory } from '../surface/thread-directory.service';
import { PromptBody } from './prompt-body';

/** The agent of a thread's first run when the prompt names none. */
export const DEFAULT_PROMPT_AGENT = 'assistant';
/** A prompt that loses a race re-reads the thread and decides again, this often. */
const MAX_ATTEMPTS = 3;
/** The run log's refusals (by HTTP code) that mean "the thread changed under us": decide again. */
const RACES = new Set([
  'turn_already_active',
  'run_finished',
  'run_already_started',
  'wrong_expected_revision',
]);

export interface PromptAnswer {
  threadId: string;
  runId: string;
  turnId: string;
  messageId: string;
  /** True when the prompt started a run (the thread had none open). */
  runStarted: boolean;
  position: number;
}

@Injectable()
export class PromptService {
  constructor(
    private readonly runLog: RunLogService,
    private readonly threads: ThreadDirectory,
    private readonly bindings: BindingsService,
  ) {}

  async prompt(caller: ClientCaller, threadId: string, raw: unknown): Promise<PromptAnswer> {
    const body = validateBody(PromptBody, raw);
    const channel =
      body.binding === undefined ? undefined : await this.channel(caller, threadId, body.binding);
    const source: RunSource =
      body.source ??
      (channel && (RUN_SOURCES as readonly string[]).includes(channel.channel)
        ? (channel.channel as RunSource)
        : 'api');
    const metadata = { user: caller.user, ...(channel ? { channel } : {}) };
    for (let attempt = 1; ; attempt += 1) {
      const thread = await this.threads.require(caller.tenantId, threadId);
      const decision = decidePrompt(thread);
      if (decision.kind === 'refused') {
        const own = decision.activeTurnId === body.turnId;
        throw new ApiError(
          409,
          'turn_active',
          own
            ? `this prompt's turn ${decision.activeTurnId} is already in progress (run ${decision.runId}): a retry; nothing more was recorded`
            : `thread ${threadId} has turn ${decision.activeTurnId} in progress (run ${decision.runId}); nothing was recorded, try again when it finishes`,
          undefined,
          { activeTurnId: decision.activeTurnId, runId: decision.runId, status: decision.status },
        );
      }
      const runId =
        decision.kind === 'continue'
          ? decision.runId
          : promptRunId(caller.tenantId, threadId, decision.previousRunId);
      const ids = { messageId: uuidv7(), turnId: body.turnId ?? uuidv7() };
      const events = promptEvents(
        { text: body.text, threadId, source, metadata, ...ids },
        decision.kind === 'start' ? { ...decision, agent: body.agent ?? decision.agent } : decision,
        thread,
        DEFAULT_PROMPT_AGENT,
      );
      try {
        const result = await this.runLog.appendAsServer(
          caller.tenantId,
          runId,
          events,
          decision.kind === 'start' ? 'no_stream' : 'any',
        );
        return {
          threadId,
          runId,
          ...ids,
          runStarted: decision.kind === 'start',
          position: result.position,
        };
      } catch (error) {
        // The run log refuses in the domain's terms (RefusedError, the store's revision
        // conflict); their HTTP codes name the race.
        const raced = RACES.has(refusalToApiError(error)?.error ?? '');
        if (!raced || attempt >= MAX_ATTEMPTS) throw error;
      }
    }
  }

  /** The binding the prompt came through; it must exist and bind this thread. */
  private async channel(
    caller: ClientCaller,
    threadId: string,
    raw: unknown,
  ): Promise<ChannelStamp> {
    let key;
    try {
      key = channelKeyOf(validateBody(ChannelKeyBody, raw));
    } catch (error) {
      if (!(error instanceof ApiError) || !Array.isArray(error.details)) throw error;
      const details = (error.details as { field: string }[]).map((d) => ({
        ...d,
        field: `binding.${d.field}`,
      }));
      throw new ApiError(400, 'validation_failed', 'binding is invalid', details);
    }
    const binding = await this.bindings.find(caller.tenantId, key);
    if (!binding) {
      throw new ApiError(
        404,
        'binding_not_found',
        'binding not found: bind the conversation with PUT /v1/bindings first',
      );
    }
    if (binding.threadId !== threadId) {
      throw new ApiError(
        409,
        'binding_mismatch',
        `the conversation is bound to thread ${binding.threadId}, not ${threadId}; nothing was recorded`,
        undefined,
        { threadId: binding.threadId },
      );
    }
    return { bindingId: binding.bindingId, ...key };
  }
}
