/**
 * The size gate's cost against one JSON.stringify of the same event: reducing a 10 MiB
 * `model.call` to the default 1 MiB limit must stay within 3× that stringify (docs/api.md,
 * "Size gating": measure once, never re-serialise the event per pass).
 *
 * Method: two 10 MiB contexts — (a) 120,000 small messages, which the gate reduces by
 * dropping the oldest; (b) four messages with one huge text part each (with quotes,
 * newlines, accents and emoji to escape and encode), which it reduces by clamping. The gate
 * is given the event's size as the service does (measured once on receipt), so it is timed
 * alone; the baseline is `JSON.stringify(event)` of the same object. Both run alternately
 * after a warm-up, in the same process, and each reports its median round.
 *
 * Runs alone with `npx ts-node --transpile-only -r tsconfig-paths/register bench/size-gate.bench.ts`.
 */
import { performance } from 'node:perf_hooks';
import { gateEvent, measureEvent, type GateableEvent } from '@runledger/domain';

const LIMIT_BYTES = 1_048_576;
const TARGET_BYTES = 10 * 1_048_576;
const WARMUP_ROUNDS = 3;
const ROUNDS = 9;
const TARGET_RATIO = 3;
const ID = '0b7c6c1e-3f0a-4d8e-9a51-2f4c9f0e7d21';

export interface SizeGateRow {
  case: string;
  stringifyMs: number;
  gateMs: number;
  ratio: number;
}

function modelCall(messages: unknown[]): GateableEvent {
  return {
    id: ID,
    type: 'model.call',
    data: { callId: 'call-1', model: 'gpt-4o-mini', messages },
    metadata: { traceId: 'trace-1' },
  };
}

/** (a) 120,000 messages of about 87 bytes each. */
function manySmallMessages(): GateableEvent {
  const count = 120_000;
  const perMessage = Math.floor(TARGET_BYTES / count);
  // {"content":"…","role":"user"}, and the comma: 31 bytes around the text.
  const textLength = perMessage - 31;
  const messages = Array.from({ length: count }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `message ${i}: `.padEnd(textLength, 'lorem ipsum '),
  }));
  return modelCall(messages);
}

/** (b) four messages whose one text part each is about 2.5 MiB. */
function fewHugeParts(): GateableEvent {
  const line = 'The order "1042" shipped on Tuesday — café, naïve, 😀.\n';
  const partBytes = TARGET_BYTES / 4;
  const text = line.repeat(Math.ceil(partBytes / Buffer.byteLength(JSON.stringify(line))));
  const messages = [0, 1, 2, 3].map((i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: [{ type: 'text', text: `${i}: ${text}` }],
  }));
  return modelCall(messages);
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

function time(run: () => unknown): number {
  const start = performance.now();
  run();
  return performance.now() - start;
}

function measureCase(name: string, event: GateableEvent): SizeGateRow {
  const measured = measureEvent(event);
  const check = gateEvent(event, LIMIT_BYTES, measured);
  if (!check.truncated) throw new Error(`${name}: the event was expected to be reduced`);
  const stringifyTimes: number[] = [];
  const gateTimes: number[] = [];
  for (let round = 0; round < WARMUP_ROUNDS + ROUNDS; round += 1) {
    const stringifyMs = time(() => JSON.stringify(event));
    const gateMs = time(() => gateEvent(event, LIMIT_BYTES, measured));
    if (round < WARMUP_ROUNDS) continue;
    stringifyTimes.push(stringifyMs);
    gateTimes.push(gateMs);
  }
  const stringifyMs = median(stringifyTimes);
  const gateMs = median(gateTimes);
  return { case: name, stringifyMs, gateMs, ratio: gateMs / stringifyMs };
}

export async function runSizeGateBench(): Promise<{ rows: SizeGateRow[] }> {
  const rows = [
    measureCase('10 MiB model.call, 120,000 small messages', manySmallMessages()),
    measureCase('10 MiB model.call, 4 huge text parts', fewHugeParts()),
  ];
  return { rows };
}

if (require.main === module) {
  runSizeGateBench()
    .then(({ rows }) => {
      console.log(`size gate, limit ${LIMIT_BYTES} bytes, median of ${ROUNDS} rounds`);
      for (const row of rows) {
        const met = row.ratio <= TARGET_RATIO ? 'MET   ' : 'MISSED';
        console.log(
          `${met} ${row.case}: stringify ${row.stringifyMs.toFixed(1)} ms, gate ` +
            `${row.gateMs.toFixed(1)} ms, ${row.ratio.toFixed(2)}× (target ≤ ${TARGET_RATIO}×)`,
        );
      }
    })
    .catch((error: unknown) => {
      console.error('bench failed:', error);
      process.exit(1);
    });
}
