import Database from 'better-sqlite3';
import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { ChainVerifier, EVENT_TYPES, SERVER_ONLY_TYPES, SliceClock } from '@runledger/domain';
import { EVENT_DATA_EXAMPLES } from '../../../../libs/domain/src/testing/event-fixtures';
import { loopTurns } from '../../../../libs/domain/src/testing/loop-turns';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

const started = (threadId = 'thread-1') => ({
  type: 'run.started',
  data: { threadId, agent: 'coder', source: 'api', title: 'Fix the build' },
});
const message = (text: string, id?: string) => ({
  ...(id ? { id } : {}),
  type: 'message.added',
  data: { messageId: randomUUID(), role: 'user', text },
});

const turnStarted = (turnId: string) => ({
  type: 'turn.started',
  data: { turnId, source: 'typed' },
});

function newRunId(): string {
  return `run-${randomUUID()}`;
}

async function append(runId: string, body: unknown, key = KEYS.tenantA) {
  return t
    .http()
    .post(`/v1/runs/${runId}/events`)
    .set(t.auth(key))
    .send(body as object);
}

async function recorded(runId: string, key = KEYS.tenantA) {
  const res = await t.http().get(`/v1/runs/${runId}/events?limit=1000`).set(t.auth(key));
  return res.status === 404
    ? []
    : (res.body.events as {
        id: string;
        type: string;
        revision: number;
        position: number;
        data: unknown;
        metadata: Record<string, unknown>;
      }[]);
}

