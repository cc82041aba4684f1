import { eventHash, GENESIS_HASH, runStream } from '@runledger/domain';
import type { RecordedEvent } from '@runledger/event-store';
import {
  CONTENT_TYPES,
  decodeRunEvent,
  encodeRunEvent,
  UnencodableEventError,
} from './run-event.codec';

function recorded(overrides: Partial<RecordedEvent> = {}): RecordedEvent {
  const data = { messageId: 'm1', role: 'user', text: 'héllo ✓', z: 1, a: [1.5, null] };
  const hash = eventHash(GENESIS_HASH, {
    id: 'e1',
    type: 'message.added',
    data,
    revision: 3,
    tenantId: 'tenant-a',
    runId: 'r1',
  });
  return {
    id: 'e1',
    stream: runStream('tenant-a', 'r1'),
    type: 'message.added',
    revision: 3,
    position: 42,
    data,
    metadata: { tenantId: 'tenant-a', runId: 'r1', threadId: 't1', prevHash: GENESIS_HASH, hash },
    recordedAt: '2026-01-02T03:04:05.678Z',
    ...overrides,
  };
}

describe.each(['protobuf', 'json'] as const)('the %s wire format', (format) => {
  it('carries every field, keyed by run, with the headers a consumer routes on', () => {
    const event = recorded();
    const message = encodeRunEvent(event, format);
    expect(message).toMatchObject({ eventId: 'e1', position: 42, key: 'r1' });
    expect(message.headers).toEqual({
      'event-id': 'e1',
      'event-type': 'message.added',
      'tenant-id': 'tenant-a',
      position: '42',
      'content-type': CONTENT_TYPES[format],
    });
    const decoded = decodeRunEvent(message.value, message.headers['content-type']);
    expect(decoded).toEqual({
      id: 'e1',
      type: 'message.added',
      tenant: 'tenant-a',
      thread: 't1',
      run: 'r1',
      revision: 3,
      position: 42,
      recordedAt: '2026-01-02T03:04:05.678Z',
      data: event.data,
      hash: event.metadata.hash,
      prevHash: GENESIS_HASH,
    });
    // What a consumer needs to verify the chain is all there.
    expect(
      eventHash(decoded.prevHash, {
        id: decoded.id,
        type: decoded.type,
        data: decoded.data,
        revision: decoded.revision,
        tenantId: decoded.tenant,
        runId: decoded.run,
      }),
    ).toBe(decoded.hash);
  });

  it('lifts the truncation stamp out of data, and keeps it in data', () => {
    const truncation = {
      originalByteLength: 3_000_000,
      limitBytes: 1_048_576,
      omittedMessageCount: 12,
      clampedParts: 2,
    };
    const event = recorded({ data: { messageId: 'm', role: 'user', text: 'x', truncation } });
    const message = encodeRunEvent(event, format);
    const decoded = decodeRunEvent(message.value, message.headers['content-type']);
    expect(decoded.truncation).toEqual(truncation);
    expect(decoded.data).toEqual(event.data);
  });
});

describe('events that cannot be encoded', () => {
  it.each<[string, Partial<RecordedEvent>, RegExp]>([
    ['no tenant stamp', { metadata: { runId: 'r1' } }, /metadata.tenantId is missing/],
    ['a run id of another stream', { metadata: { tenantId: 't', runId: 'r2' } }, /do not name/],
    ['a stream that is not a run', { stream: 'receipt-1' }, /not a run stream/],
    ['data that is not an object', { data: [1, 2] }, /not a JSON object/],
    ['a bad truncation stamp', { data: { truncation: { limitBytes: -1 } } }, /truncation/],
    ['a date that is not one', { recordedAt: 'yesterday' }, /not a date/],
  ])('refuses %s, naming why', (_what, overrides, reason) => {
    const event = recorded(overrides);
    let caught: unknown;
    try {
      encodeRunEvent(event, 'protobuf');
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(UnencodableEventError);
    expect((caught as UnencodableEventError).reason).toMatch(reason);
    expect((caught as UnencodableEventError).message).toContain('position 42');
  });
});
