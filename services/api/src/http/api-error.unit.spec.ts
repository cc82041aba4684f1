import { ApiError, MAX_PROBLEMS } from './api-error';

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
});
