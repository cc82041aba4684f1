/**
 * A chat client's loop against the built service, across a restart: bind a conversation,
 * prompt, let the runtime block and finish, hear both notifications, mark them seen; after
 * a restart the binding, the seen cursor and the notification view are all still there, and
 * the client hears only what is new.
 */
import { makeTempDir, startService, type RunningService } from './support/service-process';

jest.setTimeout(120_000);

const KEY = 'e2e-surface-key-0123456789abcdef';
const USER = 'ana';

async function call(
  service: RunningService,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${service.baseUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${KEY}`,
      'x-runledger-user': USER,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function append(service: RunningService, runId: string, events: object[]): Promise<number> {
  const res = await call(service, 'POST', `/v1/runs/${runId}/events`, { events });
  expect(res.status).toBe(201);
  return res.body.position as number;
}

/** Reads `event: notification` frames from the stream until `done` says enough. */
async function hear(
  service: RunningService,
  done: (items: Record<string, unknown>[]) => boolean,
  act: () => Promise<void>,
): Promise<Record<string, unknown>[]> {
  const controller = new AbortController();
  const res = await fetch(`${service.baseUrl}/v1/notifications/stream`, {
    headers: { authorization: `Bearer ${KEY}`, 'x-runledger-user': USER },
    signal: controller.signal,
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const items: Record<string, unknown>[] = [];
  let buffer = '';
  await act();
  const timer = setTimeout(() => controller.abort(), 20_000);
  try {
    while (!done(items)) {
      const { value, done: ended } = await reader.read();
      if (ended) break;
      buffer += decoder.decode(value, { stream: true });
      for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n')) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = /^data: (.*)$/m.exec(frame);
        if (/^event: notification$/m.test(frame) && data) items.push(JSON.parse(data[1]));
      }
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return items;
}

const approval = (approvalId: string) => ({
  type: 'approval.requested',
  data: { approvalId, toolCallId: `c-${approvalId}`, toolName: 'refund', input: { amount: 20 } },
});

it('binding, seen cursor and notifications survive a restart; a reconnecting client hears only what is new', async () => {
  const dataDir = makeTempDir();
  // The client surface reaches the service through a gateway that names the user (act-as).
  const options = { dataDir, apiKeys: `${KEY}=e2e:append,read,act-as` };
  const first = await startService(options);
  const conversation = { channel: 'telegram', account: 'bot-1', chat: '-100', topic: 'orders' };

  const bound = await call(first, 'PUT', '/v1/bindings', conversation);
  expect(bound.status).toBe(201);
  const threadId = bound.body.threadId as string;
  const prompted = await call(first, 'POST', `/v1/threads/${threadId}/prompt`, {
    text: 'Refund order 1042',
    binding: conversation,
  });
  expect(prompted.status).toBe(201);
  const runId = prompted.body.runId as string;
  await append(first, runId, [approval('ap1')]);
  const finished = await append(first, runId, [
    { type: 'turn.finished', data: { turnId: prompted.body.turnId, status: 'cancelled' } },
    { type: 'run.finished', data: { status: 'cancelled', reason: 'customer withdrew' } },
  ]);

  const page = await call(first, 'GET', `/v1/notifications?user=me&minPosition=${finished}`);
  expect(page.status).toBe(200);
  expect(
    (page.body.notifications as Record<string, unknown>[]).map((n) => [n.kind, n.state]),
  ).toEqual([
    ['blocked', 'blocked'],
    ['finished', 'cancelled'],
  ]);
  expect(
    (await call(first, 'POST', '/v1/notifications/seen', { position: finished })).body,
  ).toEqual({
    seen: finished,
  });
  await first.kill('SIGTERM');

  const second = await startService(options);
  try {
    const again = await call(second, 'PUT', '/v1/bindings', conversation);
    expect(again).toMatchObject({ status: 200, body: { threadId, created: false } });
    const after = await call(second, 'GET', '/v1/notifications?user=me');
    expect(after.body).toMatchObject({ notifications: [], seen: finished });

    const heard = await hear(
      second,
      (items) => items.length >= 1,
      async () => {
        const next = await call(second, 'POST', `/v1/threads/${threadId}/prompt`, {
          text: 'Actually, refund it',
        });
        expect(next.body.runStarted).toBe(true);
        await append(second, next.body.runId as string, [approval('ap2')]);
      },
    );
    expect(heard).toEqual([
      expect.objectContaining({ threadId, kind: 'blocked', approvalId: 'ap2' }),
    ]);
    expect((heard[0].position as number) > finished).toBe(true);
  } finally {
    await second.kill('SIGTERM');
  }
});
