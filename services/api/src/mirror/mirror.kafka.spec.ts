/**
 * The Kafka mirror inside the api, against the real local broker (test/kafka): events
 * appended over HTTP reach the topic exactly once after dedup and in order per run, in either
 * wire format; a broker outage is retried, visible in metrics and readiness, and loses
 * nothing; a poison event is parked, listed, and re-driven while the events after it flow.
 */
import { randomUUID } from 'node:crypto';
import { connect, createServer } from 'node:net';
import { Logger } from '@nestjs/common';
import { runStream } from '@runledger/domain';
import { Metrics } from '@runledger/observability';
import { TOPIC_MAX_MESSAGE_BYTES } from '@runledger/mirror';
import {
  broker,
  describeKafka,
  inParallel,
  kafkaBrokers,
  kafkaClient,
  RunEventCollector,
  uniqueTopic,
  waitForTopic,
} from '../../../../test/kafka/kafka-test-support';
import { freePort } from '../../../../test/support/service-process';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';

jest.setTimeout(240_000);

function mirrorEnv(topic: string, more: Record<string, string> = {}): Record<string, string> {
  return {
    KAFKA_BROKERS: kafkaBrokers().join(','),
    KAFKA_TOPIC: topic,
    KAFKA_PARTITIONS: '4',
    MIRROR_STALL_MS: '1000',
    MIRROR_RETRY_MAX_MS: '500',
    MIRROR_WATCHDOG_MS: '2000',
    ...more,
  };
}

const started = (threadId: string) => ({
  type: 'run.started',
  data: { threadId, agent: 'coder', source: 'api', title: 'Mirror me' },
});
const message = (text: string) => ({
  type: 'message.added',
  data: { messageId: randomUUID(), role: 'user', text },
});

async function append(t: TestApp, runId: string, events: unknown[]): Promise<void> {
  const res = await t
    .http()
    .post(`/v1/runs/${runId}/events`)
    .set(t.auth())
    .send({ events } as object);
  if (res.status !== 201) throw new Error(`append to ${runId}: ${res.status} ${res.text}`);
}