describe('POST /v1/runs/:runId/events', () => {
  it('records a batch and answers its revisions and positions', async () => {
    const runId = newRunId();
    const res = await append(runId, { events: [started(), message('hello')] });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ runId, firstRevision: 0, lastRevision: 1 });
    expect(res.body.events).toHaveLength(2);
    expect(res.body.events[1].position).toBeGreaterThan(res.body.events[0].position);
    expect(res.body.position).toBe(res.body.events[1].position);
    const events = await recorded(runId);
    expect(events.map((e) => e.type)).toEqual(['run.started', 'message.added']);
    expect(events[1]).toMatchObject({
      metadata: { tenantId: 'tenant-a', runId, threadId: 'thread-1' },
    });
  });

  it('stamps tenant, run and thread itself, whatever the client put in metadata', async () => {
    const runId = newRunId();
    await append(runId, {
      events: [{ ...started(), metadata: { tenantId: 'tenant-b', source: 'cli' } }],
    });
    const [event] = await recorded(runId);
    expect(event).toMatchObject({ metadata: { tenantId: 'tenant-a', runId, source: 'cli' } });
  });

  it('refuses a run whose first event is not run.started, writing nothing', async () => {
    const runId = newRunId();
    const res = await append(runId, { events: [message('too early')] });
    expect(res.status).toBe(404);
    expect(res.body.error).toBe('run_not_found');
    const read = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
    expect(read.status).toBe(404);
  });

  it('refuses a second run.started with 409', async () => {
    const runId = newRunId();
    await append(runId, { events: [started()] });
    const res = await append(runId, { events: [started()] });
    expect(res.status).toBe(409);
    expect(res.body.error).toBe('run_already_started');
    expect(await recorded(runId)).toHaveLength(1);
  });

  it('keeps at most one active turn per run: a second turn.started is a 409 naming the active turn', async () => {
    const runId = newRunId();
    await append(runId, { events: [started(), turnStarted('t1'), message('hi')] });
    const second = await append(runId, { events: [message('more'), turnStarted('t2')] });
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({
      error: 'turn_already_active',
      activeTurnId: 't1',
      details: { index: 1 },
    });
    expect(await recorded(runId)).toHaveLength(3);
    const next = await append(runId, {
      events: [
        { type: 'turn.finished', data: { turnId: 't1', status: 'completed' } },
        turnStarted('t2'),
      ],
    });
    expect(next.status).toBe(201);
    const events = await recorded(runId);
    // The server's stamp: the run's active turn once each event is recorded.
    expect(events.map((e) => e.metadata.activeTurnId)).toEqual([
      undefined,
      't1',
      't1',
      undefined,
      't2',
    ]);
  });

  it('refuses every append after run.finished with 409', async () => {
    const runId = newRunId();
    await append(runId, {
      events: [started(), { type: 'run.finished', data: { status: 'completed' } }],
    });
    const res = await append(runId, { events: [message('late')] });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error: 'run_finished' });
    const inBatch = await append(newRunId(), {
      events: [
        started(),
        { type: 'run.finished', data: { status: 'failed', errorText: 'x' } },
        message('late'),
      ],
    });
    expect(inBatch.status).toBe(409);
  });

  it('rejects a batch with one invalid event whole, naming each problem, and writes nothing', async () => {
    const runId = newRunId();
    await append(runId, { events: [started()] });
    const res = await append(runId, {
      events: [
        message('fine'),
        { type: 'transcript.added', data: { utteranceId: 'u1', role: 'user', text: '   ' } },
        { type: 'tool.finished', data: { toolCallId: 'c1', failed: true, extra: 1 } },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('validation_failed');
    const fields = (res.body.details as { index: number; field: string }[]).map(
      (d) => `${d.index}:${d.field}`,
    );
    expect(fields).toEqual(
      expect.arrayContaining(['1:data.text', '2:data.extra', '2:data.errorText']),
    );
    expect(await recorded(runId)).toHaveLength(1);
  });

  it('answers an unknown type with 400 and a server-only type with 403', async () => {
    const runId = newRunId();
    await append(runId, { events: [started()] });
    const unknown = await append(runId, { events: [{ type: 'tool.exploded', data: {} }] });
    expect(unknown.status).toBe(400);
    expect(unknown.body.details[0]).toMatchObject({ field: 'type', rule: 'isEventType' });
    for (const type of SERVER_ONLY_TYPES) {
      const res = await append(runId, { events: [{ type, data: EVENT_DATA_EXAMPLES[type] }] });
      expect(res.status).toBe(403);
      expect(res.body.error).toBe('server_only_event_type');
      // Not the client's to write, valid or not: the refusal does not depend on the data.
      const invalid = await append(runId, { events: [{ type, data: {} }] });
      expect(invalid.status).toBe(403);
      expect(invalid.body.error).toBe('server_only_event_type');
    }
    expect(await recorded(runId)).toHaveLength(1);
  });

  it('keeps non-object tool input under { raw }', async () => {
    const runId = newRunId();
    const res = await append(runId, {
      events: [
        started(),
        { type: 'tool.started', data: { toolCallId: 'c1', toolName: 'search', input: '{"q":' } },
      ],
    });
    expect(res.status).toBe(201);
    const events = await recorded(runId);
    expect(events[1].data).toEqual({
      toolCallId: 'c1',
      toolName: 'search',
      input: { raw: '{"q":' },
    });
  });

  it('answers malformed JSON and a non-object body with a JSON 400, writing nothing', async () => {
    const runId = newRunId();
    const malformed = await t
      .http()
      .post(`/v1/runs/${runId}/events`)
      .set(t.auth())
      .set('Content-Type', 'application/json')
      .send('{"events": [');
    expect(malformed.status).toBe(400);
    expect(malformed.body.error).toBe('malformed_body');
    const notObject = await append(runId, [started()]);
    expect(notObject.status).toBe(400);
    expect((await t.http().get(`/v1/runs/${runId}/events`).set(t.auth())).status).toBe(404);
  });

  it('answers a re-sent batch with its original revisions and writes nothing, even after the run ended', async () => {
    const runId = newRunId();
    const batch = { events: [{ ...started(), id: randomUUID() }, message('one', randomUUID())] };
    const first = await append(runId, batch);
    const finish = {
      events: [{ id: randomUUID(), type: 'run.finished', data: { status: 'completed' } }],
    };
    const finished = await append(runId, finish);
    const again = await append(runId, batch);
    const finishedAgain = await append(runId, finish);
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(finishedAgain.body).toEqual(finished.body);
    expect(await recorded(runId)).toHaveLength(3);
  });

  it('reads an id re-sent in capitals as the same event: one record, its original answer', async () => {
    const runId = newRunId();
    const id = randomUUID();
    const sent = message('one', id);
    const first = await append(runId, { events: [started(), sent] });
    const again = await append(runId, { events: [{ ...sent, id: id.toUpperCase() }] });
    expect(again.status).toBe(201);
    expect(again.body.events).toEqual([first.body.events[1]]);
    expect((await recorded(runId)).map((e) => e.id)).toEqual([first.body.events[0].id, id]);
  });

  it('answers a reused id with different content with 409', async () => {
    const runId = newRunId();
    const id = randomUUID();
    await append(runId, { events: [started(), message('original', id)] });
    const res = await append(runId, { events: [message('altered', id)] });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error: 'event_id_conflict', details: { eventId: id } });
    // The client's own words: its event id and what is wrong, not the store's stream name.
    expect(res.body.message).toBe(`event id ${id} was recorded with different content`);
    const res2 = await append(runId, { expectedRevision: 0, events: [message('altered', id)] });
    expect(res2.status).toBe(409);
    expect(res2.body.error).toBe('event_id_conflict');
    expect((await recorded(runId)).map((e) => (e.data as { text?: string }).text)).toEqual([
      undefined,
      'original',
    ]);
  });

  it('checks expectedRevision and answers a mismatch with the actual revision', async () => {
    const runId = newRunId();
    const first = await append(runId, { expectedRevision: 'no_stream', events: [started()] });
    expect(first.status).toBe(201);
    const stale = await append(runId, { expectedRevision: 5, events: [message('x')] });
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({
      error: 'wrong_expected_revision',
      expectedRevision: 5,
      actualRevision: 0,
      details: { expectedRevision: 5, actualRevision: 0 },
    });
    const ok = await append(runId, { expectedRevision: 0, events: [message('x')] });
    expect(ok.body.firstRevision).toBe(1);
    const existsOnNew = await append(newRunId(), {
      expectedRevision: 'stream_exists',
      events: [started()],
    });
    expect(existsOnNew.status).toBe(409);
    const badValue = await append(runId, { expectedRevision: -1, events: [message('x')] });
    expect(badValue.status).toBe(400);
  });

  it('answers a mismatch before any run rule the batch would also break: the client retries on the revision', async () => {
    const runId = newRunId();
    await append(runId, { events: [started(), turnStarted('turn-1')] });
    // Racing to create the run, the losers learn it exists at revision 1, not only that it started.
    const created = await append(runId, { expectedRevision: 'no_stream', events: [started()] });
    expect(created.status).toBe(409);
    expect(created.body).toMatchObject({ error: 'wrong_expected_revision', actualRevision: 1 });
    const stale = await append(runId, { expectedRevision: 0, events: [turnStarted('turn-2')] });
    expect(stale.body).toMatchObject({ error: 'wrong_expected_revision', actualRevision: 1 });
    expect(await recorded(runId)).toHaveLength(2);
  });

  it('serializes concurrent appends to one run into a contiguous, verified chain', async () => {
    const runId = newRunId();
    await append(runId, { events: [started()] });
    const results = await Promise.all(
      Array.from({ length: 25 }, (_, i) => append(runId, { events: [message(`m${i}`)] })),
    );
    expect(results.map((r) => r.status)).toEqual(results.map(() => 201));
    const revisions = results.map((r) => r.body.firstRevision as number).sort((a, b) => a - b);
    expect(revisions).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    const audit = await t.http().get(`/v1/runs/${runId}/audit`).set(t.auth());
    expect(audit.body).toMatchObject({ verified: true, count: 26, firstBrokenRevision: null });
  });
});

