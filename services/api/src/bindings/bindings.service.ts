/**
 * Channel bindings: find or create the thread of a chat conversation, list a channel
 * account's bindings, and resolve a binding for a turn started through it. A binding is the
 * first and only event of its own stream (libs/domain bindings.ts), so of any number of racing
 * "find or create" calls exactly one records it, and the others answer the winner's thread.
 */
import { Inject, Injectable } from '@nestjs/common';
import { v7 as uuidv7 } from 'uuid';
import {
  CHANNEL_BOUND,
  bindingStream,
  channelBoundOf,
  type ChannelBound,
  type ChannelKey,
} from '@runledger/domain';
import { EVENT_STORE, WrongExpectedRevisionError, type EventStore } from '@runledger/event-store';
import { ApiError } from '../http/api-error';
import type { ClientCaller } from '../http/caller';
import { validateBody } from '../http/validate-body';
import { SurfaceService } from '../surface/surface.service';
import { ThreadDirectory } from '../surface/thread-directory.service';
import type { BindingView } from '../surface/surface.store';
import { BindingBody } from './binding-bodies';

export interface BindingAnswer extends BindingView {
  /** True when this call recorded the binding (201); false when it found it (200). */
  created: boolean;
}

export interface BindingPage {
  bindings: BindingView[];
  nextAfter: number;
  position: number;
}

export function channelKeyOf(body: ChannelKey): ChannelKey {
  return {
    channel: body.channel,
    account: body.account,
    chat: body.chat,
    ...(body.topic === undefined ? {} : { topic: body.topic }),
  };
}

@Injectable()
export class BindingsService {
  constructor(
    @Inject(EVENT_STORE) private readonly log: EventStore,
    private readonly surface: SurfaceService,
    private readonly threads: ThreadDirectory,
  ) {}

  async bind(caller: ClientCaller, raw: unknown): Promise<BindingAnswer> {
    const body = validateBody(BindingBody, raw);
    const key = channelKeyOf(body);
    const existing = await this.find(caller.tenantId, key);
    if (existing) return found(existing, body.threadId);
    if (body.threadId !== undefined) await this.threads.require(caller.tenantId, body.threadId);
    const binding: ChannelBound = {
      bindingId: uuidv7(),
      threadId: body.threadId ?? uuidv7(),
      ...key,
      boundBy: caller.user,
    };
    try {
      const result = await this.log.append(
        bindingStream(caller.tenantId, key),
        [
          {
            id: uuidv7(),
            type: CHANNEL_BOUND,
            data: binding,
            metadata: { tenantId: caller.tenantId, user: caller.user },
          },
        ],
        { expectedRevision: 'no_stream' },
      );
      const [recorded] = await this.log.readStream(bindingStream(caller.tenantId, key), {
        maxCount: 1,
      });
      return {
        ...binding,
        boundAt: recorded.recordedAt,
        position: result.position,
        created: true,
      };
    } catch (error) {
      if (!(error instanceof WrongExpectedRevisionError)) throw error;
      // Another call bound the key first: its thread is the thread.
      const winner = await this.find(caller.tenantId, key);
      if (!winner) throw error;
      return found(winner, body.threadId);
    }
  }

  /** The binding of a key, read from its stream (never from a view that may lag); null when unbound. */
  async find(tenantId: string, key: ChannelKey): Promise<BindingView | null> {
    const [first] = await this.log.readStream(bindingStream(tenantId, key), { maxCount: 1 });
    const binding = first ? channelBoundOf(first) : null;
    if (!first || !binding) return null;
    return { ...binding, boundAt: first.recordedAt, position: first.position };
  }

  async list(
    tenantId: string,
    query: {
      channel?: string;
      account?: string;
      after: number;
      limit: number;
      minPosition?: number;
    },
  ): Promise<BindingPage> {
    await this.surface.waitFor(query.minPosition);
    const bindings = this.surface.store.bindings(tenantId, query);
    return {
      bindings,
      nextAfter: bindings[bindings.length - 1]?.position ?? query.after,
      position: this.surface.position(),
    };
  }
}

function found(binding: BindingView, requested: string | undefined): BindingAnswer {
  if (requested !== undefined && requested !== binding.threadId) {
    throw new ApiError(
      409,
      'binding_conflict',
      `this conversation is already bound to thread ${binding.threadId}, not ${requested}; nothing was changed`,
      undefined,
      { threadId: binding.threadId, bindingId: binding.bindingId },
    );
  }
  return { ...binding, created: false };
}
