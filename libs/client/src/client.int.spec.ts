/**
 * The client against the real api listening on a port: what a consuming service sees,
 * including a lost answer (the retry must not write twice), a dropped stream (the resume
 * must not miss or repeat), and the refusals it must surface rather than retry.
 */
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { startTestApp, KEYS, type TestApp } from '../../../services/api/src/testing/test-app';
import {
  ChainBrokenError,
  RunledgerClient,
  RunledgerError,
  type NewEvent,
  type RecordedEvent,
} from './index';

const started = (threadId: string): NewEvent => ({
  type: 'run.started',
  data: { threadId, agent: 'client-test', source: 'api' },
});
const message = (i: number): NewEvent => ({
  type: 'message.added',
  data: { messageId: `m-${i}`, role: 'user', text: `message ${i}` },
});

async function listen(env: Record<string, string> = {}): Promise<{ app: TestApp; url: string }> {
  const app = await startTestApp(env);
  await app.app.listen(0, '127.0.0.1');
  const { port } = app.app.getHttpServer().address() as AddressInfo;
  return { app, url: `http://127.0.0.1:${port}` };
}

describe('@runledger/client', () => {
  let app: TestApp;
  let url: string;
  beforeAll(async () => ({ app, url } = await listen()));
  afterAll(() => app.close());

  const client = (fetchImpl?: typeof fetch) =>
    new RunledgerClient({
      baseUrl: url,
      apiKey: KEYS.tenantA,
      retry: { baseDelayMs: 10 },
      ...(fetchImpl ? { fetch: fetchImpl } : {}),
    });

  it('retries an append whose answer was lost without writing it twice', async () => {
    let calls = 0;
    const losesFirstAnswer: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (++calls === 1) throw new TypeError('fetch failed: the answer was lost');
      return response;
    };
    const result = await client(losesFirstAnswer).append('retried-run', [
      started('retried-thread'),
      message(1),
    ]);
    expect(calls).toBe(2);
    expect(result).toMatchObject({ firstRevision: 0, lastRevision: 1 });
    const page = await client().readEvents('retried-run');
    expect(page.events.map((e) => e.type)).toEqual(['run.started', 'message.added']);
    expect(page.events.map((e) => e.id)).toEqual(result.events.map((e) => e.id));
  });

  it('surfaces a refusal at once, with its code and details, and does not retry it', async () => {
    let calls = 0;
    const counting: typeof fetch = (input, init) => {
      calls++;
      return fetch(input, init);
    };
    const refused = client(counting).append('bad-run', [
      { type: 'message.added', data: { messageId: 'm', role: 'robot', text: 'x' } },
    ]);
    await expect(refused).rejects.toBeInstanceOf(RunledgerError);
    await expect(refused).rejects.toMatchObject({
      status: 400,
      code: 'validation_failed',
      body: { details: [expect.objectContaining({ field: 'data.role' })] },
    });
    expect(calls).toBe(1);
  });

  it('replays a run as an async iterable, the same events the pages hold', async () => {
    await client().append('replayed-run', [started('replayed-thread'), ...[1, 2, 3].map(message)]);
    const replayed: RecordedEvent[] = [];
    for await (const event of client().replay('replayed-run')) replayed.push(event);
    expect(replayed).toEqual((await client().readEvents('replayed-run')).events);
    expect((await client().audit('replayed-run')).verified).toBe(true);
  });

  it('replays an altered run whole, then throws ChainBrokenError naming the first broken revision', async () => {
    // Given a run whose third event was rewritten in the store's file behind the service
    await client().append('altered-run', [started('altered-thread'), message(1), message(2)]);
    const db = new Database(join(app.config.dataDir, 'runledger.db'));
    db.prepare(
      "UPDATE events SET data = json_set(data, '$.text', 'rewritten') WHERE stream LIKE ? AND revision = 2",
    ).run('%altered-run');
    db.close();

    // When it is replayed, over HTTP and through the client
    const raw = await fetch(`${url}/v1/runs/altered-run/replay`, { headers: app.auth() });
    const lines = (await raw.text())
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    const replayed: RecordedEvent[] = [];
    const replay = (async () => {
      for await (const event of client().replay('altered-run')) replayed.push(event);
    })();

    // Then every event comes first, and the verdict names revision 2 last
    expect(lines.slice(0, 3).map((line) => line.revision)).toEqual([0, 1, 2]);
    expect(lines[3]).toEqual({
      runId: 'altered-run',
      count: 3,
      headHash: null,
      verified: false,
      firstBrokenRevision: 2,
    });
    await expect(replay).rejects.toBeInstanceOf(ChainBrokenError);
    await expect(replay).rejects.toMatchObject({ verdict: { firstBrokenRevision: 2 } });
    expect(replayed.map((event) => event.revision)).toEqual([0, 1, 2]);
  });

  it('walks every page of the thread list', async () => {
    for (let i = 0; i < 5; i++) await client().append(`paged-run-${i}`, [started(`paged-${i}`)]);
    const seen: string[] = [];
    for await (const thread of client().threads({ pageSize: 2 })) seen.push(thread.threadId);
    expect(seen).toEqual(expect.arrayContaining([0, 1, 2, 3, 4].map((i) => `paged-${i}`)));
    expect(new Set(seen).size).toBe(seen.length);
  });

  it('resolves an approval and consumes its receipt exactly once', async () => {
    const { position } = await client().append('approved-run', [
      started('approved-thread'),
      {
        type: 'approval.requested',
        data: {
          approvalId: 'ap-1',
          toolCallId: 'tc-1',
          toolName: 'deploy',
          input: { env: 'prod' },
        },
      },
    ]);
    expect((await client().thread('approved-thread', { minPosition: position })).status).toBe(
      'blocked',
    );
    const resolution = await client().resolveApproval('approved-run', 'ap-1', 'allow');
    expect(resolution.decision).toBe('allow');
    const consumed = await client().consumeReceipt(resolution.receipt, 'deploy', { env: 'prod' });
    expect(consumed).toMatchObject({ consumed: true, approvalId: 'ap-1' });
    await expect(
      client().consumeReceipt(resolution.receipt, 'deploy', { env: 'prod' }),
    ).rejects.toMatchObject({ status: 409, code: 'receipt_already_used' });
  });

  it('follows a thread over SSE and resumes after a dropped connection, missing nothing', async () => {
    await client().append('followed-run', [
      started('followed-thread'),
      ...[1, 2, 3, 4].map(message),
    ]);
    let connections = 0;
    // The first connection drops after its third event; the client must resume from there.
    const dropsFirstStream: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (!String(input).endsWith('/stream') || ++connections > 1) return response;
      let events = 0;
      const cut = response.body!.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            controller.enqueue(chunk);
            events += (new TextDecoder().decode(chunk).match(/\nevent: /g) ?? []).length;
            if (events >= 3) controller.error(new TypeError('terminated'));
          },
        }),
      );
      return new Response(cut, { status: response.status, headers: response.headers });
    };
    const abort = new AbortController();
    const seen: number[] = [];
    const following = (async () => {
      for await (const event of client(dropsFirstStream).follow(
        { threadId: 'followed-thread' },
        { from: 0, signal: abort.signal },
      )) {
        seen.push(event.revision);
        if (seen.length === 5) {
          await client().append('followed-run', [message(5)]);
        }
        if (seen.length === 6) abort.abort();
      }
    })();
    await following;
    expect(connections).toBeGreaterThanOrEqual(2);
    expect(seen).toEqual([0, 1, 2, 3, 4, 5]);
  });
});

describe('@runledger/client under a rate limit', () => {
  it('waits as Retry-After says and then succeeds', async () => {
    const { app, url } = await listen({
      RATE_LIMIT_CALLS: '1',
      RATE_LIMIT_COSTLY: '1',
      RATE_LIMIT_WINDOW_MS: '1000',
    });
    try {
      const limited = new RunledgerClient({ baseUrl: url, apiKey: KEYS.tenantA });
      await limited.listThreads();
      await expect(limited.listThreads()).resolves.toMatchObject({ threads: [] });
    } finally {
      await app.close();
    }
  });
});