describe('drift: every member of the catalogue through the real append path', () => {
  it('has a fixture for every type', () => {
    expect(Object.keys(EVENT_DATA_EXAMPLES).sort()).toEqual([...EVENT_TYPES].sort());
  });

  it.each(EVENT_TYPES.filter((type) => type !== 'run.started'))('%s', async (type) => {
    const runId = newRunId();
    await append(runId, { events: [started()] });
    const res = await append(runId, { events: [{ type, data: EVENT_DATA_EXAMPLES[type] }] });
    expect(res.status).toBe(SERVER_ONLY_TYPES.has(type) ? 403 : 201);
    const events = await recorded(runId);
    expect(events).toHaveLength(SERVER_ONLY_TYPES.has(type) ? 1 : 2);
    if (!SERVER_ONLY_TYPES.has(type))
      expect(events[1]).toMatchObject({ type, data: EVENT_DATA_EXAMPLES[type] });
  });
});

describe('reading, replay and audit', () => {
  let runId: string;
  beforeAll(async () => {
    runId = newRunId();
    await append(runId, {
      events: [started(), ...Array.from({ length: 9 }, (_, i) => message(`m${i}`))],
    });
  });

  it('reads a page from a revision, with the next revision to ask for', async () => {
    const res = await t.http().get(`/v1/runs/${runId}/events?fromRevision=3&limit=4`).set(t.auth());
    expect(res.status).toBe(200);
    expect(res.body.events.map((e: { revision: number }) => e.revision)).toEqual([3, 4, 5, 6]);
    expect(res.body.nextRevision).toBe(7);
    const last = await t.http().get(`/v1/runs/${runId}/events?fromRevision=7`).set(t.auth());
    expect(last.body.nextRevision).toBeNull();
    const bad = await t.http().get(`/v1/runs/${runId}/events?limit=abc`).set(t.auth());
    expect(bad.status).toBe(400);
  });

  it('replays the run as NDJSON, one recorded event a line, in order', async () => {
    const { status, type, lines } = await t.replay(runId);
    expect(status).toBe(200);
    expect(type).toMatch(/^application\/x-ndjson/);
    expect(lines).toHaveLength(10);
    expect(lines.map((l) => l.revision)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (const line of lines) {
      expect(Object.keys(line).sort()).toEqual([
        'data',
        'id',
        'metadata',
        'position',
        'recordedAt',
        'revision',
        'type',
      ]);
    }
  });

  it('audits the chain', async () => {
    const res = await t.http().get(`/v1/runs/${runId}/audit`).set(t.auth());
    expect(res.body).toMatchObject({ runId, count: 10, verified: true, firstBrokenRevision: null });
    expect(res.body.headHash).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('a run whose log holds an unreadable event (a damaged row)', () => {
  /** A run of run.started and five messages whose row at `revision` no longer parses. */
  async function damagedRun(revision: number): Promise<string> {
    const runId = newRunId();
    const res = await append(runId, {
      events: [started(), ...Array.from({ length: 5 }, (_, i) => message(`m${i}`))],
    });
    expect(res.status).toBe(201);
    const db = new Database(join(t.config.dataDir, 'runledger.db'));
    db.prepare("UPDATE events SET data = '{broken' WHERE stream LIKE ? AND revision = ?").run(
      `%${runId}`,
      revision,
    );
    db.close();
    return runId;
  }

  const placeholder = (revision: number) => ({
    revision,
    type: 'message.added',
    data: null,
    metadata: {},
    unreadable: expect.stringContaining('does not parse'),
  });

  let runId: string;
  beforeAll(async () => {
    runId = await damagedRun(2);
  });

  it('replays every event, the unreadable one in its place, and names the break', async () => {
    const { status, lines } = await t.replay(runId);
    expect(status).toBe(200);
    expect(lines.map((l) => l.revision)).toEqual([0, 1, 2, 3, 4, 5, undefined]);
    expect(lines[2]).toMatchObject(placeholder(2));
    expect(lines[6]).toEqual({
      runId,
      count: 6,
      headHash: null,
      verified: false,
      firstBrokenRevision: 2,
    });
  });

  it('shows it in its place on a page of events, logged with its ids, and the page goes on', async () => {
    const errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      for (const from of [0, 2]) {
        const res = await t
          .http()
          .get(`/v1/runs/${runId}/events?fromRevision=${from}&limit=3`)
          .set(t.auth());
        expect(res.status).toBe(200);
        const events = res.body.events as { revision: number }[];
        expect(events.map((e) => e.revision)).toEqual([from, from + 1, from + 2]);
        expect(events[2 - from]).toMatchObject(placeholder(2));
        expect(res.body.nextRevision).toBe(from + 3);
      }
      expect(errors).toHaveBeenCalledWith(
        expect.objectContaining({ msg: 'a recorded event is unreadable', runId, revision: 2 }),
      );
    } finally {
      errors.mockRestore();
    }
  });

  it('answers an append that must read it as the head 500 event_unreadable, naming it, logged with the request id', async () => {
    const damaged = await damagedRun(5);
    const [, , , , , last] = await recorded(damaged);
    const errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      // A revision other than the one this process remembers makes it read the stored head.
      const res = await append(damaged, { expectedRevision: 9, events: [message('late')] });
      expect(res.status).toBe(500);
      expect(res.body).toEqual({
        error: 'event_unreadable',
        message: expect.stringContaining(`event ${last.id} (revision 5)`),
        details: { eventId: last.id, revision: 5, position: last.position },
        eventId: last.id,
        revision: 5,
        position: last.position,
      });
      const requestId = res.headers['x-request-id'];
      expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
      expect(errors).toHaveBeenCalledWith(
        expect.objectContaining({
          msg: 'a recorded event is unreadable',
          requestId,
          tenantId: 'tenant-a',
          error: expect.stringContaining('is unreadable'),
        }),
      );
      expect(await recorded(damaged)).toHaveLength(6);
    } finally {
      errors.mockRestore();
    }
  });

  it('audits it as broken at that revision', async () => {
    const res = await t.http().get(`/v1/runs/${runId}/audit`).set(t.auth());
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ runId, count: 6, verified: false, firstBrokenRevision: 2 });
  });

  it('is read, replayed and audited when it is the last event, and no other tenant finds the run', async () => {
    const damaged = await damagedRun(5);
    const errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      const page = await t.http().get(`/v1/runs/${damaged}/events`).set(t.auth());
      expect(page.status).toBe(200);
      expect(page.body.events).toHaveLength(6);
      expect(page.body.events[5]).toMatchObject(placeholder(5));
      expect(page.body.nextRevision).toBeNull();

      const { status, lines } = await t.replay(damaged);
      expect(status).toBe(200);
      expect(lines[5]).toMatchObject(placeholder(5));

      const audit = await t.http().get(`/v1/runs/${damaged}/audit`).set(t.auth());
      expect(audit.status).toBe(200);
      expect(audit.body).toMatchObject({ count: 6, verified: false, firstBrokenRevision: 5 });

      const foreign = await t.http().get(`/v1/runs/${damaged}/events`).set(t.auth(KEYS.tenantB));
      expect(foreign.status).toBe(404);
    } finally {
      errors.mockRestore();
    }
  });
});

