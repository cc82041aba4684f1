/**
 * One valid example `data` per catalogue type, for the domain's unit tests and the API's
 * HTTP tests. Keyed by every EventType, so a type added to the catalogue without an example
 * fails to compile. Each example sets every field its schema declares (optional ones too),
 * except `truncation`, which only the size gate stamps, and `tool.finished`'s `errorText`,
 * which a successful call leaves out.
 */
import type { EventDataByType } from '../event-catalogue';
import type { EventType } from '../event-types';

export const EVENT_DATA_EXAMPLES: { [K in EventType]: EventDataByType[K] } = {
  'run.started': {
    threadId: 'thread-1',
    agent: 'support-bot',
    source: 'typed',
    title: 'Refund for order 1042',
    goal: 'Decide whether the refund is due',
  },
  'run.finished': {
    status: 'failed',
    reason: 'tool error',
    errorText: 'payments API answered 503',
  },
  'turn.started': { turnId: 'turn-1', source: 'voice' },
  'turn.finished': { turnId: 'turn-1', status: 'completed' },
  'turn.steered': { turnId: 'turn-1', instruction: 'Ask for the order number first' },
  'message.added': { messageId: 'msg-1', role: 'user', text: 'Where is my refund?' },
  'transcript.added': { utteranceId: 'utt-1', role: 'assistant', text: 'Let me check that.' },
  'model.call': {
    callId: 'call-1',
    model: 'gpt-4o-mini',
    messages: [
      { role: 'system', content: 'You are a support agent.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Here is the receipt' },
          { type: 'image_url', image_url: { url: 'https://example.com/r.png' } },
        ],
      },
      { role: 'tool', content: '{"status":"shipped"}', name: 'lookup', toolCallId: 'tc-1' },
    ],
    tools: [{ type: 'function', function: { name: 'lookup', parameters: {} } }],
  },
  'tool.started': { toolCallId: 'tc-1', toolName: 'lookup', input: { orderId: 1042 } },
  'tool.finished': {
    toolCallId: 'tc-1',
    toolName: 'lookup',
    output: { status: 'shipped' },
    failed: false,
  },
  'approval.requested': {
    approvalId: 'appr-1',
    toolCallId: 'tc-2',
    toolName: 'refund',
    input: { orderId: 1042, amount: 19.99 },
    question: 'Refund 19.99 EUR?',
    options: ['allow', 'deny'],
  },
  'approval.resolved': {
    approvalId: 'appr-1',
    decision: 'allow',
    receipt: 'receipt-7f3a',
    receiptDigest: '5'.repeat(64),
    decidedBy: 'ops@example.com',
    downgraded: false,
    policyRevision: 'c0ffee',
  },
  'append.rejected': {
    reason: 'body_too_large',
    declaredBytes: 40_000_000,
    limitBytes: 33_554_432,
  },
};

/** A fresh copy of the example event of `type`, safe to change in a test. */
export function exampleEvent<K extends EventType>(type: K): { type: K; data: EventDataByType[K] } {
  return { type, data: structuredClone(EVENT_DATA_EXAMPLES[type]) };
}
