/**
 * Durability across a crash: what the service acknowledged (201) survives `kill -9` mid-write,
 * exactly where it was acknowledged, and the log it restarts from is whole: contiguous
 * revisions, unique increasing positions, every batch all-or-nothing, every hash chain intact.
 */
import { randomUUID } from 'node:crypto';
import {
  makeTempDir,
  startService,
  type Exit,
  type RunningService,
} from './support/service-process';
import {
  RunsClient,
  messageAdded,
  runStarted,
  type AppendResponse,
  type AuditVerdict,
  type EventView,
  type NewEvent,
} from './support/runs-client';

jest.setTimeout(120_000);

const API_KEY = 'e2e-crash-key-0123456789abcdef';
const API_KEYS = `${API_KEY}=e2e:append,read,admin`;
const RUNS = 20;
const WORKERS = 20;
const EVENTS_BEFORE_CRASH = 1000;
/** The crash comes once this many appends were acknowledged in the background phase... */
const ACKS_BEFORE_KILL = 40;
/** ...and at least this many requests are in flight. */
const IN_FLIGHT_AT_KILL = 5;

const runIds = Array.from({ length: RUNS }, (_, i) => `crash-run-${String(i).padStart(2, '0')}`);
/** The run every worker also appends to, concurrently, with expectedRevision left at 'any'. */
const HOT_RUN = runIds[0];

interface Batch {
  worker: number;
  seq: number;
  runId: string;
  events: NewEvent[];
}

interface Ack {
  batch: Batch;
  response: AppendResponse;
}

/**
 * Worker w appends to its own run, every 4th request to the hot run, every 5th a batch of
 * 2-5 events; the pattern is shifted per worker so batches and hot appends overlap at any time.
 */
function nextBatch(worker: number, seq: number, budget: { remaining: number }): Batch | null {
  const wanted = (seq + 2 * worker) % 5 === 4 ? 2 + ((worker + seq) % 4) : 1;
  const size = Math.min(wanted, budget.remaining);
  if (size <= 0) return null;
  budget.remaining -= size;
  const runId = (seq + worker) % 4 === 3 ? HOT_RUN : runIds[worker % RUNS];
  const events = Array.from({ length: size }, (_, i) =>
    messageAdded(
      randomUUID(),
      `w${worker}-s${seq}-e${i}`,
      `worker ${worker} request ${seq} event ${i} of ${size}`,
      i % 2 === 0 ? 'user' : 'assistant',
    ),
  );
  return { worker, seq, runId, events };
}

function checkAck(batch: Batch, response: AppendResponse): void {
  const where = `ack of worker ${batch.worker} request ${batch.seq} to ${batch.runId}`;
  expect({ where, runId: response.runId, count: response.events.length }).toEqual({
    where,
    runId: batch.runId,
    count: batch.events.length,
  });
  response.events.forEach((event, i) => {
    expect({ where, id: event.id, revision: event.revision }).toEqual({
      where,
      id: batch.events[i].id,
      revision: response.firstRevision + i,
    });
    if (i > 0) expect(event.position).toBeGreaterThan(response.events[i - 1].position);
  });
  expect(response.lastRevision).toBe(response.firstRevision + batch.events.length - 1);
  expect(response.position).toBe(response.events[response.events.length - 1].position);
}

