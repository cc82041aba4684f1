import {
  ApiError,
  clipText,
  ERROR_BODY_MAX_BYTES,
  MAX_MESSAGE_BYTES,
  MAX_PROBLEM_TEXT_BYTES,
} from './api-error';

const problems = (n: number) =>
  Array.from({ length: n }, (_, i) => ({ field: `k${i}`, rule: 'whitelistValidation' }));

const bytesOf = (body: unknown) => Buffer.byteLength(JSON.stringify(body));

describe('ApiError', () => {
  it('lists every problem that fits, with no count', () => {
    const body = new ApiError(
      400,
      'validation_failed',
      'the request is invalid',
      problems(80),
    ).body();
    expect(body).toEqual({
      error: 'validation_failed',
      message: 'the request is invalid',
      details: problems(80),
    });
  });

  it('keeps the first problems of a million that fit in a page and says how many there were', () => {
    const body = new ApiError(
      400,
      'validation_failed',
      'the request is invalid',
      problems(1_000_000),
      { position: 7 },
    ).body();
    const listed = (body.details as unknown[]).length;
    expect(listed).toBeGreaterThan(50);
    expect(body.details).toEqual(problems(listed));
    expect(body).toMatchObject({
      problemCount: 1_000_000,
      position: 7,
      message: `the request is invalid (the first ${listed} of 1000000 problems are listed)`,
    });
    expect(bytesOf(body)).toBeLessThanOrEqual(ERROR_BODY_MAX_BYTES);
    // One more problem would not have fitted.
    expect(bytesOf({ ...body, details: problems(listed + 1) })).toBeGreaterThan(
      ERROR_BODY_MAX_BYTES - 96,
    );
  });

  it.each([
    ['ASCII', 'k'],
    ['control characters (six bytes each as JSON)', '\u0001'],
    ['CJK (three bytes each in UTF-8)', '鍵'],
    ['emoji (a surrogate pair, four bytes)', '😀'],
    ['lone surrogates (six bytes each as JSON)', '\ud800'],
    ['quotes', '"'],
  ])('stays within a page for thousands of long problems in %s', (_name, unit) => {
    const field = `data.${unit.repeat(5000)}`;
    const many = Array.from({ length: 5000 }, (_, index) => ({
      index,
      field,
      rule: 'whitelistValidation',
      message: `property ${field} should not exist`,
    }));
    const body = new ApiError(400, 'validation_failed', `invalid ${field}`, many, {
      advice: 'fix it',
    }).body();
    expect(bytesOf(body)).toBeLessThanOrEqual(ERROR_BODY_MAX_BYTES);
    expect((body.details as unknown[]).length).toBeGreaterThanOrEqual(1);
    expect(body.problemCount).toBe(5000);
  });

  it('leaves details that are not a list as they are', () => {
    const details = { limit: 'calls', retryAfterSeconds: 3 };
    expect(new ApiError(429, 'rate_limited', 'slow down', details).body()).toEqual({
      error: 'rate_limited',
      message: 'slow down',
      details,
    });
  });

  it('cuts a message that quotes the client, saying how long it was', () => {
    const body = new ApiError(404, 'not_found', `Cannot GET /${'z'.repeat(20_000)}`).body();
    expect(body.message).toBe(
      `Cannot GET /${'z'.repeat(MAX_MESSAGE_BYTES - 12)}… (20012 characters)`,
    );
  });

  it('cuts each text of a listed problem, and leaves its other values as they are', () => {
    const field = `data.${'k'.repeat(5000)}`;
    const body = new ApiError(400, 'validation_failed', 'invalid', [
      {
        index: 3,
        field,
        rule: 'whitelistValidation',
        message: `property ${field} should not exist`,
      },
    ]).body();
    expect(body.details).toEqual([
      {
        index: 3,
        field: `${field.slice(0, MAX_PROBLEM_TEXT_BYTES)}… (5005 characters)`,
        rule: 'whitelistValidation',
        message: `property ${field.slice(0, MAX_PROBLEM_TEXT_BYTES - 9)}… (5031 characters)`,
      },
    ]);
  });

  it('cuts a problem that is a text, and leaves one that is not an object as it is', () => {
    const long = 'p'.repeat(1000);
    const body = new ApiError(400, 'validation_failed', 'invalid', [long, null, 7, [long]]).body();
    expect(body.details).toEqual([
      `${'p'.repeat(MAX_PROBLEM_TEXT_BYTES)}… (1000 characters)`,
      null,
      7,
      [long],
    ]);
  });
});

describe('clipText', () => {
  it('keeps a text at the limit as it is', () => {
    expect(clipText('abc', 3)).toBe('abc');
    expect(clipText('a\nb', 4)).toBe('a\nb');
  });

  it('counts each character as its JSON takes it in UTF-8', () => {
    expect(clipText('a\nb', 3)).toBe('a\n… (3 characters)');
    expect(clipText('a\u0001b', 7)).toBe('a\u0001… (3 characters)');
    expect(clipText('a\u0001b', 6)).toBe('a… (3 characters)');
    expect(clipText('é鍵x', 5)).toBe('é鍵… (3 characters)');
    expect(clipText('é鍵x', 4)).toBe('é… (3 characters)');
    expect(clipText('a"b', 3)).toBe('a"… (3 characters)');
    expect(clipText('a\\b', 2)).toBe('a… (3 characters)');
  });

  it('never cuts between the halves of a surrogate pair', () => {
    expect(clipText('ab😀cd', 3)).toBe('ab… (6 characters)');
    expect(clipText('ab😀cd', 6)).toBe('ab😀… (6 characters)');
    // The first and the last high surrogates (U+10000 and U+10FFFF start with them).
    expect(clipText('ab\u{10000}cd', 5)).toBe('ab… (6 characters)');
    expect(clipText('ab\u{10FFFF}cd', 5)).toBe('ab… (6 characters)');
    // Around them: the last character before, and a low surrogate alone, are cut at the limit.
    expect(clipText('ab\ud7ffcd', 5)).toBe('ab\ud7ff… (5 characters)');
    expect(clipText('ab\udc00cd', 8)).toBe('ab\udc00… (5 characters)');
    expect(clipText('ab\udc00cd', 7)).toBe('ab… (5 characters)');
  });
});
