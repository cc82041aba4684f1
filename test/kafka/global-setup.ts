/**
 * Jest global setup of the `kafka` project (run only when Kafka tests are selected): starts
 * the local single-node broker with scripts/kafka-local.sh (or reuses one already running on
 * KAFKA_PORT) and hands its address to the tests (env.ts turns it into KAFKA_BROKERS).
 * When no broker can be started the Kafka tests are skipped with a loud message, except
 * under CI=true, where that fails the run: CI must exercise the real broker.
 */
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';

const ROOT = resolve(__dirname, '..', '..');
export const KAFKA_SCRIPT = join(ROOT, 'scripts', 'kafka-local.sh');
/** Private names: the broker's address must not leak into other projects' child processes. */
export const BROKERS_VARIABLE = 'RUNLEDGER_TEST_KAFKA_BROKERS';
export const SKIP_VARIABLE = 'RUNLEDGER_TEST_KAFKA_SKIP';

declare global {
  var __runledgerKafkaStartedHere: boolean | undefined;
}

function script(command: 'start' | 'status'): { ok: boolean; out: string; err: string } {
  const result = spawnSync('bash', [KAFKA_SCRIPT, command], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 300_000,
  });
  return { ok: result.status === 0, out: result.stdout.trim(), err: result.stderr.trim() };
}

export default function globalSetup(): void {
  const running = script('status');
  const started = running.ok ? running : script('start');
  if (started.ok) {
    globalThis.__runledgerKafkaStartedHere = !running.ok;
    process.env[BROKERS_VARIABLE] = started.out.split('\n').pop() ?? '';
    return;
  }
  const why = `could not start the local Kafka broker (scripts/kafka-local.sh start):\n${started.err}`;
  if (process.env.CI === 'true' || process.env.CI === '1') {
    throw new Error(`${why}\nCI=true: the Kafka tests must run, so this fails the run.`);
  }
  process.env[SKIP_VARIABLE] = why;
  const bar = '!'.repeat(78);
  console.warn(
    `\n${bar}\n!! KAFKA TESTS SKIPPED: ${why}\n!! (needs Java 17+ and Maven with access to Maven Central; under CI=true this is a failure)\n${bar}\n`,
  );
}
