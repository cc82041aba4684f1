import type { RecordedEvent } from '@runledger/event-store';
import { eventFrame, overflowFrame, startFrame } from './sse-frame';

const event: RecordedEvent = {
  id: 'e1',
  stream: 'run-r1',
  type: 'message.added',
  revision: 3,
  position: 42,
  data: { text: 'two\nlines' },
  metadata: { tenantId: 't', runId: 'r1', threadId: 'th' },
  recordedAt: '2025-01-01T00:00:00.000Z',
};

describe('SSE frames', () => {
  it('carries the position as id, the type as event and the recorded event as one data line', () => {
    const text = eventFrame(event).toString('utf8');
    const [id, type, data, ...rest] = text.split('\n');
    expect(id).toBe('id: 42');
    expect(type).toBe('event: message.added');
    expect(rest).toEqual(['', '']);
    expect(JSON.parse(data.slice('data: '.length))).toEqual({
      id: 'e1',
      type: 'message.added',
      revision: 3,
      position: 42,
      recordedAt: '2025-01-01T00:00:00.000Z',
      data: { text: 'two\nlines' },
      metadata: { tenantId: 't', runId: 'r1', threadId: 'th' },
    });
  });

  it('never lets a line break in a type end the field', () => {
    const text = eventFrame({ ...event, type: 'x\ndata: forged' }).toString('utf8');
    expect(text.split('\n').filter((line) => line.startsWith('data:'))).toHaveLength(1);
  });

  it('writes the start id and the overflow message', () => {
    expect(startFrame(7).toString()).toBe('id: 7\n\n');
    expect(overflowFrame(9).toString()).toBe('event: overflow\ndata: {"resumeFrom":9}\n\n');
  });
});
