/**
 * The event loop is shared by every tenant's requests. A loop over input whose size a caller
 * chooses (a batch's events, a run's pages) gives it a turn whenever it has run a slice,
 * instead of holding it for the whole input.
 */

/** How long a sliced loop runs before it gives the event loop a turn. */
export const SLICE_MS = 10;

/** One turn of the event loop: timers, sockets and other requests run before this resolves. */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Calls `fn` on each item in order, giving the event loop a turn whenever `sliceMs` has run. */
export async function forEachInSlices<T>(
  items: readonly T[],
  fn: (item: T, index: number) => void,
  sliceMs = SLICE_MS,
): Promise<void> {
  const clock = new SliceClock(sliceMs);
  for (const [index, item] of items.entries()) {
    fn(item, index);
    if (clock.due()) await clock.turn();
  }
}

/** `items.map(fn)`, giving the event loop a turn whenever `sliceMs` of it has run. */
export async function mapInSlices<T, R>(
  items: readonly T[],
  fn: (item: T, index: number) => R,
  sliceMs = SLICE_MS,
): Promise<R[]> {
  const results: R[] = [];
  await forEachInSlices(items, (item, index) => results.push(fn(item, index)), sliceMs);
  return results;
}

/**
 * A sliced loop's clock, which several loops can share: the loops over one request's input
 * in turn, or loops running at once (every SSE client catching up). Those that wait for a
 * turn together share the one slice that follows it, so ten loops hold the event loop for a
 * slice per turn, not ten.
 */
export class SliceClock {
  private sliceStart = Date.now();
  private nextSlice: Promise<void> | null = null;

  constructor(private readonly sliceMs = SLICE_MS) {}

  /** Whether a slice has run since the last turn. */
  due(): boolean {
    return Date.now() - this.sliceStart >= this.sliceMs;
  }

  /** Gives the event loop a turn, and starts the next slice. */
  turn(): Promise<void> {
    this.nextSlice ??= nextTurn().then(() => {
      this.nextSlice = null;
      this.sliceStart = Date.now();
    });
    return this.nextSlice;
  }
}

/**
 * Runs a generator's steps to its result, giving the event loop a turn whenever `clock` is
 * due, after its last step too: a loop over several such runs shares their slices.
 */
export async function runInSlices<R>(steps: Generator<void, R>, clock: SliceClock): Promise<R> {
  for (;;) {
    const step = steps.next();
    if (clock.due()) await clock.turn();
    if (step.done) return step.value;
  }
}

/** Runs a generator's steps to its result in one go. */
export function runToEnd<R>(steps: Generator<void, R>): R {
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/**
 * Work that takes turns of the event loop, in the order it asked. While the current turn has
 * run less than `sliceMs` since its first piece and nothing waits, a piece goes on at once,
 * in its caller's synchronous step; after that, each piece waits for a turn of its own. A
 * slice of 0 gives every piece a later turn of its own.
 *
 * Unlike SliceClock, which times a loop's own steps, this counts from the turn's first piece:
 * pieces asked for by separate requests in one turn (twenty replays starting together) run
 * back to back there, and nothing else tells them the turn is spent.
 */
export class TurnQueue {
  /** Jobs, or the resolvers of those who wait, in order. */
  private readonly waiting: (() => void)[] = [];
  /** When this turn's first piece began; null before one has. */
  private since: number | null = null;

  constructor(private readonly sliceMs: number) {}

  /**
   * Nothing when the caller may go on at once (awaiting even a resolved promise would let
   * every other piece asked for in this step check the slice before any of them ran); else
   * its turn, a later one.
   */
  take(): Promise<void> | undefined {
    if (this.mayGoOn()) return undefined;
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Calls `job` at once or in its turn, as `take` would say. */
  run(job: () => void): void {
    if (this.mayGoOn()) job();
    else this.waiting.push(job);
  }

  private mayGoOn(): boolean {
    if (this.waiting.length > 0) return false;
    const now = performance.now();
    if (this.since === null) {
      this.since = now;
      // An immediate set while immediates run waits for the next turn of the loop.
      setImmediate(this.nextTurn);
    }
    return now - this.since < this.sliceMs;
  }

  private readonly nextTurn = (): void => {
    this.since = null;
    const next = this.waiting.shift();
    if (next === undefined) return;
    this.since = performance.now();
    next();
    // Set after a job's own immediates (`run`): what it left for the loop comes before the
    // next job. A waiter (`take`) resumes once this returns, after it.
    setImmediate(this.nextTurn);
  };
}
