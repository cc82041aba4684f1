/**
 * What a client reads or decides on is one moment of the thread, and not an older one than
 * it asked about. A thread view is one moment of the thread. The built service folds appends on its
 * projector's worker thread, which commits through a connection of its own while requests
 * read: a view whose header is read before a commit and whose page after it would show a
 * message the header does not count, past the position it answers (a client that then
 * follows the stream from that position is sent the message again).
 */
import { randomUUID } from 'node:crypto';
import { cleanUpServices, makeTempDir, request, startService } from './support/service-process';
import { messageAdded, RunsClient, runStarted } from './support/runs-client';

jest.setTimeout(120_000);
afterAll(cleanUpServices);

const KEY = 'key-consistent-views-0123456789';
const APPROVER = 'key-consistent-approver-0123456789';
const THREAD = 'consistent-thread';
const RUN = 'consistent-run';
const READS = 2000;

interface View {
  position: number;
  messageCount: number;
  messages: { id: string; metadata: { position: number } }[];
}

it('answers a header and a page of one commit while appends are folded in', async () => {
  const service = await startService({
    dataDir: makeTempDir(),
    apiKeys: `${KEY}=tenant-a:append,read`,
  });
  const client = new RunsClient(service.baseUrl, KEY);
  await client.append(RUN, [runStarted(THREAD)]);

  let appending = true;
  let appended = 0;
  // One writer, one message at a time: message m<k> is the thread's k-th (from 0).
  const writer = (async () => {
    while (appending) {
      await client.append(RUN, [messageAdded(randomUUID(), `m${appended}`, 'x', 'assistant')]);
      appended += 1;
    }
  })();

  const torn: string[] = [];
  try {
    for (let read = 0; read < READS; read += 1) {
      const response = await request(service.baseUrl, `/v1/threads/${THREAD}?limit=5`, {
        key: KEY,
      });
      expect(response.status).toBe(200);
      const view = (await response.json()) as View;
      const newest = view.messages.at(-1);
      if (newest === undefined) continue;
      if (newest.id !== `m${view.messageCount - 1}` || newest.metadata.position > view.position) {
        torn.push(
          `messageCount ${view.messageCount}, position ${view.position}; newest ${newest.id} at ${newest.metadata.position}`,
        );
      }
    }
  } finally {
    appending = false;
    await writer;
  }
  expect(appended).toBeGreaterThan(100);
  expect(torn).toEqual([]);
});

it('decides "yes" on the thread as recorded when it is asked, though its view may lag', async () => {
  const service = await startService({
    dataDir: makeTempDir(),
    apiKeys: `${APPROVER}=tenant-a:append,read,approve`,
  });
  const client = new RunsClient(service.baseUrl, APPROVER);
  const answers: string[] = [];
  for (let round = 0; round < 20; round += 1) {
    const threadId = `asked-${round}`;
    await client.append(`asking-${round}`, [
      runStarted(threadId),
      {
        type: 'approval.requested',
        data: {
          approvalId: `ap-${round}`,
          toolCallId: `call-${round}`,
          toolName: 'deploy',
          input: {},
        },
      },
    ]);
    // No ?minPosition: the approval was recorded before the question, so "yes" is its answer.
    const yes = await request(service.baseUrl, `/v1/threads/${threadId}/approvals/answer`, {
      key: APPROVER,
      body: { decision: 'allow' },
    });
    const body = (await yes.json()) as { approvalId?: string; error?: string };
    answers.push(`${yes.status} ${body.approvalId ?? body.error}`);
  }
  expect(answers).toEqual(Array.from({ length: 20 }, (_, round) => `201 ap-${round}`));
});

it('finds a thread its run.started just created, without ?minPosition, by its view and its stream', async () => {
  const service = await startService({
    dataDir: makeTempDir(),
    apiKeys: `${KEY}=tenant-a:append,read`,
  });
  const client = new RunsClient(service.baseUrl, KEY);
  const answers: string[] = [];
  for (let round = 0; round < 20; round += 1) {
    const threadId = `new-${round}`;
    await client.append(`new-run-${round}`, [runStarted(threadId)]);
    const view = await request(service.baseUrl, `/v1/threads/${threadId}`, { key: KEY });
    answers.push(`view ${view.status}`);
    // EventSource does not retry after a 404: the stream must find it too.
    const stream = new AbortController();
    const opened = await fetch(`${service.baseUrl}/v1/threads/new-${round}/stream`, {
      headers: { authorization: `Bearer ${KEY}` },
      signal: stream.signal,
    });
    answers.push(`stream ${opened.status}`);
    stream.abort();
  }
  expect(answers).toEqual(Array.from({ length: 20 }, () => ['view 200', 'stream 200']).flat());
});
