/**
 * Merges StrykerJS JSON reports of runs over different files (`npx stryker run --mutate
 * <files>` writes a report, and an incremental file, of those files only) into one report:
 * the files of all, a file in several taken from the last report naming it; the test files
 * of all, likewise. The result serves as the incremental file of the next full run
 * (docs/mutation/stryker-incremental.json) and as the input of mutation-report.ts.
 *
 * Usage: mutation-merge.ts <merged.json> <report.json>...
 */
import { readFileSync, writeFileSync } from 'node:fs';

interface Report {
  files: Record<string, unknown>;
  testFiles?: Record<string, unknown>;
  [key: string]: unknown;
}

export function mergeReports(reports: readonly Report[]): Report {
  const [first, ...rest] = reports;
  const merged: Report = { ...first, files: { ...first.files }, testFiles: { ...first.testFiles } };
  for (const report of rest) {
    Object.assign(merged.files, report.files);
    Object.assign(merged.testFiles as Record<string, unknown>, report.testFiles);
  }
  return merged;
}

function main([out, ...inputs]: string[]): number {
  if (!out || inputs.length === 0) {
    console.error('usage: mutation-merge.ts <merged.json> <report.json>...');
    return 2;
  }
  const reports = inputs.map((path) => JSON.parse(readFileSync(path, 'utf8')) as Report);
  const merged = mergeReports(reports);
  writeFileSync(out, JSON.stringify(merged, null, 2));
  console.log(`${out}: ${Object.keys(merged.files).length} files from ${inputs.length} reports`);
  return 0;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));
