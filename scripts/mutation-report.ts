/**
 * `npm run mutate` ends here: turns StrykerJS's JSON report into the generated part of
 * docs/mutation.md — the score of each file and every mutant left alive, each with the reason
 * recorded for it in docs/mutation/survivors.yaml. Exits 1 when a survivor has no reason
 * recorded: a mutant no test notices is either a missing test or an explained equivalent.
 *
 * Usage: mutation-report.ts <stryker json report> <markdown file> <survivors yaml>
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';

/** The parts of the mutation-testing-report-schema this report reads. */
interface Position {
  line: number;
  column: number;
}

interface ReportMutant {
  mutatorName: string;
  replacement?: string;
  status: string;
  location: { start: Position; end: Position };
}

interface Report {
  files: Record<string, { source: string; mutants: ReportMutant[] }>;
  thresholds?: { break?: number | null };
}

/**
 * A recorded reason: for one change (mutator, original, replacement; `line` only when the
 * same change elsewhere in the file is not alike), or for every survivor in `lines` of a
 * function whose survivors share one reason.
 */
export interface SurvivorReason {
  file: string;
  mutator?: string;
  original?: string;
  replacement?: string;
  line?: number;
  lines?: [number, number];
  reason: string;
}

export interface Survivor {
  file: string;
  line: number;
  mutator: string;
  original: string;
  replacement: string;
  status: string;
}

export interface FileScore {
  file: string;
  killed: number;
  timeout: number;
  survived: number;
  noCoverage: number;
  /** Crashed the test run, or would not compile: not counted, as StrykerJS does not. */
  invalid: number;
  /**
   * Left out of the run (StrykerJS's `Ignored`: a `// Stryker disable` comment, or
   * `ignoreStatic`, which stryker.config.mjs leaves off). None should be: each is listed with
   * the survivors and needs a reason like one, since code left out is not measured.
   */
  ignored: number;
  score: number;
}

export const GENERATED_START = '<!-- mutation-report:start -->';
export const GENERATED_END = '<!-- mutation-report:end -->';

/** Mutants no test detected, or that no test ran: each needs a test or a recorded reason. */
const UNDETECTED = new Set(['Survived', 'NoCoverage', 'Ignored']);

/** The mutated source text, whitespace collapsed so a reformatted line keeps its reason. */
function snippet(source: string, { start, end }: { start: Position; end: Position }): string {
  const lines = source.split('\n');
  const text =
    start.line === end.line
      ? lines[start.line - 1].slice(start.column - 1, end.column - 1)
      : [
          lines[start.line - 1].slice(start.column - 1),
          ...lines.slice(start.line, end.line - 1),
          lines[end.line - 1].slice(0, end.column - 1),
        ].join('\n');
  return collapse(text);
}

function collapse(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** StrykerJS's mutation score: detected over detected and undetected, invalid left out. */
function score(detected: number, undetected: number): number {
  const valid = detected + undetected;
  return valid === 0 ? 100 : (100 * detected) / valid;
}

export function scoresOf(report: Report): { files: FileScore[]; total: FileScore } {
  const files = Object.entries(report.files)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([file, { mutants }]) => {
      const count = (...statuses: string[]) =>
        mutants.filter((m) => statuses.includes(m.status)).length;
      const killed = count('Killed');
      const timeout = count('Timeout');
      const survived = count('Survived');
      const noCoverage = count('NoCoverage');
      const invalid = count('CompileError', 'RuntimeError');
      const ignored = count('Ignored');
      return {
        file,
        killed,
        timeout,
        survived,
        noCoverage,
        invalid,
        ignored,
        score: score(killed + timeout, survived + noCoverage),
      };
    });
  const sum = (key: 'killed' | 'timeout' | 'survived' | 'noCoverage' | 'invalid' | 'ignored') =>
    files.reduce((total, file) => total + file[key], 0);
  const total = {
    file: 'all files',
    killed: sum('killed'),
    timeout: sum('timeout'),
    survived: sum('survived'),
    noCoverage: sum('noCoverage'),
    invalid: sum('invalid'),
    ignored: sum('ignored'),
    score: score(sum('killed') + sum('timeout'), sum('survived') + sum('noCoverage')),
  };
  return { files, total };
}

export function survivorsOf(report: Report): Survivor[] {
  const survivors: Survivor[] = [];
  for (const [file, { source, mutants }] of Object.entries(report.files)) {
    for (const mutant of mutants) {
      if (!UNDETECTED.has(mutant.status)) continue;
      survivors.push({
        file,
        line: mutant.location.start.line,
        mutator: mutant.mutatorName,
        original: snippet(source, mutant.location),
        replacement: collapse(mutant.replacement ?? ''),
        status: mutant.status,
      });
    }
  }
  return survivors.sort((a, b) => a.file.localeCompare(b.file) || a.line - b.line);
}

