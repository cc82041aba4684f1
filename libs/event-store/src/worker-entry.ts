import { extname, join } from 'node:path';

export interface WorkerEntry {
  /** A file to run, or (with `eval`) the code that loads it. */
  filename: string;
  eval: boolean;
}

/**
 * A worker thread's entry module `name` in directory `dir`, beside `caller` (the starting
 * module's own `__filename`): the compiled JavaScript in the built service; under ts-node or
 * jest, where the caller is TypeScript, the TypeScript source loaded through the same
 * register hooks (the worker does not inherit jest's transform).
 */
export function workerEntry(dir: string, name: string, caller: string): WorkerEntry {
  const extension = extname(caller);
  const file = join(dir, `${name}${extension}`);
  if (extension !== '.ts') return { filename: file, eval: false };
  const hooks = ['ts-node/register/transpile-only', 'tsconfig-paths/register'];
  const code = [...hooks.map((hook) => require.resolve(hook)), file]
    .map((path) => `require(${JSON.stringify(path)});`)
    .join('\n');
  return { filename: code, eval: true };
}
