import { LogThrottle } from './log-throttle';

describe('LogThrottle', () => {
  it('lets a line through once an interval, saying how many repeats it stands for', () => {
    let now = 0;
    const throttle = new LogThrottle(10_000, 100, () => now);
    expect(throttle.admit('Connection error')).toBe(0);
    for (let i = 0; i < 49; i += 1) {
      now += 200;
      expect(throttle.admit('Connection error')).toBeNull();
    }
    // Another line has its own interval.
    expect(throttle.admit('Crash')).toBe(0);
    now = 10_000;
    expect(throttle.admit('Connection error')).toBe(49);
    now += 1;
    expect(throttle.admit('Connection error')).toBeNull();
  });

  it('remembers at most maxLines lines, forgetting the one said longest ago', () => {
    let now = 0;
    const throttle = new LogThrottle(10_000, 2, () => now);
    throttle.admit('a');
    throttle.admit('b');
    now += 1;
    throttle.admit('c');
    // 'a' was forgotten: said again at once; 'b' still waits out its interval.
    expect(throttle.admit('a')).toBe(0);
    expect(throttle.admit('c')).toBeNull();
  });
});