describe('crash recovery: kill -9 while appends are in flight', () => {
  let dataDir: string;
  let client: RunsClient;
  const acked: Ack[] = [];
  /** Sent during the crash phase without an answer: each may or may not be recorded. */
  const unanswered: Batch[] = [];
  const ackedPerWorker = new Map<number, Ack[]>();
  let killExit: Exit;
  let inFlightAtKill = 0;
  let recorded = new Map<string, EventView[]>();

  function record(ack: Ack): void {
    acked.push(ack);
    const list = ackedPerWorker.get(ack.batch.worker) ?? [];
    list.push(ack);
    ackedPerWorker.set(ack.batch.worker, list);
  }

  beforeAll(async () => {
    dataDir = makeTempDir();
    let service: RunningService = await startService({ dataDir, apiKeys: API_KEYS });
    client = new RunsClient(service.baseUrl, API_KEY);

    // 20 runs, each opened with run.started.
    await Promise.all(
      runIds.map(async (runId, i) => {
        const batch: Batch = {
          worker: -1 - i,
          seq: 0,
          runId,
          events: [runStarted(`thread-${runId}`, randomUUID())],
        };
        const response = await client.append(runId, batch.events, 'no_stream');
        checkAck(batch, response);
        record({ batch, response });
      }),
    );

    // 1,000 message.added events from 20 concurrent workers, one request at a time each.
    const budget = { remaining: EVENTS_BEFORE_CRASH };
    await Promise.all(
      Array.from({ length: WORKERS }, async (_, worker) => {
        for (let seq = 0; ; seq += 1) {
          const batch = nextBatch(worker, seq, budget);
          if (!batch) return;
          const response = await client.append(batch.runId, batch.events);
          checkAck(batch, response);
          record({ batch, response });
        }
      }),
    );
    expect(acked.flatMap((a) => a.batch.events)).toHaveLength(RUNS + EVENTS_BEFORE_CRASH);

    // The same workers keep appending; SIGKILL lands while requests are in flight.
    let inFlight = 0;
    let backgroundAcks = 0;
    let killing: Promise<Exit> | null = null;
    const killIfDue = () => {
      if (!killing && backgroundAcks >= ACKS_BEFORE_KILL && inFlight >= IN_FLIGHT_AT_KILL) {
        inFlightAtKill = inFlight;
        killing = service.kill('SIGKILL');
      }
    };
    const unlimited = { remaining: Number.POSITIVE_INFINITY };
    const failures: unknown[] = [];
    await Promise.all(
      Array.from({ length: WORKERS }, async (_, worker) => {
        for (let seq = 1000; ; seq += 1) {
          const batch = nextBatch(worker, seq, unlimited)!;
          inFlight += 1;
          killIfDue();
          let response: AppendResponse;
          try {
            response = await client.append(batch.runId, batch.events);
          } catch (error) {
            // Once the kill is sent, failures are the crash; before it, they are a bug.
            if (!killing) failures.push(error);
            unanswered.push(batch);
            return;
          } finally {
            inFlight -= 1;
          }
          checkAck(batch, response);
          record({ batch, response });
          backgroundAcks += 1;
          killIfDue();
        }
      }),
    );
    expect(failures).toEqual([]);
    expect(killing).not.toBeNull();
    killExit = await killing!;

    service = await startService({ dataDir, apiKeys: API_KEYS });
    client = new RunsClient(service.baseUrl, API_KEY);
    recorded = new Map(
      await Promise.all(runIds.map(async (id) => [id, await client.readAll(id)] as const)),
    );
  });

  it('killed the service with SIGKILL while appends were in flight', () => {
    expect(killExit.signal).toBe('SIGKILL');
    expect(inFlightAtKill).toBeGreaterThanOrEqual(IN_FLIGHT_AT_KILL);
    expect(unanswered.length).toBeGreaterThan(0);
  });

  it('has every acknowledged event at its acknowledged revision and position, as sent', () => {
    const byId = new Map([...recorded.values()].flat().map((e) => [e.id, e]));
    const missing: string[] = [];
    const moved: unknown[] = [];
    for (const { batch, response } of acked) {
      response.events.forEach((ack, i) => {
        const event = byId.get(ack.id);
        if (!event) {
          missing.push(`${batch.runId} revision ${ack.revision} id ${ack.id}`);
          return;
        }
        const sent = batch.events[i];
        const actual = {
          run: recorded.get(batch.runId)?.includes(event) ? batch.runId : 'another run',
          revision: event.revision,
          position: event.position,
          type: event.type,
          data: event.data,
        };
        const expected = {
          run: batch.runId,
          revision: ack.revision,
          position: ack.position,
          type: sent.type,
          data: sent.data,
        };
        if (JSON.stringify(actual) !== JSON.stringify(expected))
          moved.push({ id: ack.id, expected, actual });
      });
    }
    // Counts plus the first few, so a failure stays readable.
    expect({ missing: missing.length, moved: moved.length }).toEqual({ missing: 0, moved: 0 });
    expect({ missing: missing.slice(0, 10), moved: moved.slice(0, 10) }).toEqual({
      missing: [],
      moved: [],
    });
  });

  it('numbers every run 0..n-1 with strictly increasing positions, starting with run.started', () => {
    for (const runId of runIds) {
      const events = recorded.get(runId)!;
      expect(events.map((e) => e.revision)).toEqual(events.map((_, i) => i));
      expect(events[0]).toMatchObject({
        type: 'run.started',
        data: { threadId: `thread-${runId}` },
      });
      for (let i = 1; i < events.length; i += 1)
        expect(events[i].position).toBeGreaterThan(events[i - 1].position);
    }
  });

  it('gives every event of the log its own position, in the order appends were acknowledged', () => {
    const positions = [...recorded.values()].flat().map((e) => e.position);
    expect(new Set(positions).size).toBe(positions.length);
    // A worker sends its next request only after the previous answer, so its acks only ascend.
    for (const [worker, acks] of ackedPerWorker) {
      const sequence = acks.map((a) => a.response.position);
      const sorted = [...sequence].sort((a, b) => a - b);
      expect({ worker, sequence }).toEqual({ worker, sequence: sorted });
    }
  });

  it('recorded only events that were sent, and each unanswered batch whole or not at all', () => {
    const batches = [...acked.map((a) => a.batch), ...unanswered];
    const sent = new Set(batches.flatMap((batch) => batch.events.map((e) => e.id)));
    const strangers = [...recorded.values()].flat().filter((e) => !sent.has(e.id));
    expect(strangers).toEqual([]);
    for (const batch of unanswered) {
      const events = recorded.get(batch.runId)!;
      const found = batch.events.map((sentEvent) => events.find((e) => e.id === sentEvent.id));
      const present = found.filter((e) => e !== undefined);
      expect({ batch: batch.seq, present: present.length }).toEqual({
        batch: batch.seq,
        present: present.length === 0 ? 0 : batch.events.length,
      });
      present.forEach((event, i) => {
        if (i > 0) expect(event!.revision).toBe(present[i - 1]!.revision + 1);
      });
    }
  });

  it('reads the same log through replay as through the paged events route', async () => {
    for (const runId of runIds) {
      const replayed = await client.replay(runId);
      expect(replayed).toEqual(recorded.get(runId));
    }
  });

  it("verifies every run's hash chain over all its events", async () => {
    const verdicts = await Promise.all(runIds.map((runId) => client.audit(runId)));
    expect(verdicts).toEqual(
      runIds.map((runId) => {
        const events = recorded.get(runId)!;
        return {
          runId,
          count: events.length,
          headHash: events[events.length - 1].metadata.hash as string,
          verified: true,
          firstBrokenRevision: null,
        } satisfies AuditVerdict;
      }),
    );
  });

  it('answers a retried unanswered batch with its recorded original, or records it now', async () => {
    for (const batch of unanswered) {
      const before = recorded
        .get(batch.runId)!
        .filter((e) => batch.events.some((sent) => sent.id === e.id));
      const response = await client.append(batch.runId, batch.events);
      expect(response.events.map((e) => e.id)).toEqual(batch.events.map((e) => e.id));
      if (before.length > 0) {
        expect(response.events).toEqual(
          before.map(({ id, revision, position }) => ({ id, revision, position })),
        );
      }
    }
    for (const runId of runIds) {
      const events = await client.readAll(runId);
      expect(events.map((e) => e.revision)).toEqual(events.map((_, i) => i));
      recorded.set(runId, events);
      expect(await client.audit(runId)).toMatchObject({ count: events.length, verified: true });
    }
  });

  it('continues every run after the restart: next revision, a later position, the chain intact', async () => {
    const lastPosition = Math.max(...[...recorded.values()].flat().map((e) => e.position));
    for (const runId of runIds) {
      const before = recorded.get(runId)!;
      const head = before[before.length - 1];
      const id = randomUUID();
      const response = await client.append(
        runId,
        [messageAdded(id, `after-restart-${runId}`, 'appended after the restart', 'assistant')],
        head.revision,
      );
      expect(response).toMatchObject({
        firstRevision: head.revision + 1,
        lastRevision: head.revision + 1,
      });
      expect(response.position).toBeGreaterThan(lastPosition);
      const [appended] = await client.readAll(runId, 1000).then((events) => events.slice(-1));
      expect(appended).toMatchObject({ id, revision: head.revision + 1 });
      expect(appended.metadata.prevHash).toBe(head.metadata.hash);
      expect(await client.audit(runId)).toEqual({
        runId,
        count: before.length + 1,
        headHash: appended.metadata.hash,
        verified: true,
        firstBrokenRevision: null,
      });
    }
  });
});
