/**
 * What a benchmark module hands back: one section of docs/benchmarks.md. Each bench keeps
 * its last section as JSON in bench/results/<name>.json, so the document is rebuilt from
 * every bench ever run, not only those run this time (`npm run bench -- store`).
 */
import type { MachineInfo } from './machine';

/** One target of the issue, checked against what this run measured. */
export interface TargetCheck {
  /** What is compared, e.g. "store append, batches of 100, vs raw better-sqlite3". */
  subject: string;
  /** The target as the issue states it, e.g. "≥ 0.75× baseline". */
  target: string;
  /** What this run measured, e.g. "0.93×". */
  measured: string;
  met: boolean;
}

export interface Table {
  columns: string[];
  rows: string[][];
}

export interface Section {
  /** The bench's name, also its results file and its filter word. */
  name: string;
  title: string;
  /** ISO-8601, when this section was measured. */
  measuredAt: string;
  machine: MachineInfo;
  /** The commit measured (lib/machine.ts codeRevision). */
  revision: string;
  /** The host's 1-minute load average just before the bench started (set by run.ts). */
  hostLoad?: number;
  /** Method and fairness of the baseline, one paragraph per entry. */
  method: string[];
  table: Table;
  targets: TargetCheck[];
  /** Observations worth reading beside the numbers (where the time goes, caveats). */
  notes: string[];
}

export interface Bench {
  name: string;
  /** Order of the section in docs/benchmarks.md: lower first. */
  order: number;
  run(): Promise<Section>;
}
