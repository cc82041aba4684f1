/**
 * The domain's unit tests alone, for StrykerJS (npm run mutate): every mutant reruns these, so
 * the slower tiers and the other libraries' tests stay out. Same transform as jest.config.js.
 */
const { projects } = require('./jest.config.js');

const { displayName, ...unit } = projects.find((project) => project.displayName === 'unit');

module.exports = {
  ...unit,
  rootDir: __dirname,
  // The domain imports nothing else of the repository: jest need not index the rest per run.
  roots: ['<rootDir>/libs/domain'],
  testMatch: ['<rootDir>/libs/domain/**/*.unit.spec.ts'],
  // Property tests run a smaller budget of cases per mutant (libs/domain/src/testing/property-runs.ts).
  setupFiles: ['<rootDir>/libs/domain/src/testing/mutation-setup.ts'],
};
