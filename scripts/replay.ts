/**
 * `npm run replay -- <tenantId> <runId> [--verify]`: an operator's replay of one run from the
 * configured store (the same environment variables as the service). Prints the run as
 * NDJSON, one recorded event a line, or with --verify the audit summary; exits 1 when the
 * run does not exist or its chain does not verify.
 */
import { runStream } from '@runledger/domain';
import { openEventStore } from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import { ConfigError, loadConfig } from '../services/api/src/config/config';
import { RunLogService, assertRunId } from '../services/api/src/runs/run-log.service';

async function main(argv: string[]): Promise<number> {
  const args = argv.filter((a) => a !== '--verify');
  const verify = args.length !== argv.length;
  if (args.length !== 2) {
    console.error('usage: npm run replay -- <tenantId> <runId> [--verify]');
    return 2;
  }
  const [tenantId, runId] = args;
  assertRunId(runId);
  const config = loadConfig();
  const store = openEventStore(config);
  try {
    const runLog = new RunLogService(store, config, new Metrics());
    const [first] = await store.readStream(runStream(tenantId, runId), { maxCount: 1 });
    if (!first) {
      console.error(
        `run ${runId} of tenant ${tenantId} not found in ${config.eventStoreUrl ?? config.dataDir}`,
      );
      return 1;
    }
    if (verify) {
      const verdict = await runLog.verify(tenantId, runId);
      process.stdout.write(`${JSON.stringify(verdict)}\n`);
      return verdict.verified ? 0 : 1;
    }
    for await (const event of runLog.replay(tenantId, runId)) {
      if (!process.stdout.write(`${JSON.stringify(event)}\n`)) {
        await new Promise((resolve) => process.stdout.once('drain', resolve));
      }
    }
    return 0;
  } finally {
    await store.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error instanceof ConfigError ? `runledger replay: ${error.message}` : error);
    process.exit(1);
  },
);
