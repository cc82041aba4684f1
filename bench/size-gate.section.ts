/**
 * The size gate's section of docs/benchmarks.md: the measurements of size-gate.bench.ts
 * against the target (≤ 3× one JSON.stringify of the same event).
 */
import { ratio } from './lib/format';
import { codeRevision, describeMachine } from './lib/machine';
import type { Bench, Section } from './lib/section';
import { runSizeGateBench } from './size-gate.bench';

const TARGET_RATIO = 3;

export const sizeGateBench: Bench = {
  name: 'size-gate',
  order: 3,
  async run(): Promise<Section> {
    const { rows } = await runSizeGateBench();
    return {
      name: 'size-gate',
      title: 'Size gate: reducing a 10 MiB model.call to 1 MiB vs one JSON.stringify',
      measuredAt: new Date().toISOString(),
      machine: describeMachine(),
      revision: codeRevision(),
      method: [
        'Two 10 MiB model.call events: (a) 120,000 small messages, reduced by dropping the oldest; (b) four messages with one huge text part each (quotes, newlines, accents and emoji to escape and encode), reduced by clamping. The gate is given the size measured on receipt, as the service does, and reduces to the default limit of 1,048,576 bytes.',
        'Baseline: one `JSON.stringify` of the same object, alternating with the gate in the same process after a warm-up; the median of 9 rounds of each.',
      ],
      table: {
        columns: ['Case', 'JSON.stringify', 'gateEvent', 'Multiple of stringify'],
        rows: rows.map((row) => [
          row.case,
          `${row.stringifyMs.toFixed(1)} ms`,
          `${row.gateMs.toFixed(1)} ms`,
          ratio(row.ratio),
        ]),
      },
      targets: rows.map((row) => ({
        subject: `size gate, ${row.case}`,
        target: `≤ ${TARGET_RATIO}× one JSON.stringify`,
        measured: ratio(row.ratio),
        met: row.ratio <= TARGET_RATIO,
      })),
      notes: [],
    };
  },
};
