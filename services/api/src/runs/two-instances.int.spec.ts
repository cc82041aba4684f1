/**
 * Two api instances on one store, as two replicas would be: each caches the heads of the
 * runs it appended to, and neither may act on a head the other has moved.
 */
import { randomUUID } from 'node:crypto';
import { startTestApp, type TestApp } from '../testing/test-app';

let a: TestApp;
let b: TestApp;
beforeAll(async () => {
  a = await startTestApp();
  b = await startTestApp({ DATA_DIR: a.config.dataDir });
});
afterAll(async () => {
  await b.close();
  await a.close();
});

const message = (text: string) => ({
  type: 'message.added',
  data: { messageId: randomUUID(), role: 'user', text },
});

function append(app: TestApp, runId: string, body: object) {
  return app.http().post(`/v1/runs/${runId}/events`).set(app.auth()).send(body);
}

describe('appends to one run through two instances', () => {
  it('honour the stored head, not a head one instance remembers', async () => {
    const runId = `run-${randomUUID()}`;
    const started = {
      type: 'run.started',
      data: { threadId: 'thread-two', agent: 'coder', source: 'api' },
    };
    expect((await append(a, runId, { events: [started, message('a1')] })).status).toBe(201);
    expect((await append(b, runId, { events: [message('b1')] })).body.firstRevision).toBe(2);

    const expected = await append(a, runId, { expectedRevision: 2, events: [message('a2')] });
    expect(expected.status).toBe(201);
    expect(expected.body.firstRevision).toBe(3);

    expect((await append(b, runId, { events: [message('b2')] })).body.firstRevision).toBe(4);
    const any = await append(a, runId, { events: [message('a3')] });
    expect(any.body.firstRevision).toBe(5);

    const stale = await append(a, runId, { expectedRevision: 4, events: [message('late')] });
    expect(stale.status).toBe(409);
    expect(stale.body.details).toMatchObject({ actualRevision: 5 });

    const finished = { type: 'run.finished', data: { status: 'completed' } };
    expect((await append(b, runId, { events: [finished] })).status).toBe(201);
    const afterEnd = await append(a, runId, { events: [message('after the end')] });
    expect(afterEnd.status).toBe(409);
    expect(afterEnd.body.error).toBe('run_finished');

    const audit = await a.http().get(`/v1/runs/${runId}/audit`).set(a.auth());
    expect(audit.body).toMatchObject({ verified: true, count: 7, firstBrokenRevision: null });
  });
});
