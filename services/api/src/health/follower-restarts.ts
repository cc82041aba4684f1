/**
 * A read side's follower that stopped on an error (a batch it could not apply, an event it
 * could not read) is started again from its checkpoint after RESTART_FIRST_MS, doubling to
 * RESTART_MAX_MS while it keeps failing before a commit: a passing cause (a worker out of
 * memory after a burst, a locked or full disk, a damaged row mended) heals without an
 * operator, and one that does not costs a retry and two log lines a minute at most. The
 * projector and the client surface share it.
 */
import type { Logger } from '@nestjs/common';

const RESTART_FIRST_MS = 1000;
const RESTART_MAX_MS = 60_000;

export interface RestartableFollower {
  start(): void | Promise<void>;
  stop(): Promise<void>;
  current(): number;
}

export class FollowerRestarts {
  /** The error it stopped on, until it is started again; null while healthy. */
  failure: unknown = null;
  private timer: NodeJS.Timeout | null = null;
  private inMs = RESTART_FIRST_MS;
  private closed = false;

  constructor(
    /** As the log names it: "projector", "client surface". */
    private readonly name: string,
    private readonly follower: RestartableFollower,
    private readonly logger: Logger,
  ) {}

  /** A batch committed: the next failure is retried after the first wait again. */
  committed(): void {
    this.inMs = RESTART_FIRST_MS;
  }

  failed(error: unknown, position: number): void {
    this.failure = error;
    const scheduled = this.closed || this.timer !== null;
    this.logger.error({
      msg: this.closed
        ? `the ${this.name} stopped on an error`
        : `the ${this.name} stopped on an error; it starts again from its checkpoint`,
      position,
      ...(scheduled ? {} : { restartInMs: this.inMs }),
      error: error instanceof Error ? error.stack : String(error),
    });
    if (scheduled) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      // A failure to start again is one more failure, retried after a longer wait.
      this.restart().catch((failure: unknown) => this.failed(failure, this.follower.current()));
    }, this.inMs);
    this.timer.unref();
    this.inMs = Math.min(this.inMs * 2, RESTART_MAX_MS);
  }

  /** No restart after this: the service shuts down. */
  close(): void {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private async restart(): Promise<void> {
    if (this.closed) return;
    await this.follower.stop();
    if (this.closed) return;
    const failure = this.failure;
    await this.follower.start();
    // Started: whether it passes what stopped it shows next (a commit, its lag, or the same
    // failure again), so this says only that it tries, and readiness judges it as any follower.
    if (this.failure === failure) {
      this.failure = null;
      this.logger.log({
        msg: `the ${this.name} starts again from its checkpoint`,
        position: this.follower.current(),
      });
    }
  }
}
