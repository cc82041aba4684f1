import { SlidingWindowLimiter, type CallCost, type RateLimitSettings } from './rate-limits';

const SETTINGS: RateLimitSettings = { windowMs: 10_000, calls: 30, costly: 6 };

function limiter(settings: Partial<RateLimitSettings> = {}) {
  const clock = { now: 1_000_000 };
  const l = new SlidingWindowLimiter({ ...SETTINGS, ...settings }, () => clock.now);
  const take = (cost: CallCost = 'call', user = 'tenant-a:u:alice') => l.take(user, cost);
  /** How many of `n` calls are allowed, taken now. */
  const allowedOf = (n: number, cost: CallCost = 'call', user?: string) =>
    Array.from({ length: n }, () => take(cost, user)).filter((d) => d.allowed).length;
  return { l, clock, take, allowedOf };
}

describe('SlidingWindowLimiter', () => {
  it('allows 30 calls in a window and refuses the 31st, until the oldest leaves', () => {
    const { clock, take, allowedOf } = limiter();
    expect(take().allowed).toBe(true);
    clock.now += 4_000;
    expect(allowedOf(29)).toBe(29);
    expect(take()).toEqual({ allowed: false, budget: 'calls', limit: 30, retryAfterMs: 6_000 });
    clock.now += 5_999;
    expect(take()).toMatchObject({ allowed: false, retryAfterMs: 1 });
    clock.now += 1; // the first call is exactly one window old: it no longer counts
    expect(allowedOf(5)).toBe(1);
  });

  it('allows 6 costly calls in a window and refuses the 7th, while plain calls go on', () => {
    const { clock, take, allowedOf } = limiter();
    expect(allowedOf(6, 'costly')).toBe(6);
    clock.now += 2_500;
    expect(take('costly')).toEqual({
      allowed: false,
      budget: 'costly',
      limit: 6,
      retryAfterMs: 7_500,
    });
    // A costly call also spent a call: 30 - 6 plain calls are left.
    expect(allowedOf(30)).toBe(24);
  });

  it('refuses a costly call when the calls budget is spent, even with costly budget left', () => {
    const { take, allowedOf } = limiter();
    expect(allowedOf(30)).toBe(30);
    expect(take('costly')).toMatchObject({ allowed: false, budget: 'calls' });
  });

  it('reports the budget that frees up last when both are spent', () => {
    const { clock, take, allowedOf } = limiter({ calls: 10, costly: 6 });
    expect(allowedOf(6, 'costly')).toBe(6); // costly calls at t
    clock.now += 3_000;
    expect(allowedOf(4)).toBe(4); // calls are full: 6 costly + 4 plain
    clock.now += 7_000; // the 6 costly leave; the window now holds 4 calls
    expect(allowedOf(6, 'costly')).toBe(6);
    // calls budget: full (4 + 6) and frees at t+13s; costly: full and frees at t+20s.
    expect(take('costly')).toEqual({
      allowed: false,
      budget: 'costly',
      limit: 6,
      retryAfterMs: 10_000,
    });
  });

  it('does not count refused calls: after the window slides the full budget is back', () => {
    const { clock, take, allowedOf } = limiter();
    expect(allowedOf(30)).toBe(30);
    expect(allowedOf(100)).toBe(0);
    clock.now += 9_999;
    expect(take().allowed).toBe(false);
    clock.now += 1;
    expect(allowedOf(100)).toBe(30);
    expect(allowedOf(6, 'costly')).toBe(0);
  });

  it('does not count a costly call refused by its costly budget against the calls budget', () => {
    const { clock, allowedOf } = limiter();
    expect(allowedOf(6, 'costly')).toBe(6);
    expect(allowedOf(50, 'costly')).toBe(0);
    expect(allowedOf(100)).toBe(24);
    clock.now += 10_000;
    expect(allowedOf(100)).toBe(30);
  });

  it('gives back a call it was told another limit refused, and only that one', () => {
    const { l, clock, take, allowedOf } = limiter({ calls: 3, costly: 1 });
    const first = take('costly');
    if (!first.allowed) throw new Error('refused');
    clock.now += 1_000;
    expect(allowedOf(2)).toBe(2);
    expect(take().allowed).toBe(false);
    l.refund('tenant-a:u:alice', 'costly', first.at);
    // One call back, and the costly one with it; another user's refund changes nothing.
    l.refund('tenant-a:u:bob', 'call', clock.now);
    expect(take('costly').allowed).toBe(true);
    expect(take().allowed).toBe(false);
  });

  it('keeps a budget per key', () => {
    const { allowedOf } = limiter();
    expect(allowedOf(31, 'call', 'tenant-a:u:alice')).toBe(30);
    expect(allowedOf(31, 'call', 'tenant-a:u:bob')).toBe(30);
    expect(allowedOf(31, 'call', 'tenant-b:u:alice')).toBe(30);
    expect(allowedOf(7, 'costly', 'tenant-a:k:0123456789abcdef')).toBe(6);
  });

  it('forgets idle users, and keeps at most maxUsers', () => {
    const { l, clock, allowedOf } = limiter({ maxUsers: 3 });
    for (const user of ['a', 'b', 'c', 'd']) allowedOf(1, 'call', user);
    expect(l.trackedUsers).toBe(3);
    clock.now += 10_000;
    allowedOf(1, 'call', 'e');
    expect(l.trackedUsers).toBe(1);
  });

  it('keeps a user who is still within the window', () => {
    const { l, clock, allowedOf } = limiter();
    allowedOf(30, 'call', 'a');
    clock.now += 5_000;
    allowedOf(1, 'call', 'b');
    clock.now += 4_999;
    allowedOf(1, 'call', 'c');
    expect(l.trackedUsers).toBe(3);
    expect(allowedOf(1, 'call', 'a')).toBe(0);
  });

  it('stays exact over many windows of steady traffic', () => {
    const { clock, take } = limiter({ calls: 5, costly: 2, windowMs: 1_000 });
    const allowedAt: number[] = [];
    for (let i = 0; i < 5_000; i += 1) {
      clock.now += 37;
      if (take(i % 3 === 0 ? 'costly' : 'call').allowed) allowedAt.push(clock.now);
    }
    // No window of 1 s ever holds more than 5 allowed calls.
    for (let i = 5; i < allowedAt.length; i += 1) {
      expect(allowedAt[i] - allowedAt[i - 5]).toBeGreaterThanOrEqual(1_000);
    }
    // ...and the budget is used: 185 s of traffic, 5 a second, each slot reused within 74 ms.
    expect(allowedAt.length).toBeGreaterThanOrEqual(Math.floor(185_000 / 1_074) * 5);
  });

  it('refuses settings it cannot honour', () => {
    expect(() => new SlidingWindowLimiter({ ...SETTINGS, costly: 31 }, () => 0)).toThrow();
    expect(() => new SlidingWindowLimiter({ ...SETTINGS, calls: 0 }, () => 0)).toThrow();
    expect(() => new SlidingWindowLimiter({ ...SETTINGS, windowMs: 0 }, () => 0)).toThrow();
  });
});
