/**
 * How a UI backend or another service uses runledger over HTTP with `@runledger/client`:
 * follows a thread live (Server-Sent Events that resume by themselves), while an agent run
 * is recorded into it up to an approval; resolves the approval, consumes the receipt, then
 * audits the run.
 *
 *   npm start   # then, in another shell:
 *   RUNLEDGER_URL=http://127.0.0.1:3000 RUNLEDGER_KEY="$(cat data/dev-api-key)" \
 *     node -r ts-node/register/transpile-only -r tsconfig-paths/register examples/follow-thread.ts
 */
import { randomUUID } from 'node:crypto';
import { RunledgerClient } from '@runledger/client';

async function main(): Promise<void> {
  const runledger = new RunledgerClient({
    baseUrl: process.env.RUNLEDGER_URL ?? 'http://127.0.0.1:3000',
    apiKey: process.env.RUNLEDGER_KEY ?? '',
    user: 'example-operator',
  });
  const runId = `example-${randomUUID()}`;
  const threadId = `thread-${runId}`;

  // The thread exists once its first run started: follow it from the beginning after that.
  await runledger.append(runId, [
    { type: 'run.started', data: { threadId, agent: 'example', source: 'api', title: 'Deploy' } },
    {
      type: 'approval.requested',
      data: {
        approvalId: 'ap-1',
        toolCallId: 'tc-1',
        toolName: 'deploy',
        input: { env: 'staging' },
      },
    },
  ]);
  const stop = new AbortController();
  const following = (async () => {
    for await (const event of runledger.follow({ threadId }, { from: 0, signal: stop.signal })) {
      console.log(`live: #${event.revision} ${event.type} (position ${event.position})`);
      if (event.type === 'run.finished') stop.abort();
    }
  })();

  const resolution = await runledger.resolveApproval(runId, 'ap-1', 'allow');
  console.log(`resolved: ${resolution.decision}, receipt expires ${resolution.expiresAt}`);
  const consumed = await runledger.consumeReceipt(resolution.receipt, 'deploy', { env: 'staging' });
  console.log(`receipt ${consumed.receiptId} consumed`);
  await runledger.append(runId, [
    {
      type: 'tool.started',
      data: { toolCallId: 'tc-1', toolName: 'deploy', input: { env: 'staging' } },
    },
    { type: 'tool.finished', data: { toolCallId: 'tc-1', output: { ok: true }, failed: false } },
    { type: 'run.finished', data: { status: 'completed' } },
  ]);
  await following;

  const thread = await runledger.thread(threadId);
  console.log(`thread ${threadId}: ${thread.status}, ${thread.messages.length} message(s)`);
  const verdict = await runledger.audit(runId);
  console.log(`audit: ${verdict.count} events, verified=${verdict.verified}`);
}

main().catch((error: unknown) => {
  console.error('follow-thread failed:', error);
  process.exitCode = 1;
});
