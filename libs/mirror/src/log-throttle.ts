/**
 * Repeated log lines said at most once an interval each: with its broker down, kafkajs says
 * the same few errors about five times a second, and the mirror already logs every failure it
 * counts with the event's id and position. A line let through says how many repeats it stands for.
 */
export class LogThrottle {
  /** Per line: when it was last let through, and the repeats dropped since. */
  private readonly lines = new Map<string, { at: number; dropped: number }>();

  constructor(
    private readonly intervalMs: number,
    /** Distinct lines remembered; the one said longest ago is forgotten first. */
    private readonly maxLines = 100,
    private readonly now: () => number = Date.now,
  ) {}

  /** The repeats `line` stands for when it is to be said now (0: none), or null to drop it. */
  admit(line: string): number | null {
    const now = this.now();
    const seen = this.lines.get(line);
    if (seen !== undefined && now - seen.at < this.intervalMs) {
      seen.dropped += 1;
      return null;
    }
    this.lines.delete(line);
    this.lines.set(line, { at: now, dropped: 0 });
    if (this.lines.size > this.maxLines) {
      const [oldest] = this.lines.keys();
      this.lines.delete(oldest);
    }
    return seen?.dropped ?? 0;
  }
}
