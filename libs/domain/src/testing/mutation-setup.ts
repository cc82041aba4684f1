/**
 * Loaded before each test file by jest.stryker.config.js only (npm run mutate), never by
 * npm test: the property run budget that propertyRuns and fast-check's default obey there.
 */
import fc from 'fast-check';

fc.configureGlobal({ numRuns: 20 });