describe('a store that cannot write (a full disk)', () => {
  it('answers 503 store_unavailable, logged, readiness says why, and both recover once it writes', async () => {
    const runId = newRunId();
    expect((await append(runId, { events: [started()] })).status).toBe(201);
    // Every insert fails as on a full disk: the commit is refused, the group rolled back.
    const db = new Database(join(t.config.dataDir, 'runledger.db'));
    db.exec(
      "CREATE TRIGGER full_disk BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
    );
    const errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      const refused = await append(runId, { events: [message('lost?')] });
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toBe('1');
      expect(refused.body).toEqual({
        error: 'store_unavailable',
        message:
          'the event store cannot write now; nothing of the request was written: retry in a moment',
      });
      expect(errors).toHaveBeenCalledWith(
        expect.objectContaining({
          msg: 'the event store cannot write',
          requestId: refused.headers['x-request-id'],
          tenantId: 'tenant-a',
          error: expect.stringContaining('database or disk is full'),
        }),
      );
      const ready = await t.http().get('/health/ready');
      expect(ready.status).toBe(503);
      expect(ready.body.checks.store).toContain('database or disk is full');
    } finally {
      db.exec('DROP TRIGGER full_disk');
      db.close();
      errors.mockRestore();
    }
    expect((await append(runId, { events: [message('again')] })).status).toBe(201);
    expect((await t.http().get('/health/ready')).body.checks.store).toBe('ok');
    expect((await recorded(runId)).map((e) => e.type)).toEqual(['run.started', 'message.added']);
  });
});

