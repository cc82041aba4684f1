/**
 * `npm run bench [-- <filter>…]`: runs each benchmark whose name contains a filter word (all
 * when none is given), one after another so they never compete for the two cores, prints
 * each section's table and targets, stores it in bench/results/<name>.json and rebuilds
 * docs/benchmarks.md from every stored section. A new benchmark adds a module exporting a
 * `Bench` and one line to BENCHES.
 */
import os from 'node:os';
import { httpBench } from './http.bench';
import { largeAppendBench } from './large-append.bench';
import { memoryBench } from './memory.bench';
import { DOC_FILE, loadSections, saveSection, textTable, writeDocument } from './lib/report';
import type { Bench } from './lib/section';
import { mirrorBench } from './mirror.bench';
import { projectionsBench } from './projections.bench';
import { sizeGateBench } from './size-gate.section';
import { soakBench } from './soak.bench';
import { sseBench } from './sse.bench';
import { storeBench } from './store.bench';

const BENCHES: readonly Bench[] = [
  storeBench,
  httpBench,
  sizeGateBench,
  largeAppendBench,
  projectionsBench,
  memoryBench,
  soakBench,
  sseBench,
  mirrorBench,
];

async function main(): Promise<void> {
  const filters = process.argv.slice(2).filter((arg) => arg !== '--');
  const selected = BENCHES.filter(
    (bench) => filters.length === 0 || filters.some((filter) => bench.name.includes(filter)),
  );
  if (selected.length === 0) {
    console.error(
      `no benchmark matches ${filters.join(', ')}; known: ${BENCHES.map((b) => b.name).join(', ')}`,
    );
    process.exit(2);
  }
  let missed = 0;
  for (const bench of selected) {
    console.log(`\n== ${bench.name} ==`);
    // Other work on a shared host shows up in the numbers: say how busy it was.
    const hostLoad = os.loadavg()[0];
    const section = { ...(await bench.run()), hostLoad };
    saveSection(section, bench.order);
    console.log(`\n${section.title}\n\n${textTable(section.table)}\n`);
    for (const target of section.targets) {
      if (!target.met) missed += 1;
      console.log(
        `${target.met ? 'MET   ' : 'MISSED'} ${target.subject}: ${target.measured} (target ${target.target})`,
      );
    }
  }
  writeDocument(loadSections());
  console.log(`\nwrote ${DOC_FILE}${missed > 0 ? ` (${missed} target(s) missed)` : ''}`);
}

main().catch((error: unknown) => {
  console.error('bench failed:', error);
  process.exit(1);
});
