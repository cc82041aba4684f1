/**
 * Channel bindings: one stream per (tenant, channel, account, chat, topic), named so that no
 * two keys share it, and the one event of that stream read back strictly.
 */
import { createHash } from 'node:crypto';
import {
  BINDING_STREAM_PREFIX,
  bindingStream,
  CHANNEL_BOUND,
  channelBoundOf,
  type ChannelBound,
  type ChannelKey,
} from './bindings';

const KEY: ChannelKey = { channel: 'telegram', account: 'bot-1', chat: '-100123', topic: '7' };

describe('bindingStream', () => {
  it('is the prefix and the SHA-256 of the canonical [tenant, channel, account, chat, topic]', () => {
    const digest = createHash('sha256')
      .update('["acme","telegram","bot-1","-100123","7"]')
      .digest('hex');

    expect(bindingStream('acme', KEY)).toBe(`${BINDING_STREAM_PREFIX}${digest}`);
    expect(BINDING_STREAM_PREFIX).toBe('binding-');
  });

  it('tells apart tenants, each part of the key, and an absent topic from an empty one', () => {
    const { topic: _topic, ...chat } = KEY;
    const names = [
      bindingStream('acme', KEY),
      bindingStream('other', KEY),
      bindingStream('acme', { ...KEY, channel: 'slack' }),
      bindingStream('acme', { ...KEY, account: 'bot-2' }),
      bindingStream('acme', { ...KEY, chat: '-100124' }),
      bindingStream('acme', { ...KEY, topic: '8' }),
      bindingStream('acme', chat),
      bindingStream('acme', { ...chat, topic: '' }),
    ];

    expect(new Set(names).size).toBe(names.length);
  });

  it('does not let a separator in one part stand in for the next part', () => {
    expect(bindingStream('acme', { channel: 'a', account: 'b,c', chat: 'd' })).not.toBe(
      bindingStream('acme', { channel: 'a,b', account: 'c', chat: 'd' }),
    );
  });
});

describe('channelBoundOf', () => {
  const bound: ChannelBound = {
    bindingId: 'b-1',
    threadId: 'thread-1',
    channel: 'telegram',
    account: 'bot-1',
    chat: '-100123',
    topic: '7',
    boundBy: 'u:ana',
  };

  it('reads a recorded channel.bound', () => {
    expect(CHANNEL_BOUND).toBe('channel.bound');
    expect(channelBoundOf({ type: CHANNEL_BOUND, data: { ...bound, extra: 1 } })).toEqual(bound);
  });

  it('leaves out an absent or non-string topic, and reads a missing boundBy as empty', () => {
    const { topic: _topic, boundBy: _by, ...rest } = bound;

    expect(channelBoundOf({ type: CHANNEL_BOUND, data: rest })).toEqual({ ...rest, boundBy: '' });
    expect(
      channelBoundOf({ type: CHANNEL_BOUND, data: { ...rest, topic: 7, boundBy: 3 } }),
    ).toEqual({ ...rest, boundBy: '' });
  });

  it('answers null for another type of event', () => {
    expect(channelBoundOf({ type: 'run.started', data: bound })).toBeNull();
  });

  it.each(['bindingId', 'threadId', 'channel', 'account', 'chat'] as const)(
    'answers null when %s is missing or not a string',
    (field) => {
      const { [field]: _gone, ...without } = bound;
      expect(channelBoundOf({ type: CHANNEL_BOUND, data: without })).toBeNull();
      expect(channelBoundOf({ type: CHANNEL_BOUND, data: { ...bound, [field]: 1 } })).toBeNull();
    },
  );

  it('answers null for data that is not an object', () => {
    expect(channelBoundOf({ type: CHANNEL_BOUND, data: null })).toBeNull();
  });
});
