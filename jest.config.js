/** One jest project per test tier (docs/operations.md, "Tests"): unit, int, e2e, hostile, kafka. */
const swc = [
  '@swc/jest',
  {
    jsc: {
      parser: { syntax: 'typescript', decorators: true },
      transform: { legacyDecorator: true, decoratorMetadata: true },
      target: 'es2022',
    },
    module: { type: 'commonjs' },
  },
];
const ESM_ONLY = ['content-disposition', '@apidevtools/json-schema-ref-parser'];
const shared = {
  // Packages that ship ES modules only: content-disposition (under @fastify/static, which
  // serves /docs) and json-schema-ref-parser (under swagger-parser, which checks /docs-json).
  // jest's CommonJS runtime needs them transformed like our own sources.
  transform: { '^.+\\.ts$': swc, [`/node_modules/(${ESM_ONLY.join('|')})/.+\\.js$`]: swc },
  transformIgnorePatterns: [`/node_modules/(?!(${ESM_ONLY.join('|')})/)`],
  moduleFileExtensions: ['ts', 'js', 'json'],
  moduleNameMapper: {
    '^@runledger/([a-z-]+)$': '<rootDir>/libs/$1/src',
    '^@runledger/([a-z-]+)/(.+)$': '<rootDir>/libs/$1/src/$2',
  },
  testEnvironment: 'node',
  // StrykerJS's sandbox (npm run mutate) holds a copy of the repository while it runs.
  modulePathIgnorePatterns: ['<rootDir>/.stryker-tmp/'],
};
module.exports = {
  projects: [
    {
      ...shared,
      displayName: 'unit',
      testMatch: ['<rootDir>/{libs,services,deploy}/**/*.unit.spec.ts'],
    },
    { ...shared, displayName: 'int', testMatch: ['<rootDir>/{libs,services}/**/*.int.spec.ts'] },
    { ...shared, displayName: 'e2e', testMatch: ['<rootDir>/test/**/*.e2e.spec.ts'] },
    // Attacks on the built service as a process (docs/limits.md): every answer bounded, the
    // event loop responsive, RSS bounded and the log unchanged throughout.
    { ...shared, displayName: 'hostile', testMatch: ['<rootDir>/test/hostile/*.hostile.spec.ts'] },
    // Against a real Kafka broker, which the global setup starts (test/kafka/global-setup.ts)
    // only when this project is selected: the other tiers never wait for a JVM.
    {
      ...shared,
      displayName: 'kafka',
      testMatch: ['<rootDir>/{libs,services,test}/**/*.kafka.spec.ts'],
      globalSetup: '<rootDir>/test/kafka/global-setup.ts',
      globalTeardown: '<rootDir>/test/kafka/global-teardown.ts',
      setupFiles: ['<rootDir>/test/kafka/env.ts'],
    },
  ],
};
