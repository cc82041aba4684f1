/**
 * Per-user call budgets (docs/limits.md): in any sliding window a user
 * may make `calls` calls, of which at most `costly` are costly ones (commands that start or
 * redirect work); a costly call counts against both budgets. A sliding log: each user keeps
 * the times of the calls it was allowed, so a budget frees up exactly when its oldest counted
 * call leaves the window, and a refused call leaves no trace. Pure: time comes from the clock
 * it is given.
 */

/** What a call spends: one call, or one call that is also costly. */
export type CallCost = 'call' | 'costly';
/** The budget that refused a call. */
export type Budget = 'calls' | 'costly';

export interface RateLimitSettings {
  windowMs: number;
  calls: number;
  costly: number;
  /**
   * Most users tracked at once. Idle users (no counted call in the window) are forgotten
   * first; past this bound the least recently seen user is forgotten too, and so starts
   * afresh: memory stays bounded whatever the callers send.
   */
  maxUsers?: number;
}

export type RateDecision =
  | { allowed: true; at: number }
  | { allowed: false; budget: Budget; limit: number; retryAfterMs: number };

/** Milliseconds from any origin; must never run backwards. */
export type Clock = () => number;

export const DEFAULT_MAX_USERS = 100_000;

/** The times of counted calls, oldest first, inside the window. */
class TimeLog {
  private times: number[] = [];
  private head = 0;

  get size(): number {
    return this.times.length - this.head;
  }

  /** The i-th oldest time still in the log. */
  at(i: number): number {
    return this.times[this.head + i];
  }

  push(time: number): void {
    this.times.push(time);
  }

  /** Takes back one call counted at `time`, if it is still in the window. */
  remove(time: number): void {
    for (let i = this.times.length - 1; i >= this.head; i -= 1) {
      if (this.times[i] === time) {
        this.times.splice(i, 1);
        return;
      }
    }
  }

  /** Drops the times at or before `cutoff`: those calls have left the window. */
  dropThrough(cutoff: number): void {
    while (this.head < this.times.length && this.times[this.head] <= cutoff) this.head += 1;
    // Compact once the dropped prefix outweighs the live part; shifting each time is O(n).
    if (this.head > 0 && this.head * 2 >= this.times.length) {
      this.times = this.times.slice(this.head);
      this.head = 0;
    }
  }
}

interface UserLog {
  calls: TimeLog;
  costly: TimeLog;
  lastSeen: number;
}

export class SlidingWindowLimiter {
  /** Insertion order is least recently seen first: every access moves a user to the end. */
  private readonly users = new Map<string, UserLog>();
  private readonly maxUsers: number;

  constructor(
    private readonly settings: RateLimitSettings,
    private readonly clock: Clock,
  ) {
    const { windowMs, calls, costly } = settings;
    if (!(windowMs > 0) || !Number.isInteger(calls) || calls < 1) {
      throw new Error(`invalid rate limits: ${JSON.stringify(settings)}`);
    }
    if (!Number.isInteger(costly) || costly < 1 || costly > calls) {
      throw new Error(`invalid rate limits: costly must be 1..calls, got ${costly}`);
    }
    this.maxUsers = settings.maxUsers ?? DEFAULT_MAX_USERS;
  }

  /**
   * Counts the call against `user`'s budgets if both allow it; otherwise refuses it without
   * counting anything, saying which budget refused and when a call would next be allowed.
   */
  take(user: string, cost: CallCost): RateDecision {
    const now = this.clock();
    const cutoff = now - this.settings.windowMs;
    this.forgetIdle(cutoff);
    const log = this.touch(user, now);
    log.calls.dropThrough(cutoff);
    log.costly.dropThrough(cutoff);

    const refusals = [
      this.refusal(log.calls, this.settings.calls, 'calls', now),
      cost === 'costly' ? this.refusal(log.costly, this.settings.costly, 'costly', now) : null,
    ].filter((r): r is Extract<RateDecision, { allowed: false }> => r !== null);
    if (refusals.length > 0) {
      // Both exhausted: the call waits for the later of the two to free up.
      return refusals.reduce((a, b) => (b.retryAfterMs > a.retryAfterMs ? b : a));
    }
    log.calls.push(now);
    if (cost === 'costly') log.costly.push(now);
    return { allowed: true, at: now };
  }

  /**
   * Gives back a call `take` counted at `at`: another limit refused it after the budget
   * allowed it, so nothing was done, and only calls that are done count.
   */
  refund(user: string, cost: CallCost, at: number): void {
    const log = this.users.get(user);
    if (log === undefined) return;
    log.calls.remove(at);
    if (cost === 'costly') log.costly.remove(at);
  }

  /** How many users are tracked (for tests of the memory bound). */
  get trackedUsers(): number {
    return this.users.size;
  }

  private refusal(
    log: TimeLog,
    limit: number,
    budget: Budget,
    now: number,
  ): Extract<RateDecision, { allowed: false }> | null {
    if (log.size < limit) return null;
    // The call fits once all but limit - 1 of the counted calls have left the window.
    const freesAt = log.at(log.size - limit) + this.settings.windowMs;
    return {
      allowed: false,
      budget,
      limit,
      retryAfterMs: Math.min(Math.max(freesAt - now, 1), this.settings.windowMs),
    };
  }

  private touch(user: string, now: number): UserLog {
    let log = this.users.get(user);
    if (log) this.users.delete(user);
    else log = { calls: new TimeLog(), costly: new TimeLog(), lastSeen: now };
    log.lastSeen = now;
    this.users.set(user, log);
    if (this.users.size > this.maxUsers) {
      const oldest = this.users.keys().next().value;
      if (oldest !== undefined) this.users.delete(oldest);
    }
    return log;
  }

  /** Users not seen within the window hold no counted call: nothing to remember. */
  private forgetIdle(cutoff: number): void {
    for (const [user, log] of this.users) {
      if (log.lastSeen > cutoff) break;
      this.users.delete(user);
    }
  }
}
