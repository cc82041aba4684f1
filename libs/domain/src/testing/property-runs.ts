/**
 * How many cases a property test tries: the number it asks for, capped by a run budget when
 * one is configured globally. `npm run mutate` configures one (mutation-setup.ts): there each
 * mutant reruns every property that reaches it, and a rule broken by a mutant fails within
 * the first cases fast-check tries, which are its smallest and most likely to hit edges.
 */
import fc from 'fast-check';

export function propertyRuns(wanted: number): number {
  const budget = fc.readConfigureGlobal().numRuns;
  return budget === undefined ? wanted : Math.min(wanted, budget);
}