describe('a run of large events', () => {
  // Twenty events of ~900 KB: more than one page's budget of event JSON (16 MiB), and of the
  // replay's and audit's (1 MiB).
  const LARGE = 20;
  let runId: string;
  beforeAll(async () => {
    runId = newRunId();
    const text = (i: number) => `${i}`.padEnd(900_000, 'x');
    const res = await append(runId, {
      events: [started(), ...Array.from({ length: LARGE }, (_, i) => message(text(i)))],
    });
    expect(res.status).toBe(201);
  });

  it('is read in pages bounded in size, not only in count; every event once, in order', async () => {
    const seen: number[] = [];
    for (let from: number | null = 0; from !== null;) {
      const res = await t
        .http()
        .get(`/v1/runs/${runId}/events?fromRevision=${from}&limit=1000`)
        .set(t.auth());
      expect(res.status).toBe(200);
      const revisions = (res.body.events as { revision: number }[]).map((e) => e.revision);
      // The budget, not the limit, ended this page: about 16 MiB of events after its first.
      expect(revisions.length).toBeLessThanOrEqual(20);
      seen.push(...revisions);
      from = res.body.nextRevision as number | null;
    }
    expect(seen).toEqual(Array.from({ length: LARGE + 1 }, (_, i) => i));
  });

  it('still answers a whole `limit` of the usual events in one page (300 of 16 KB: 4.8 MB)', async () => {
    const usual = newRunId();
    const text = (i: number) => `${i}`.padEnd(16_000, 'y');
    expect((await append(usual, { events: [started()] })).status).toBe(201);
    for (let batch = 0; batch < 3; batch += 1) {
      const events = Array.from({ length: 100 }, (_, i) => message(text(batch * 100 + i)));
      expect((await append(usual, { events })).status).toBe(201);
    }
    const res = await t.http().get(`/v1/runs/${usual}/events?limit=301`).set(t.auth());
    expect(res.body.events).toHaveLength(301);
    expect(res.body.nextRevision).toBeNull();
  });

  it('is audited and replayed giving the loop a turn between events once a slice is over', async () => {
    // Every slice is over at once, as when hashing a page of large events takes longer than a
    // slice: the verification must then give the loop a turn after each event.
    const due = jest.spyOn(SliceClock.prototype, 'due').mockReturnValue(true);
    const add = ChainVerifier.prototype.add;
    const { turns, mark } = loopTurns();
    const verified = jest.spyOn(ChainVerifier.prototype, 'add').mockImplementation(function (
      this: ChainVerifier,
      event,
    ) {
      mark();
      add.call(this, event);
    });
    try {
      const audit = await t.http().get(`/v1/runs/${runId}/audit`).set(t.auth());
      expect(audit.body).toMatchObject({ count: LARGE + 1, verified: true });
      const { lines } = await t.replay(runId);
      expect(lines).toHaveLength(LARGE + 1);
    } finally {
      due.mockRestore();
      verified.mockRestore();
    }
    expect(turns).toHaveLength(2 * (LARGE + 1));
    expect(turns.filter((turn) => !turn)).toEqual([]);
  });

  it('is replayed and audited whole, though its pages come short', async () => {
    const { status, lines } = await t.replay(runId);
    expect(status).toBe(200);
    expect(lines.map((l) => l.revision)).toEqual(Array.from({ length: LARGE + 1 }, (_, i) => i));
    const audit = await t.http().get(`/v1/runs/${runId}/audit`).set(t.auth());
    expect(audit.body).toMatchObject({ runId, count: LARGE + 1, verified: true });
  });
});

