// @ts-check
/**
 * Mutation testing of libs/domain (npm run mutate; docs/mutation.md says when and how).
 * @type {import('@stryker-mutator/api/core').PartialStrykerOptions}
 */
export default {
  packageManager: 'npm',
  testRunner: 'jest',
  // Each mutant runs only the test files that import its file, and in them the tests that reach it.
  jest: { projectType: 'custom', configFile: 'jest.stryker.config.js', enableFindRelatedTests: true },
  coverageAnalysis: 'perTest',
  mutate: ['libs/domain/src/**/*.ts', '!libs/domain/src/**/*.spec.ts', '!libs/domain/src/**/testing/**'],
  // A mutant the compiler rejects could never ship, so it is not counted against the tests.
  checkers: ['typescript'],
  tsconfigFile: 'tsconfig.stryker.json',
  // The previous run's results, committed, so a rerun only tests mutants in changed code or
  // covered by changed tests.
  incremental: true,
  incrementalFile: 'docs/mutation/stryker-incremental.json',
  thresholds: { high: 90, low: 85, break: 85 },
  // Development machines are shared: two workers, not one per core.
  concurrency: 2,
  reporters: ['progress', 'clear-text', 'json'],
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
};
