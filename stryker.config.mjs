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
  // No type checker: on the shared 2-core machines its process would hold one of the two
  // workers for most of a run. A mutant that would not compile runs like any other: the
  // tests kill it, or it is a survivor to explain like any other.
  mutate: ['libs/domain/src/**/*.ts', '!libs/domain/src/**/*.spec.ts', '!libs/domain/src/**/testing/**'],
  // The previous run's results, committed, so a rerun only tests mutants in changed code or
  // covered by changed tests.
  incremental: true,
  incrementalFile: 'docs/mutation/stryker-incremental.json',
  thresholds: { high: 90, low: 85, break: 85 },
  // Development machines are shared: two workers, not one per core.
  concurrency: 2,
  // Static mutants (in a module-level constant, a schema decorator, a rules table) are run and
  // counted like any other. Each is active from import on, so StrykerJS reruns every test of
  // the files importing its module rather than the tests that reach it; the domain suite runs
  // in seconds, so that is affordable, and leaving them out would leave the tables and schemas
  // unmeasured.
  ignoreStatic: false,
  // Loaded machines slow a run down two- or threefold: only a mutant that runs on far past its
  // tests' usual time counts as a timeout (an endless loop), not one that met a busy core.
  timeoutFactor: 3,
  timeoutMS: 10000,
  reporters: ['progress', 'clear-text', 'json'],
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  // Not copied into the sandbox: the deploy tools' virtualenv (`npm test` makes it; its
  // lib64 symlink to a directory stops the copy) and the service's data directory.
  ignorePatterns: ['.cache', 'data'],
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
};