describe('access', () => {
  let runId: string;
  beforeAll(async () => {
    runId = newRunId();
    await append(runId, { events: [started('secret-thread'), message('private words')] });
  });

  it.each(['events', 'replay', 'audit'])(
    "answers another tenant's GET %s with 404 and none of its data",
    async (path) => {
      const res = await t.http().get(`/v1/runs/${runId}/${path}`).set(t.auth(KEYS.tenantB));
      expect(res.status).toBe(404);
      expect(JSON.stringify(res.body)).not.toContain('private');
      expect(res.body).toEqual({ error: 'run_not_found', message: `run ${runId} not found` });
    },
  );

  it("treats another tenant's run id as free: its own run, never a write into this one", async () => {
    const res = await append(runId, { events: [message('intruder')] }, KEYS.tenantB);
    expect(res.status).toBe(404);
    const own = await append(runId, { events: [started()] }, KEYS.tenantB);
    expect(own.status).toBe(201);
    expect(own.body.firstRevision).toBe(0);
    expect(await recorded(runId)).toHaveLength(2);
  });

  it('needs a known key, and the scope the route declares', async () => {
    expect((await t.http().get(`/v1/runs/${runId}/events`)).status).toBe(401);
    expect(
      (await t.http().get(`/v1/runs/${runId}/events`).set(t.auth('not-a-key-at-all-123'))).status,
    ).toBe(401);
    const readOnly = await append(runId, { events: [message('x')] }, KEYS.readerA);
    expect(readOnly.status).toBe(403);
    expect(readOnly.body.error).toBe('forbidden');
    expect((await t.http().get(`/v1/runs/${runId}/events`).set(t.auth(KEYS.readerA))).status).toBe(
      200,
    );
  });

  it('refuses metadata.user naming someone other than the user the caller acts as, writing nothing', async () => {
    const asBob = { ...started(), metadata: { user: 'Bob' } };
    // A key that is Ana's, and a gateway acting as Ana, may not record Bob as the thread's user.
    for (const [key, user] of [
      [KEYS.anaA, undefined],
      [KEYS.gatewayA, 'Ana'],
    ] as const) {
      const id = newRunId();
      const res = await t
        .http()
        .post(`/v1/runs/${id}/events`)
        .set({ ...t.auth(key), ...(user ? { 'X-Runledger-User': user } : {}) })
        .send({ events: [asBob] });
      expect(res.status).toBe(403);
      expect(res.body).toMatchObject({
        error: 'forbidden',
        details: [{ index: 0, field: 'metadata.user', rule: 'actingUser' }],
      });
      expect(await recorded(id)).toEqual([]);
    }
    // Ana naming herself is recorded; a runtime acting as itself starts a run for anyone.
    const own = newRunId();
    const ana = await append(
      own,
      { events: [{ ...started(), metadata: { user: 'Ana' } }] },
      KEYS.anaA,
    );
    expect(ana.status).toBe(201);
    const forBob = await append(newRunId(), { events: [asBob] });
    expect(forBob.status).toBe(201);
  });

  it('refuses run ids outside the allowed alphabet', async () => {
    const res = await append('..%2F..%2Fetc', { events: [started()] });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_run_id');
  });
});

describe('operations', () => {
  it('serves health, metrics and the OpenAPI document without a key', async () => {
    expect((await t.http().get('/health/live')).status).toBe(200);
    expect((await t.http().get('/health/ready')).body).toMatchObject({ status: 'ready' });
    const metrics = await t.http().get('/metrics');
    expect(metrics.text).toContain(
      'runledger_appended_events_total{type="run.started",outcome="recorded"}',
    );
    expect(metrics.text).toContain('runledger_rejections_total{reason="validation_failed"}');
    expect(metrics.text).toContain('runledger_http_request_duration_seconds_bucket');
    const docs = await t.http().get('/docs-json');
    expect(docs.status).toBe(200);
    expect(Object.keys(docs.body.paths)).toContain('/v1/runs/{runId}/events');
    const resolve = docs.body.paths['/v1/runs/{runId}/approvals/{approvalId}/resolve'].post;
    expect(resolve.parameters).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ in: 'header', name: 'X-Runledger-User', required: false }),
      ]),
    );
  });
});
