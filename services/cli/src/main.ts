#!/usr/bin/env node
/**
 * The `runledger` executable (package.json "bin"; /usr/local/bin/runledger in the image).
 * Compiled with the services by `npm run build`: nothing here needs ts-node.
 */
import { Logger } from '@nestjs/common';
import { JsonLinesLogger } from '../../api/src/config/process-config';
import { EXIT, runCli } from './cli';

// What a command logs on the way (an unreadable event a replay meets) goes to stderr as JSON
// lines, whatever its level: stdout carries the command's output.
Logger.overrideLogger(new JsonLinesLogger('runledger', 'stderr'));

// A reader that stopped reading (`runledger replay <run> | head`): end quietly, as a process a
// SIGPIPE ends would, rather than with a stack trace and the exit code of a broken chain.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(EXIT.outputClosed);
  console.error(`runledger: cannot write the output: ${error.message}`);
  process.exit(EXIT.failed);
});

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
