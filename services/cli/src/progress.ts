/**
 * Progress of long CLI work towards a known total: a bar with percentage, rate and ETA
 * redrawn in place on a terminal, or one JSON line per report when the output is a file
 * or a pipe (a log collector reads those; a person reads the bar).
 */
export interface ProgressSink {
  isTTY?: boolean;
  columns?: number;
  write(text: string): unknown;
}

export interface ProgressSnapshot {
  done: number;
  total: number;
  elapsedMs: number;
}

const BAR_WIDTH = 30;
const TTY_EVERY_MS = 100;
const JSON_EVERY_MS = 2000;

/** Done per second so far, and the seconds left at that rate (null before any is done). */
export function rateAndEta({ done, total, elapsedMs }: ProgressSnapshot): {
  percent: number;
  perSecond: number;
  etaSeconds: number | null;
} {
  const percent = total > 0 ? Math.min(100, (done / total) * 100) : 100;
  const perSecond = elapsedMs > 0 ? (done * 1000) / elapsedMs : 0;
  const etaSeconds = perSecond > 0 ? Math.max(0, (total - done) / perSecond) : null;
  return { percent, perSecond, etaSeconds };
}

function duration(seconds: number | null): string {
  if (seconds === null) return '--';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** One line of the terminal bar, e.g. `rebuild [#######-------]  50% 500/1,000 events 250/s ETA 2s`. */
export function renderBar(label: string, unit: string, snapshot: ProgressSnapshot): string {
  const { percent, perSecond, etaSeconds } = rateAndEta(snapshot);
  const filled = Math.round((percent / 100) * BAR_WIDTH);
  const bar = `${'#'.repeat(filled)}${'-'.repeat(BAR_WIDTH - filled)}`;
  const count = `${snapshot.done.toLocaleString('en-US')}/${snapshot.total.toLocaleString('en-US')}`;
  return `${label} [${bar}] ${percent.toFixed(0).padStart(3)}% ${count} ${unit} ${Math.round(perSecond).toLocaleString('en-US')}/s ETA ${duration(etaSeconds)}`;
}

export class Progress {
  private readonly startedAt: number;
  private lastReport = -Infinity;
  private done = 0;

  constructor(
    private readonly label: string,
    private readonly unit: string,
    private readonly total: number,
    private readonly sink: ProgressSink,
    private readonly now: () => number = Date.now,
  ) {
    this.startedAt = now();
    if (!sink.isTTY) this.json('started');
  }

  update(done: number): void {
    this.done = done;
    const now = this.now();
    if (now - this.lastReport < (this.sink.isTTY ? TTY_EVERY_MS : JSON_EVERY_MS)) return;
    this.lastReport = now;
    if (this.sink.isTTY) this.sink.write(`\r${this.bar()}`);
    else this.json('progress');
  }

  finish(): void {
    if (this.sink.isTTY) this.sink.write(`\r${this.bar()}\n`);
    else this.json('finished');
  }

  private snapshot(): ProgressSnapshot {
    return { done: this.done, total: this.total, elapsedMs: this.now() - this.startedAt };
  }

  private bar(): string {
    const line = renderBar(this.label, this.unit, this.snapshot());
    return this.sink.columns ? line.slice(0, this.sink.columns - 1) : line;
  }

  private json(phase: 'started' | 'progress' | 'finished'): void {
    const snapshot = this.snapshot();
    const { percent, perSecond, etaSeconds } = rateAndEta(snapshot);
    this.sink.write(
      `${JSON.stringify({
        msg: `${this.label} ${phase}`,
        done: snapshot.done,
        total: snapshot.total,
        unit: this.unit,
        percent: Math.round(percent * 10) / 10,
        perSecond: Math.round(perSecond),
        etaSeconds: etaSeconds === null ? null : Math.round(etaSeconds),
        elapsedSeconds: Math.round(snapshot.elapsedMs / 100) / 10,
      })}\n`,
    );
  }
}
