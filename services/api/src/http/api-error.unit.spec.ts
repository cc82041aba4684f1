import {
  ApiError,
  clipText,
  MAX_MESSAGE_CHARS,
  MAX_PROBLEM_TEXT_CHARS,
  MAX_PROBLEMS,
} from './api-error';

const problems = (n: number) =>
  Array.from({ length: n }, (_, i) => ({ field: `k${i}`, rule: 'whitelistValidation' }));

describe('ApiError', () => {
  it('lists every problem up to MAX_PROBLEMS, with no count', () => {
    const body = new ApiError(
      400,
      'validation_failed',
      'the request is invalid',
      problems(100),
    ).body();
    expect(body).toEqual({
      error: 'validation_failed',
      message: 'the request is invalid',
      details: problems(100),
    });
  });

  it('keeps the first MAX_PROBLEMS of a million problems and says how many there were', () => {
    const error = new ApiError(
      400,
      'validation_failed',
      'the request is invalid',
      problems(1_000_000),
      {
        position: 7,
      },
    );
    const body = error.body();
    expect(body.details).toEqual(problems(MAX_PROBLEMS));
    expect(body).toMatchObject({
      problemCount: 1_000_000,
      position: 7,
      message: 'the request is invalid (the first 100 of 1000000 problems are listed)',
    });
    expect(JSON.stringify(body).length).toBeLessThan(10_000);
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
      `Cannot GET /${'z'.repeat(MAX_MESSAGE_CHARS - 12)}… (20012 characters)`,
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
        field: `${field.slice(0, MAX_PROBLEM_TEXT_CHARS)}… (5005 characters)`,
        rule: 'whitelistValidation',
        message: `property ${field.slice(0, MAX_PROBLEM_TEXT_CHARS - 9)}… (5031 characters)`,
      },
    ]);
  });

  it('cuts a problem that is a text, and leaves one that is not an object as it is', () => {
    const long = 'p'.repeat(1000);
    const body = new ApiError(400, 'validation_failed', 'invalid', [long, null, 7, [long]]).body();
    expect(body.details).toEqual([
      `${'p'.repeat(MAX_PROBLEM_TEXT_CHARS)}… (1000 characters)`,
      null,
      7,
      [long],
    ]);
  });
});

describe('clipText', () => {
  it('keeps a text at the limit as it is', () => {
    expect(clipText('abc', 3)).toBe('abc');
  });

  it('never cuts between the halves of a surrogate pair', () => {
    expect(clipText('ab😀cd', 3)).toBe('ab… (6 characters)');
    expect(clipText('ab😀cd', 4)).toBe('ab😀… (6 characters)');
    // The first and the last high surrogates (U+10000 and U+10FFFF start with them).
    expect(clipText('ab\u{10000}cd', 3)).toBe('ab… (6 characters)');
    expect(clipText('ab\u{10FFFF}cd', 3)).toBe('ab… (6 characters)');
    // Around them: the last character before, and a low surrogate alone, are cut at the limit.
    expect(clipText('ab\ud7ffcd', 3)).toBe('ab\ud7ff… (5 characters)');
    expect(clipText('ab\udc00cd', 3)).toBe('ab\udc00… (5 characters)');
  });
});
