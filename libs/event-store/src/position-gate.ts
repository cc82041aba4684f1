/**
 * Where a follower of the log stands, and who waits for it to pass a position: the
 * read-your-writes wait of the projections, whether the follower runs on this event loop
 * (CheckpointedProcessor) or in a worker thread that reports its commits.
 */
import type { EventStoreReader } from './event-store.port';

export class PositionNotReachedError extends Error {
  constructor(
    readonly position: number,
    readonly minPosition: number,
  ) {
    super(`the processor is at position ${position}, not yet at ${minPosition}`);
    this.name = 'PositionNotReachedError';
  }
}

export class PositionGate {
  private position: number;
  private readonly waiters = new Set<{ min: number; resolve: () => void }>();

  /** `streamPrefix`: the follower sees only those streams (see `waitFor`). */
  constructor(
    private readonly log: Pick<EventStoreReader, 'headPosition'>,
    private readonly streamPrefix: string | undefined,
    position = 0,
  ) {
    this.position = position;
  }

  current(): number {
    return this.position;
  }

  /** The follower is now at `position`: wakes everyone waiting for it. */
  moveTo(position: number): void {
    this.position = position;
    for (const waiter of this.waiters) {
      if (position >= waiter.min) {
        this.waiters.delete(waiter);
        waiter.resolve();
      }
    }
  }

  /**
   * Resolves once the follower has passed `minPosition`; rejects after `timeoutMs`. With a
   * stream prefix, a position of another stream counts as passed once the last event of
   * the followed streams before it is handled.
   */
  async waitFor(minPosition: number, timeoutMs: number): Promise<void> {
    if (this.position >= minPosition) return;
    const deadline = Date.now() + timeoutMs;
    const target = await this.positionToPass(minPosition);
    if (this.position >= target) return;
    await new Promise<void>((resolve, reject) => {
      const waiter = {
        min: target,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      const timer = setTimeout(
        () => {
          this.waiters.delete(waiter);
          reject(new PositionNotReachedError(this.position, minPosition));
        },
        Math.max(0, deadline - Date.now()),
      );
      this.waiters.add(waiter);
    });
  }

  /**
   * The event the follower must handle to have passed `minPosition`: the last followed one
   * at or before it, or `minPosition` itself while the log has not reached it. The log head
   * is read first: every event up to it is already written.
   */
  private async positionToPass(minPosition: number): Promise<number> {
    const head = await this.log.headPosition();
    if (minPosition > head || this.streamPrefix === undefined) return minPosition;
    const followedHead = await this.log.headPosition({ streamPrefix: this.streamPrefix });
    return Math.min(minPosition, followedHead);
  }
}
