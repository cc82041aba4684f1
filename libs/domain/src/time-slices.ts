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