export function reasonFor(survivor: Survivor, reasons: readonly SurvivorReason[]) {
  const matches = (r: SurvivorReason) =>
    r.lines !== undefined
      ? survivor.line >= r.lines[0] && survivor.line <= r.lines[1]
      : r.mutator === survivor.mutator &&
        collapse(r.original ?? '') === survivor.original &&
        collapse(r.replacement ?? '') === survivor.replacement &&
        (r.line === undefined || r.line === survivor.line);
  return (
    reasons.find((r) => r.file === survivor.file && r.lines === undefined && matches(r)) ??
    reasons.find((r) => r.file === survivor.file && matches(r))
  );
}

const STATUS_NOTES: Record<string, string> = {
  NoCoverage: ' (no test runs it)',
  Ignored: ' (not run)',
};

/** A table cell: code in backticks, cut short, pipes escaped. */
function code(text: string): string {
  const short = text.length > 80 ? `${text.slice(0, 77)}...` : text;
  return `\`${short.replace(/\|/g, '\\|').replace(/`/g, "'")}\``;
}

/** The files StrykerJS mutates (stryker.config.mjs): libs/domain's sources, not specs or helpers. */
export function domainSources(root = 'libs/domain/src'): string[] {
  return readdirSync(root, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.spec.ts'))
    .filter((f) => !f.split('/').includes('testing'))
    .map((f) => join(root, f))
    .sort();
}

export function renderReport(
  report: Report,
  reasons: readonly SurvivorReason[],
  sources: readonly string[] = [],
): { markdown: string; unexplained: Survivor[]; unused: SurvivorReason[] } {
  const { files, total } = scoresOf(report);
  const survivors = survivorsOf(report);
  const used = new Set<SurvivorReason>();
  const unexplained: Survivor[] = [];
  const row = (s: FileScore, name: string) =>
    `| ${name} | ${s.score.toFixed(2)} | ${s.killed} | ${s.timeout} | ${s.survived} | ${s.noCoverage} | ${s.invalid} | ${s.ignored} |`;
  const lines = [
    GENERATED_START,
    '',
    `Mutation score of libs/domain: **${total.score.toFixed(2)}%** (break threshold: ${report.thresholds?.break ?? 'none'}%).`,
    '',
    '| File | Score % | Killed | Timed out | Survived | No coverage | Invalid | Not run |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...files.map((s) => row(s, `\`${s.file}\``)),
    row(total, '**all files**'),
    '',
  ];
  const missing = sources.filter((file) => !(file in report.files));
  if (missing.length > 0) {
    lines.push(
      `Not in this report (not measured; a file of re-exports or types only has no mutants): ${missing.map((f) => `\`${f}\``).join(', ')}.`,
      '',
    );
  }
  lines.push(`### Surviving mutants (${survivors.length})`, '');
  if (survivors.length === 0) lines.push('None.', '');
  for (const survivor of survivors) {
    const reason = reasonFor(survivor, reasons);
    if (reason === undefined) unexplained.push(survivor);
    else used.add(reason);
    const status = STATUS_NOTES[survivor.status] ?? '';
    lines.push(
      `- \`${survivor.file}:${survivor.line}\` ${survivor.mutator}${status}: ${code(survivor.original)} → ${code(survivor.replacement)}`,
      `  ${reason === undefined ? '**No reason recorded.**' : collapse(reason.reason)}`,
    );
  }
  lines.push('', GENERATED_END);
  return {
    markdown: lines.join('\n'),
    unexplained,
    unused: reasons.filter((r) => !used.has(r)),
  };
}

/** The document with its generated part replaced; the prose around it is kept. */
export function spliceGenerated(document: string, generated: string): string {
  const start = document.indexOf(GENERATED_START);
  const end = document.indexOf(GENERATED_END);
  if (start === -1 || end < start) {
    throw new Error(`the document has no ${GENERATED_START} … ${GENERATED_END} block`);
  }
  return document.slice(0, start) + generated + document.slice(end + GENERATED_END.length);
}

function main([reportPath, markdownPath, reasonsPath]: string[]): number {
  if (!reportPath || !markdownPath || !reasonsPath) {
    console.error('usage: mutation-report.ts <report.json> <mutation.md> <survivors.yaml>');
    return 2;
  }
  const report = JSON.parse(readFileSync(reportPath, 'utf8')) as Report;
  const reasons = (parse(readFileSync(reasonsPath, 'utf8')) ?? []) as SurvivorReason[];
  const { markdown, unexplained, unused } = renderReport(report, reasons, domainSources());
  writeFileSync(markdownPath, spliceGenerated(readFileSync(markdownPath, 'utf8'), markdown));
  console.log(`${markdownPath} written from ${reportPath}`);
  for (const reason of unused) {
    console.warn(
      `${reasonsPath}: no survivor matches ${reason.file} ${reason.lines?.join('-') ?? `${reason.mutator} ${code(reason.original ?? '')}`}: remove it`,
    );
  }
  if (unexplained.length === 0) return 0;
  console.error(
    `${unexplained.length} surviving mutant(s) have no reason in ${reasonsPath}: ` +
      'write the test that kills each, or record why it is equivalent or harmless:',
  );
  for (const s of unexplained) {
    console.error(
      `  ${s.file}:${s.line} ${s.mutator}: ${code(s.original)} → ${code(s.replacement)}`,
    );
  }
  return 1;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));
