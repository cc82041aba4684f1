/** Stops the broker the global setup started (one that was already running is left alone). */
import { spawnSync } from 'node:child_process';
import { KAFKA_SCRIPT } from './global-setup';

export default function globalTeardown(): void {
  if (!globalThis.__runledgerKafkaStartedHere) return;
  spawnSync('bash', [KAFKA_SCRIPT, 'stop'], { stdio: 'inherit', timeout: 60_000 });
}
