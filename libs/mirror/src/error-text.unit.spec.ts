import { errorText } from './error-text';

class KafkaLikeError extends Error {
  constructor(
    message: string,
    readonly errors?: unknown[],
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'KafkaJSAggregateError';
  }
}

describe('errorText', () => {
  it("names what an error aggregates: the broker's own reason, not only kafkajs's summary", () => {
    const reason = new Error("Topic 'audit.coll' collides with existing topics: audit_coll");
    reason.name = 'KafkaJSCreateTopicError';
    expect(errorText(new KafkaLikeError('Topic creation errors', [reason]))).toBe(
      "KafkaJSAggregateError: Topic creation errors (KafkaJSCreateTopicError: Topic 'audit.coll' collides with existing topics: audit_coll)",
    );
  });

  it('follows a cause, and stays one bounded line however deep or wide the errors go', () => {
    const timedOut = new Error('Request Produce(key: 0, version: 7) timed out');
    expect(errorText(new Error('Number of retries exceeded', { cause: timedOut }))).toBe(
      'Error: Number of retries exceeded (Error: Request Produce(key: 0, version: 7) timed out)',
    );
    let deep: Error = new Error('bottom');
    for (let i = 0; i < 10; i += 1) deep = new Error(`level ${i}`, { cause: deep });
    expect(errorText(deep)).toBe(
      'Error: level 9 (Error: level 8 (Error: level 7 (Error: level 6)))',
    );
    const wide = new KafkaLikeError(
      'many',
      Array.from({ length: 50 }, (_, i) => new Error(`e${i}`)),
    );
    expect(errorText(wide)).toBe(
      'KafkaJSAggregateError: many (Error: e0; Error: e1; Error: e2; and 47 more)',
    );
    expect(errorText('plain')).toBe('plain');
  });
});
