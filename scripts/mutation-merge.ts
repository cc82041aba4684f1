/**
 * Merges StrykerJS JSON reports of runs over different files, or different lines of a file
 * (`npx stryker run --mutate <file>[:<from>-<to>]` writes a report, and an incremental file,
 * of those mutants only) into one report: each file with the mutants of every report, a
 * mutant reported twice taken from the last report; the test files of all, likewise; files
 * no longer in the repository left out. The
 * result serves as the incremental file of the next full run
 * (docs/mutation/stryker-incremental.json) and as the input of mutation-report.ts.
 *
 * Usage: mutation-merge.ts <merged.json> <report.json>...
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

interface ReportMutant {
  mutatorName: string;
  statusReason?: string;
  replacement?: string;
  location: { start: { line: number; column: number }; end: { line: number; column: number } };
}

interface ReportFile {
  source: string;
  mutants: ReportMutant[];
  [key: string]: unknown;
}

interface Report {
  files: Record<string, ReportFile>;
  testFiles?: Record<string, unknown>;
  [key: string]: unknown;
}

function mutantKey({ mutatorName, replacement, location: { start, end } }: ReportMutant) {
  return `${start.line}:${start.column}-${end.line}:${end.column} ${mutatorName} ${replacement}`;
}

export function mergeReports(reports: readonly Report[]): Report {
  const files: Record<string, ReportFile> = {};
  const testFiles: Record<string, unknown> = {};
  for (const report of reports) {
    for (const [path, file] of Object.entries(report.files)) {
      if (!existsSync(path)) continue;
      const mutants = new Map((files[path]?.mutants ?? []).map((m) => [mutantKey(m), m]));
      // A killed mutant's reason is the failing test's message, which for a property test
      // holds its whole counterexample (megabytes): the next run does not need it.
      for (const { statusReason: _reason, ...mutant } of file.mutants) {
        mutants.set(mutantKey(mutant), mutant);
      }
      files[path] = { ...file, mutants: [...mutants.values()] };
    }
    Object.assign(testFiles, report.testFiles);
  }
  return { ...reports[reports.length - 1], files, testFiles };
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
