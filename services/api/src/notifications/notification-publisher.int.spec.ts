/**
 * The Kafka publisher's rules on the real client-surface store, fed by the real app, with a
 * scripted sink standing in for the broker (the mirror's follower tests do the same; the
 * broker itself is exercised by the *.kafka.spec.ts tier).
 */
import { randomUUID } from 'node:crypto';
import type { EventSink, MirrorMessage } from '@runledger/mirror';
import { SurfaceService } from '../surface/surface.service';
import { startTestApp, type TestApp } from '../testing/test-app';
import { NotificationPublisher, type PublisherObserver } from './notification-publisher';

class ScriptedSink implements EventSink {
  readonly failures: Error[] = [];
  readonly acknowledged: MirrorMessage[] = [];

  publish(messages: readonly MirrorMessage[]): Promise<void> {
    const failure = this.failures.shift();
    if (failure) return Promise.reject(failure);
    this.acknowledged.push(...messages);
    return Promise.resolve();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

const quiet: PublisherObserver & { failures: number } = {
  failures: 0,
  published: () => undefined,
  failed() {
    this.failures += 1;
  },
};

async function until(done: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

it('publishes every item in order with its kind as a header, retrying a failing broker, never again after acknowledgement', async () => {
  const threadId = `t-${randomUUID()}`;
  const runId = `run-${randomUUID()}`;
  const post = (events: object[]) =>
    t.http().post(`/v1/runs/${runId}/events`).set(t.auth()).send({ events });
  await post([{ type: 'run.started', data: { threadId, agent: 'a', source: 'api' } }]);
  await post([
    {
      type: 'approval.requested',
      data: { approvalId: 'ap1', toolCallId: 'c1', toolName: 'deploy', input: {} },
    },
  ]);
  const done = await post([{ type: 'run.finished', data: { status: 'completed' } }]);
  const surface = t.app.get(SurfaceService);
  await surface.waitFor(done.body.position as number);

  const sink = new ScriptedSink();
  sink.failures.push(new Error('broker unreachable'), new Error('broker unreachable'));
  const publisher = new NotificationPublisher(surface.store, sink, quiet, {
    topic: 'notifications',
    retryInitialMs: 5,
  });
  publisher.start();
  await until(() => publisher.current() === done.body.position);
  await publisher.stop();
  expect(quiet.failures).toBe(2);
  const mine = sink.acknowledged.filter((m) => m.key === `tenant-a:${threadId}`);
  expect(mine.map((m) => m.headers.notification)).toEqual(['blocked', 'finished']);
  expect(mine[1].headers).toMatchObject({
    'tenant-id': 'tenant-a',
    'thread-id': threadId,
    position: String(done.body.position),
  });
  expect(JSON.parse(mine[1].value.toString('utf8'))).toMatchObject({
    tenantId: 'tenant-a',
    threadId,
    runId,
    kind: 'finished',
    state: 'completed',
  });
  const positions = sink.acknowledged.map((m) => m.position);
  expect(positions).toEqual([...positions].sort((a, b) => a - b));

  const again = new ScriptedSink();
  const resumed = new NotificationPublisher(surface.store, again, quiet, {
    topic: 'notifications',
  });
  resumed.start();
  resumed.poke();
  await new Promise((resolve) => setTimeout(resolve, 50));
  await resumed.stop();
  expect(again.acknowledged).toEqual([]);
});

it('keeps how far it published per topic: a new topic gets every item, the first goes on where it stood', async () => {
  const threadId = `t-${randomUUID()}`;
  const runId = `run-${randomUUID()}`;
  const post = (events: object[]) =>
    t.http().post(`/v1/runs/${runId}/events`).set(t.auth()).send({ events });
  await post([{ type: 'run.started', data: { threadId, agent: 'a', source: 'api' } }]);
  const done = await post([{ type: 'run.finished', data: { status: 'completed' } }]);
  const surface = t.app.get(SurfaceService);
  await surface.waitFor(done.body.position as number);
  const publishTo = async (topic: string): Promise<MirrorMessage[]> => {
    const sink = new ScriptedSink();
    const publisher = new NotificationPublisher(surface.store, sink, quiet, { topic });
    publisher.start();
    await until(() => publisher.current() === done.body.position);
    await publisher.stop();
    return sink.acknowledged;
  };
  const first = await publishTo(`first-${randomUUID()}`);
  expect(first.some((m) => m.key === `tenant-a:${threadId}`)).toBe(true);
  const other = await publishTo(`other-${randomUUID()}`);
  expect(other.map((m) => m.position)).toEqual(first.map((m) => m.position));
});
