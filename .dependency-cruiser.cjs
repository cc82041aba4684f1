/** The dependency rules of runledger (docs/architecture.md, "Layers"): the domain stays pure. */
module.exports = {
  forbidden: [
    {
      name: 'domain-is-framework-free',
      comment: 'libs/domain holds pure rules: no NestJS, no adapters, no I/O modules.',
      severity: 'error',
      from: { path: '^libs/domain/' },
      to: {
        path: [
          'node_modules/@nestjs/',
          '^libs/(event-store|observability|projections|mirror)/',
          '^services/',
          'node_modules/(better-sqlite3|kafkajs|@kurrent|fastify|prom-client)',
        ],
      },
    },
    {
      name: 'domain-no-io-builtins',
      comment: 'The domain does no I/O: no file system, network, processes or timers modules.',
      severity: 'error',
      from: { path: '^libs/domain/' },
      to: { dependencyTypes: ['core'], path: '^(fs|fs/promises|net|http|https|http2|child_process|dgram|dns|tls|cluster|worker_threads|timers|node:fs|node:net|node:http|node:child_process|node:timers)$' },
    },
    {
      name: 'client-stands-alone',
      comment: '@runledger/client is published on its own: nothing of the repository but itself.',
      severity: 'error',
      from: { path: '^libs/client/' },
      to: { path: '^(libs/(?!client/)|services/)' },
    },
    {
      name: 'libs-do-not-import-services',
      severity: 'error',
      from: { path: '^libs/' },
      to: { path: '^services/' },
    },
    {
      name: 'no-circular',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^dist/|\\.spec\\.ts$)' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
  },
};