/** The parked list once it holds `count` events, or as it is when `timeoutMs` has passed. */
async function parkedSoon(t: TestApp, count: number, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const listed = await t.http().get('/v1/admin/mirror/parked').set(t.auth());
    const parked = (listed.body as { parked?: unknown[] }).parked ?? [];
    if (listed.status !== 200 || parked.length >= count || Date.now() > deadline) return listed;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** `runs` runs of `perRun` events each (run.started first), appended concurrently in batches of 10. */
async function appendRuns(t: TestApp, runIds: string[], perRun: number, fresh = true) {
  await inParallel(runIds, 50, async (runId) => {
    for (let sent = 0; sent < perRun; sent += 10) {
      const batch = Array.from({ length: Math.min(10, perRun - sent) }, (_, i) =>
        fresh && sent + i === 0 ? started(`thread-${runId}`) : message(`${runId} #${sent + i}`),
      );
      await append(t, runId, batch);
    }
  });
}

async function metric(t: TestApp, name: string): Promise<number> {
  const found = await t.app.get(Metrics).registry.getSingleMetric(name)?.get();
  return found?.values[0]?.value ?? 0;
}

describeKafka('the Kafka mirror (real broker)', () => {
  it('publishes 10,000 events of 200 concurrent runs: each once after dedup, in revision order per run', async () => {
    const topic = uniqueTopic('ten-k');
    const t = await startTestApp(mirrorEnv(topic));
    const consumer = new RunEventCollector(topic);
    try {
      const runIds = Array.from({ length: 200 }, () => `run-${randomUUID()}`);
      const appended = appendRuns(t, runIds, 50);
      await appended;
      await consumer.start();
      await consumer.waitForUnique(10_000, 120_000);

      expect(consumer.unique.size).toBe(10_000);
      expect(consumer.byRun.size).toBe(200);
      expect(consumer.runsOutOfOrder()).toEqual([]);
      for (const runId of runIds) expect(consumer.byRun.get(runId)).toHaveLength(50);
      const first = consumer.unique.values().next().value!;
      expect(first.key).toBe(first.event.run);
      expect(first.headers).toMatchObject({
        'event-id': first.event.id,
        'event-type': first.event.type,
        'tenant-id': 'tenant-a',
        position: String(first.event.position),
        'content-type': 'application/x-protobuf; messageType=runledger.v1.RunEvent',
      });
      expect(first.event.hash).toMatch(/^[0-9a-f]{64}$/);
      // One run's events share a partition: that is what keeps them in order.
      for (const runId of runIds.slice(0, 20)) {
        const partitions = consumer.all.filter((r) => r.key === runId).map((r) => r.partition);
        expect(new Set(partitions).size).toBe(1);
      }
      expect(await metric(t, 'runledger_mirror_published_events_total')).toBeGreaterThanOrEqual(
        10_000,
      );
      expect(await metric(t, 'runledger_mirror_parked_events_total')).toBe(0);
    } finally {
      await consumer.stop();
      await t.close();
    }
  });

  it('publishes JSON values with MIRROR_FORMAT=json, the data inline and the truncation stamp kept', async () => {
    const topic = uniqueTopic('json');
    const t = await startTestApp(
      mirrorEnv(topic, { MIRROR_FORMAT: 'json', EVENT_MAX_BYTES: '4096' }),
    );
    const consumer = new RunEventCollector(topic);
    try {
      const runId = `run-${randomUUID()}`;
      await append(t, runId, [
        started('thread-json'),
        message('héllo 👋'),
        {
          type: 'tool.finished',
          data: { toolCallId: 'c1', failed: false, output: 'x'.repeat(10_000) },
        },
      ]);
      await consumer.start();
      await consumer.waitForUnique(3, 60_000);
      const received = [...consumer.unique.values()];
      expect(received.map((r) => r.headers['content-type'])).toEqual(
        Array(3).fill('application/json'),
      );
      const [first, second, third] = received.map((r) => r.event);
      expect(first).toMatchObject({ run: runId, thread: 'thread-json', revision: 0 });
      expect(second.data).toMatchObject({ role: 'user', text: 'héllo 👋' });
      expect(second.truncation).toBeUndefined();
      expect(third.truncation).toMatchObject({ limitBytes: 4096 });
      expect(third.truncation!.originalByteLength).toBeGreaterThan(10_000);
      expect(JSON.stringify(third.data).length).toBeLessThan(4096);
      expect(third.prevHash).toBe(second.hash);
    } finally {
      await consumer.stop();
      await t.close();
    }
  });

  it('rides out a broker outage: retries, shows it in metrics and readiness, then delivers everything in order', async () => {
    const topic = uniqueTopic('outage');
    const t = await startTestApp(mirrorEnv(topic));
    let consumer = new RunEventCollector(topic);
    let brokerDown = false;
    try {
      const runIds = Array.from({ length: 40 }, () => `run-${randomUUID()}`);
      await appendRuns(t, runIds, 10);
      await consumer.start();
      await consumer.waitForUnique(400, 60_000);
      await consumer.stop();

      // Mid-stream: 1,000 more events (25 to each run) are being appended and published when
      // the broker goes away, and 200 more (5 to each run) come while it is away.
      const published = () => metric(t, 'runledger_mirror_published_events_total');
      const publishedBefore = await published();
      const appending = appendRuns(t, runIds, 25, false);
      const waitingSince = Date.now();
      while ((await published()) < publishedBefore + 100 && Date.now() - waitingSince < 30_000)
        await new Promise((r) => setTimeout(r, 5));
      broker('stop');
      brokerDown = true;
      await appending;
      await appendRuns(t, runIds, 5, false);
      const deadline = Date.now() + 30_000;
      let ready = await t.http().get('/health/ready');
      while (ready.status === 200 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        ready = await t.http().get('/health/ready');
      }
      expect(ready.status).toBe(503);
      expect(ready.body.checks.mirror).toMatch(/publishing has failed/);
      expect(await metric(t, 'runledger_mirror_publish_failures_total')).toBeGreaterThan(0);
      expect(await metric(t, 'runledger_mirror_publishing_ok')).toBe(0);
      // The lag gauges refresh every second.
      await new Promise((r) => setTimeout(r, 1500));
      expect(await metric(t, 'runledger_mirror_lag_events')).toBeGreaterThan(0);
      expect(await metric(t, 'runledger_mirror_lag_seconds')).toBeGreaterThan(0);

      broker('start');
      brokerDown = false;
      consumer = new RunEventCollector(topic);
      await consumer.start();
      await consumer.waitForUnique(1600, 120_000);
      expect(consumer.runsOutOfOrder()).toEqual([]);
      for (const runId of runIds) expect(consumer.byRun.get(runId)).toHaveLength(40);
      const readyAgain = await t.http().get('/health/ready');
      expect(readyAgain.status).toBe(200);
      expect(readyAgain.body.checks.mirror).toBe('ok');
      expect(await metric(t, 'runledger_mirror_publishing_ok')).toBe(1);
      expect(await metric(t, 'runledger_mirror_publish_retries_total')).toBeGreaterThan(0);
    } finally {
      if (brokerDown) broker('start');
      await consumer.stop();
      await t.close();
    }
  });

  it('is not ready while Kafka cannot be reached, though nothing waits to be published, and is once it can', async () => {
    // KAFKA_BROKERS names a port nothing listens on, until a proxy to the broker opens there.
    const port = await freePort();
    const [brokerHost, brokerPort] = kafkaBrokers()[0].split(':');
    const t = await startTestApp(
      mirrorEnv(uniqueTopic('unreachable'), { KAFKA_BROKERS: `127.0.0.1:${port}` }),
    );
    const proxy = createServer((socket) => {
      const upstream = connect(Number(brokerPort), brokerHost);
      socket.pipe(upstream).pipe(socket);
      upstream.on('error', () => socket.destroy());
      socket.on('error', () => upstream.destroy());
    });
    try {
      const readiness = async (status: number) => {
        const deadline = Date.now() + 30_000;
        for (;;) {
          const ready = await t.http().get('/health/ready');
          if (ready.status === status || Date.now() > deadline) return ready;
          await new Promise((r) => setTimeout(r, 100));
        }
      };
      const down = await readiness(503);
      expect(down.status).toBe(503);
      expect(down.body.checks.mirror).toMatch(/cannot connect to Kafka/);

      await new Promise<void>((resolve) => proxy.listen(port, '127.0.0.1', resolve));
      const up = await readiness(200);
      expect(up.status).toBe(200);
      expect(up.body.checks.mirror).toBe('ok');
    } finally {
      proxy.close();
      await t.close();
    }
  });

  it('creates its topic again when it is deleted under it, and delivers what came meanwhile', async () => {
    const topic = uniqueTopic('deleted');
    const t = await startTestApp(mirrorEnv(topic));
    let consumer = new RunEventCollector(topic);
    try {
      const runId = `run-${randomUUID()}`;
      await append(t, runId, [started(`thread-${runId}`)]);
      await consumer.start();
      await consumer.waitForUnique(1, 60_000);
      await consumer.stop();

      const admin = kafkaClient().admin();
      await admin.connect();
      await admin.deleteTopics({ topics: [topic] });
      await admin.disconnect();
      await append(t, runId, [message('after the topic was deleted')]);

      // Recreated by the mirror (it is not there while the deletion completes).
      await waitForTopic(topic, 60_000);
      consumer = new RunEventCollector(topic);
      await consumer.start();
      await consumer.waitForUnique(1, 60_000);
      expect([...consumer.unique.values()].map((r) => r.event.type)).toContain('message.added');
      expect((await t.http().get('/health/ready')).status).toBe(200);
    } finally {
      await consumer.stop();
      await t.close();
    }
  });

  it('makes its topic take an event at EVENT_MAX_BYTES, however large that is set', async () => {
    // Given EVENT_MAX_BYTES of 6 MiB, over the 4 MiB record limit topics are made with by default
    const topic = uniqueTopic('large');
    const eventMaxBytes = 6 * 1024 * 1024;
    const t = await startTestApp(
      mirrorEnv(topic, {
        EVENT_MAX_BYTES: String(eventMaxBytes),
        SSE_MAX_BUFFER_BYTES: String(2 * eventMaxBytes),
      }),
    );
    const consumer = new RunEventCollector(topic);
    const admin = kafkaClient().admin();
    await admin.connect();
    try {
      // When a 5 MB message is appended
      const runId = `run-${randomUUID()}`;
      await append(t, runId, [started('thread-large'), message('x'.repeat(5_000_000))]);

      // Then the topic was made for it, and it arrives rather than being parked
      await consumer.start();
      await consumer.waitForUnique(2, 60_000);
      const described = await admin.describeConfigs({
        includeSynonyms: false,
        resources: [{ type: 2, name: topic, configNames: ['max.message.bytes'] }],
      });
      expect(described.resources[0].configEntries[0].configValue).toBe(
        String(eventMaxBytes + 1024 * 1024),
      );
      expect((await t.http().get('/v1/admin/mirror/parked').set(t.auth())).body.parked).toEqual([]);
    } finally {
      await consumer.stop();
      await admin.disconnect();
      await t.close();
    }
  });

  it('parks an event the broker refuses, lets the events after it through, lists it and re-drives it', async () => {
    const topic = uniqueTopic('poison');
    // The topic exists already with a small record limit: a large event is refused as it is.
    const admin = kafkaClient().admin();
    await admin.connect();
    await admin.createTopics({
      waitForLeaders: true,
      topics: [
        {
          topic,
          numPartitions: 2,
          configEntries: [{ name: 'max.message.bytes', value: String(64 * 1024) }],
        },
      ],
    });
    const warnings = jest.spyOn(Logger.prototype, 'warn');
    const t = await startTestApp(mirrorEnv(topic));
    const consumer = new RunEventCollector(topic);
    try {
      const runId = `run-${randomUUID()}`;
      await append(t, runId, [started('thread-poison'), message('before')]);
      await append(t, runId, [message('x'.repeat(100 * 1024))]);
      await append(t, runId, [message('after 1'), message('after 2')]);
      await consumer.start();
      await consumer.waitForUnique(4, 60_000);
      // The topic's small limit was said at start, before any event was refused by it.
      expect(warnings).toHaveBeenCalledWith(
        expect.objectContaining({
          msg: expect.stringContaining(
            `topic ${topic} takes records of at most ${64 * 1024} bytes`,
          ),
        }),
      );
      expect(consumer.byRun.get(runId)?.map((e) => e.revision)).toEqual([0, 1, 3, 4]);

      // The park is committed with the checkpoint once the whole batch is through, so the
      // consumer can see the events after it a moment before the list does.
      const listed = await parkedSoon(t, 1, 10_000);
      expect(listed.status).toBe(200);
      expect(listed.body.parked).toHaveLength(1);
      // The whole list in one page: no next page is offered.
      expect(listed.body.nextAfter).toBeNull();
      const [parked] = listed.body.parked as { eventId: string; reason: string }[];
      expect(parked).toMatchObject({ stream: runStream('tenant-a', runId), type: 'message.added' });
      expect(parked.reason).toMatch(/MESSAGE_TOO_LARGE|RECORD_LIST_TOO_LARGE/);
      expect(await metric(t, 'runledger_mirror_parked_events_total')).toBe(1);
      expect(await metric(t, 'runledger_mirror_parked_events')).toBe(1);
      // A key without admin is refused; another tenant's admin neither lists nor re-drives it.
      expect((await t.http().get('/v1/admin/mirror/parked').set(t.auth(KEYS.tenantB))).status).toBe(
        403,
      );
      expect(
        (
          await t
            .http()
            .post(`/v1/admin/mirror/parked/${parked.eventId}/retry`)
            .set(t.auth(KEYS.readerA))
        ).status,
      ).toBe(403);
      const foreign = await t.http().get('/v1/admin/mirror/parked').set(t.auth(KEYS.adminB));
      expect(`${foreign.status} ${JSON.stringify(foreign.body.parked)}`).toBe('200 []');
      const foreignRetry = await t
        .http()
        .post(`/v1/admin/mirror/parked/${parked.eventId}/retry`)
        .set(t.auth(KEYS.adminB));
      expect(foreignRetry.status).toBe(404);
      expect(foreignRetry.body).toMatchObject({ error: 'parked_event_not_found' });

      // Still refused: the retry says so and the event stays parked.
      const refused = await t
        .http()
        .post(`/v1/admin/mirror/parked/${parked.eventId}/retry`)
        .set(t.auth());
      expect(refused.status).toBe(409);
      expect(refused.body).toMatchObject({ error: 'still_parked' });

      // The operator raises the topic's limit; the re-drive publishes it.
      await admin.alterConfigs({
        validateOnly: false,
        resources: [
          {
            type: 2, // TOPIC
            name: topic,
            configEntries: [{ name: 'max.message.bytes', value: String(TOPIC_MAX_MESSAGE_BYTES) }],
          },
        ],
      });
      const retried = await t
        .http()
        .post(`/v1/admin/mirror/parked/${parked.eventId}/retry`)
        .set(t.auth());
      expect(`${retried.status} ${retried.text}`).toMatch(/^200 /);
      expect(retried.body.event.redrivenAt).toEqual(expect.any(String));
      await consumer.waitForUnique(5, 30_000);
      expect(consumer.unique.get(parked.eventId)?.event.revision).toBe(2);
      const after = await t.http().get('/v1/admin/mirror/parked').set(t.auth());
      expect(after.body.parked).toEqual([]);
      expect(await metric(t, 'runledger_mirror_parked_events')).toBe(0);
      // Asked again, the re-drive answers the same record and publishes (and counts) nothing.
      const published = await metric(t, 'runledger_mirror_published_events_total');
      const retries = await metric(t, 'runledger_mirror_publish_retries_total');
      const again = await t
        .http()
        .post(`/v1/admin/mirror/parked/${parked.eventId}/retry`)
        .set(t.auth());
      expect(again.status).toBe(200);
      expect(again.body.event).toEqual(retried.body.event);
      expect(await metric(t, 'runledger_mirror_published_events_total')).toBe(published);
      expect(await metric(t, 'runledger_mirror_publish_retries_total')).toBe(retries);
    } finally {
      warnings.mockRestore();
      await consumer.stop();
      await admin.disconnect();
      await t.close();
    }
  });
});
