/**
 * A read store refolded from the log at start-up: its views hold a prefix of the truth until
 * the rebuild passes the log head it set out for. The thread views and the client surface
 * (notifications, bindings) both start so, and both answer alike while they do: not ready,
 * and 503 for a read that names no position.
 */
import type { Logger } from '@nestjs/common';
import type { Gauge } from 'prom-client';
import { ApiError } from '../http/api-error';

const PROGRESS_LOG_MS = 2000;

/** What a read store keeps of a rebuild, so a restart after a crash part way knows of it. */
export interface RebuildableStore {
  /** Nothing folded yet: no row and no checkpoint. */
  isEmpty(): boolean;
  checkpoint(): number;
  /** The target of the last rebuild from empty (0: none): the views are partial below it. */
  rebuildTarget(): number;
  startRebuild(target: number): void;
}

/**
 * The rebuild the store needs now: from empty, towards the log's head now, when the log holds
 * anything; or the one a crash interrupted. Null when its views are whole.
 */
export async function rebuildAtStart(
  store: RebuildableStore,
  logHead: () => Promise<number>,
  view: string,
  logger: Logger,
  gauge?: Gauge,
): Promise<RebuildProgress | null> {
  if (store.isEmpty()) {
    const head = await logHead();
    if (head === 0) return null;
    store.startRebuild(head);
    return new RebuildProgress(head, view, logger, gauge);
  }
  const unfinished = store.rebuildTarget();
  return unfinished > store.checkpoint()
    ? new RebuildProgress(unfinished, view, logger, gauge)
    : null;
}

/** Logs (and, given a gauge, exports) the progress of a rebuild towards its target. */
export class RebuildProgress {
  private readonly startedAt = Date.now();
  private lastLog = 0;
  private done = false;

  constructor(
    readonly target: number,
    /** What is rebuilt, as the log and the 503 name it ("read models"). */
    private readonly view: string,
    private readonly logger: Logger,
    private readonly gauge?: Gauge,
  ) {
    gauge?.set(target > 0 ? 0 : 1);
    logger.log({ msg: `rebuilding ${view} from the log`, targetPosition: target });
  }

  reached(position: number): boolean {
    return position >= this.target;
  }

  committed(position: number): void {
    if (this.done) return;
    this.gauge?.set(this.target > 0 ? Math.min(1, position / this.target) : 1);
    const now = Date.now();
    if (this.reached(position)) {
      this.done = true;
      this.logger.log({
        msg: `${this.view} rebuilt`,
        position,
        seconds: (now - this.startedAt) / 1000,
      });
    } else if (now - this.lastLog >= PROGRESS_LOG_MS) {
      this.lastLog = now;
      this.logger.log({ msg: 'rebuild progress', position, targetPosition: this.target });
    }
  }

  /** Readiness's verdict while it runs. */
  problem(position: number): string {
    return `rebuilding the ${this.view} from the log: position ${position} of ${this.target}`;
  }

  /** A read that cannot be answered whole yet: 503, with how far the rebuild has come. */
  refusal(position: number, why: string): ApiError {
    return new ApiError(
      503,
      'projection_behind',
      `the ${this.view} are being rebuilt from the log (position ${position} of ${this.target}): ${why}; retry`,
      undefined,
      { position, rebuildTarget: this.target },
    );
  }
}
