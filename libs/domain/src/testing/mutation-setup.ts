/**
 * Loaded before each test file by jest.stryker.config.js only (npm run mutate), never by
 * npm test. There a failing property only has to fail: the run budget that propertyRuns and
 * fast-check's default obey is small, and a counterexample is not shrunk (shrinking reruns
 * the property, with the mutant, until a run times out and a killed mutant costs a minute).
 */
import fc from 'fast-check';

fc.configureGlobal({ numRuns: 20, endOnFailure: true });
