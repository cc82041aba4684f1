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
  let sliceStart = Date.now();
  for (const [index, item] of items.entries()) {
    fn(item, index);
    if (Date.now() - sliceStart >= sliceMs) {
      await nextTurn();
      sliceStart = Date.now();
    }
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
