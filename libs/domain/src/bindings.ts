/**
 * Channel bindings: a chat channel's conversation, identified by (channel, account, chat,
 * topic), bound to one thread. Two topics of one group are two bindings, so two threads.
 * Each binding is its own stream, named from its key, so "find or create" is one append
 * with `expectedRevision: "no_stream"`: of any number of racing calls exactly one creates
 * it and every other reads the winner's thread.
 */
import { canonicalJson, sha256Hex } from './canonical-json';

export const BINDING_STREAM_PREFIX = 'binding-';
/** Recorded once per binding, first and only event of its stream. */
export const CHANNEL_BOUND = 'channel.bound';

export interface ChannelKey {
  channel: string;
  account: string;
  chat: string;
  /** A forum topic or sub-thread of the chat; absent for the chat itself. */
  topic?: string;
}

/** The data of `channel.bound`. */
export interface ChannelBound extends ChannelKey {
  bindingId: string;
  threadId: string;
  /** The acting user who bound it (a user's name, or `key:<key id>`). */
  boundBy: string;
}

/** Where a turn came from, stamped into the metadata of turns started through a binding. */
export interface ChannelStamp extends ChannelKey {
  bindingId: string;
}

/**
 * The binding's stream: a digest of the tenant and the key, so any characters in the key are
 * safe in a stream name, tenants never share a stream, and an absent topic differs from "".
 */
export function bindingStream(tenantId: string, key: ChannelKey): string {
  const identity = canonicalJson([tenantId, key.channel, key.account, key.chat, key.topic ?? null]);
  return `${BINDING_STREAM_PREFIX}${sha256Hex(identity)}`;
}

/** Reads a recorded `channel.bound`; null for anything else. */
export function channelBoundOf(event: { type: string; data: unknown }): ChannelBound | null {
  if (event.type !== CHANNEL_BOUND) return null;
  const data = event.data as Partial<ChannelBound> | null;
  if (
    typeof data?.bindingId !== 'string' ||
    typeof data.threadId !== 'string' ||
    typeof data.channel !== 'string' ||
    typeof data.account !== 'string' ||
    typeof data.chat !== 'string'
  ) {
    return null;
  }
  return {
    bindingId: data.bindingId,
    threadId: data.threadId,
    channel: data.channel,
    account: data.account,
    chat: data.chat,
    ...(typeof data.topic === 'string' ? { topic: data.topic } : {}),
    boundBy: typeof data.boundBy === 'string' ? data.boundBy : '',
  };
}
