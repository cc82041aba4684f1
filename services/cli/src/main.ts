#!/usr/bin/env node
/**
 * The `runledger` executable (package.json "bin"; /usr/local/bin/runledger in the image).
 * Compiled with the services by `npm run build`: nothing here needs ts-node.
 */
import { runCli } from './cli';

runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
}).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error('runledger: unexpected failure:', error);
    process.exitCode = 1;
  },
);
