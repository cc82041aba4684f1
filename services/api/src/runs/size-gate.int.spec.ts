/**
 * Size gating through the real HTTP append path and the real strict validator: the way the
 * original incident hid was a stub that never validated (docs/architecture.md, "Why it exists").
 */
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash, randomUUID } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { canonicalJson } from '@runledger/domain';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';

const EVENT_MAX_BYTES = 16_384;
const BODY_MAX_BYTES = 262_144;

let t: TestApp;
let baseUrl: string;
beforeAll(async () => {
  t = await startTestApp({
    EVENT_MAX_BYTES: String(EVENT_MAX_BYTES),
    BODY_MAX_BYTES: String(BODY_MAX_BYTES),
    REJECTION_MARKER_WINDOW_MS: '1000',
  });
  await t.app.listen(0, '127.0.0.1');
  const { port } = t.app.getHttpServer().address() as AddressInfo;
  baseUrl = `http://127.0.0.1:${port}`;
});
afterAll(async () => {
  await t.close();
});

async function newRun(): Promise<string> {
  const runId = `run-${randomUUID()}`;
  const res = await append(runId, {
    events: [
      { type: 'run.started', data: { threadId: 'thread-gate', agent: 'coder', source: 'api' } },
    ],
  });
  expect(res.status).toBe(201);
  return runId;
}

function append(runId: string, body: unknown) {
  return t
    .http()
    .post(`/v1/runs/${runId}/events`)
    .set(t.auth())
    .send(body as object);
}

async function recorded(runId: string) {
  const res = await t.http().get(`/v1/runs/${runId}/events?limit=1000`).set(t.auth());
  return res.body.events as {
    id: string;
    type: string;
    revision: number;
    position: number;
    data: Record<string, unknown>;
    metadata: Record<string, unknown>;
  }[];
}

function oversizeModelCall(messages = 40, size = 1_000) {
  return {
    type: 'model.call',
    data: {
      callId: 'call-big',
      model: 'gpt-4o',
      messages: Array.from({ length: messages }, (_, i) => ({
        role: i % 2 === 0 ? 'user' : 'assistant',
        content: `message ${i}: ${'é'.repeat(size)}`,
      })),
    },
  };
}

describe('an oversize model.call', () => {
  it('is recorded reduced and answered 413: dispatch refused, with what was recorded and what to reduce', async () => {
    const runId = await newRun();
    const res = await append(runId, { events: [oversizeModelCall()] });
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject({
      error: 'model_call_too_large',
      dispatch: 'refused',
      limitBytes: EVENT_MAX_BYTES,
      recorded: { revision: 1, truncated: true },
    });
    expect(res.body.originalByteLength).toBeGreaterThan(EVENT_MAX_BYTES);
    expect(typeof res.body.advice).toBe('string');
    expect(res.body.advice.length).toBeGreaterThan(10);
    const [, call] = await recorded(runId);
    expect(call.type).toBe('model.call');
    expect(call.position).toBe(res.body.recorded.position);
    expect(call.data.truncation).toMatchObject({
      originalByteLength: res.body.originalByteLength,
      limitBytes: EVENT_MAX_BYTES,
    });
    const messages = call.data.messages as { content: string }[];
    expect(messages.length).toBeGreaterThan(0);
    expect(messages[messages.length - 1].content).toMatch(/^message 39:/);
    const truncation = call.data.truncation as { omittedMessageCount: number };
    expect(truncation.omittedMessageCount + messages.length).toBe(40);
    expect(Buffer.byteLength(JSON.stringify(call))).toBeLessThanOrEqual(EVENT_MAX_BYTES);
  });

  it('is 409 re-sent under its id with another first message (one the gate dropped), and 413 as recorded when re-sent as it was', async () => {
    const runId = await newRun();
    const id = randomUUID();
    const call = oversizeModelCall();
    const first = await append(runId, { events: [{ ...call, id }] });
    expect(first.status).toBe(413);
    const [system, ...rest] = call.data.messages;
    const altered = {
      ...call,
      id,
      // As long as the first in bytes, so the stamp's originalByteLength cannot tell them apart.
      data: {
        ...call.data,
        messages: [{ ...system, content: `${system.content.slice(0, -1)}è` }, ...rest],
      },
    };
    const other = await append(runId, { events: [altered] });
    expect(other.status).toBe(409);
    expect(other.body).toMatchObject({ error: 'event_id_conflict' });
    const again = await append(runId, { events: [{ ...call, id }] });
    expect(again.status).toBe(413);
    expect(again.body.recorded).toEqual(first.body.recorded);
    expect(await recorded(runId)).toHaveLength(2);
  });

  it('in a batch, answers 413 with every event the batch recorded, not only the call', async () => {
    const runId = await newRun();
    const message = (messageId: string) => ({
      type: 'message.added',
      data: { messageId, role: 'user', text: messageId },
    });
    const res = await append(runId, {
      events: [message('before'), oversizeModelCall(), message('after')],
    });
    expect(res.status).toBe(413);
    const stored = await recorded(runId);
    expect(stored.map((e) => e.type)).toEqual([
      'run.started',
      'message.added',
      'model.call',
      'message.added',
    ]);
    const batch = stored.slice(1);
    expect(res.body).toMatchObject({
      error: 'model_call_too_large',
      dispatch: 'refused',
      recorded: { revision: batch[1].revision, position: batch[1].position, truncated: true },
      runId,
      firstRevision: 1,
      lastRevision: 3,
      position: batch[2].position,
      events: batch.map(({ id, revision, position }) => ({ id, revision, position })),
      truncated: [{ id: batch[1].id, originalByteLength: expect.any(Number) }],
    });
  });

  it('never gives a client that treats any non-2xx as "do not dispatch" a 2xx', async () => {
    const runId = await newRun();
    for (const [messages, size] of [
      [2, 20_000],
      [500, 50],
      [1, 100_000],
    ] as const) {
      const res = await append(runId, { events: [oversizeModelCall(messages, size)] });
      expect(res.status).toBe(413);
      expect(res.body.dispatch).toBe('refused');
    }
  });

  it('disables nothing: the next append to the run succeeds, and so does its failure', async () => {
    const runId = await newRun();
    expect((await append(runId, { events: [oversizeModelCall()] })).status).toBe(413);
    const next = await append(runId, {
      events: [
        {
          type: 'message.added',
          data: { messageId: 'm1', role: 'assistant', text: 'retrying smaller' },
        },
      ],
    });
    expect(next.status).toBe(201);
    const failed = await append(runId, {
      events: [
        { type: 'run.finished', data: { status: 'failed', errorText: 'context too large' } },
      ],
    });
    expect(failed.status).toBe(201);
    expect((await recorded(runId)).map((e) => e.type)).toEqual([
      'run.started',
      'model.call',
      'message.added',
      'run.finished',
    ]);
    const audit = await t.http().get(`/v1/runs/${runId}/audit`).set(t.auth());
    expect(audit.body).toMatchObject({ verified: true, count: 4 });
  });

  it('counts every refused call of a batch, and names them all', async () => {
    const runId = await newRun();
    const refusals = async () =>
      Number(
        /runledger_dispatch_refusals_total (\d+)/.exec(
          (await t.http().get('/metrics')).text,
        )?.[1] ?? 0,
      );
    const before = await refusals();
    const res = await append(runId, { events: [oversizeModelCall(), oversizeModelCall()] });
    expect(res.status).toBe(413);
    expect(res.body.message).toContain('(and 1 more model calls, in truncated)');
    expect(res.body.truncated).toHaveLength(2);
    expect(await refusals()).toBe(before + 2);
  });

  it('is counted and shows in replay exactly as recorded, stamp included', async () => {
    const runId = await newRun();
    await append(runId, { events: [oversizeModelCall()] });
    const { lines } = await t.replay(runId);
    const [, call] = await recorded(runId);
    expect(lines[1].data).toEqual(call.data);
    const metrics = await t.http().get('/metrics');
    expect(metrics.text).toMatch(/runledger_truncations_total\{type="model.call"\} [1-9]/);
    expect(metrics.text).toMatch(/runledger_dispatch_refusals_total [1-9]/);
  });
});

describe('other oversize events', () => {
  it('are reduced, stamped, recorded and answered 201 with what was truncated', async () => {
    const runId = await newRun();
    const id = randomUUID();
    const res = await append(runId, {
      events: [
        {
          type: 'tool.started',
          data: { toolCallId: 'c1', toolName: 'read_file', input: { path: 'big.log' } },
        },
        {
          id,
          type: 'tool.finished',
          data: { toolCallId: 'c1', failed: false, output: 'x'.repeat(100_000) },
        },
      ],
    });
    expect(res.status).toBe(201);
    expect(res.body.truncated).toEqual([{ id, originalByteLength: expect.any(Number) }]);
    expect(res.body.truncated[0].originalByteLength).toBeGreaterThan(100_000);
    const [, , finished] = await recorded(runId);
    expect(finished.data.truncation).toMatchObject({ limitBytes: EVENT_MAX_BYTES });
    expect(typeof finished.data.output).toBe('string');
    expect((finished.data.output as string).length).toBeLessThan(EVENT_MAX_BYTES);
  });

  it('are recorded within EVENT_MAX_BYTES with every stamp the server adds, the active turn included', async () => {
    const runId = await newRun();
    // The longest turn id, each character escaped to six bytes in JSON: the active-turn stamp
    // the server adds to every event of the turn is then 1.5 KB.
    const turnId = '\u0001'.repeat(256);
    const res = await append(runId, {
      events: [
        { type: 'turn.started', data: { turnId, source: 'api' } },
        {
          type: 'tool.finished',
          data: { toolCallId: 'c1', failed: false, output: 'x'.repeat(100_000) },
        },
      ],
    });
    expect(res.status).toBe(201);
    const [, , finished] = await recorded(runId);
    expect(finished.metadata.activeTurnId).toBe(turnId);
    const { id, type, data, metadata } = finished;
    expect(Buffer.byteLength(JSON.stringify({ id, type, data, metadata }))).toBeLessThanOrEqual(
      EVENT_MAX_BYTES,
    );
  });

  it('tell a retry from another event under the same id by the data they came with, not by what the gate left', async () => {
    const runId = await newRun();
    const id = randomUUID();
    const message = (text: string) => ({
      id,
      type: 'message.added',
      data: { messageId: 'm1', role: 'user', text },
    });
    const first = await append(runId, { events: [message('a'.repeat(30_000))] });
    expect(first.status).toBe(201);
    const [, stored] = await recorded(runId);
    expect(stored.metadata).toMatchObject({
      originalSha256: createHash('sha256')
        .update(canonicalJson(message('a'.repeat(30_000)).data))
        .digest('hex'),
    });

    // Differs only in the part the gate cut: reduced, it is the same event.
    const other = await append(runId, { events: [message(`${'a'.repeat(29_999)}b`)] });
    expect(other.status).toBe(409);
    expect(other.body).toMatchObject({ error: 'event_id_conflict' });
    const warned = jest.spyOn(Logger.prototype, 'warn');
    try {
      const retry = await append(runId, { events: [message('a'.repeat(30_000))] });
      expect(retry.status).toBe(201);
      expect(retry.body.events).toEqual(first.body.events);
      // The reduction was logged when it was recorded: a retry tells no second one.
      expect(warned).not.toHaveBeenCalledWith(
        expect.objectContaining({ msg: expect.stringContaining('reduced to fit') }),
      );
    } finally {
      warned.mockRestore();
    }
    expect(await recorded(runId)).toHaveLength(2);
  });

  it('answer a retry that differs only in metadata as recorded, whichever send was the one reduced', async () => {
    const runId = await newRun();
    const finish = (id: string, output: string, metadata: Record<string, unknown>) => ({
      id,
      type: 'tool.finished',
      data: { toolCallId: `c-${id}`, failed: false, output },
      metadata,
    });
    // Reduced when first sent: a retry with longer, or no, metadata is the same event.
    const reducedId = randomUUID();
    const first = await append(runId, {
      events: [finish(reducedId, 'o'.repeat(30_000), { trace: 'a' })],
    });
    expect(first.status).toBe(201);
    for (const metadata of [{ trace: 'ab' }, {}]) {
      const retry = await append(runId, {
        events: [finish(reducedId, 'o'.repeat(30_000), metadata)],
      });
      expect({ status: retry.status, events: retry.body.events }).toEqual({
        status: 201,
        events: first.body.events,
      });
      expect(retry.body.truncated).toEqual(first.body.truncated);
    }
    // Whole when first sent, just under the limit: a retry whose metadata takes it over is the
    // same event, recorded whole.
    const wholeId = randomUUID();
    const fits = finish(wholeId, '', {});
    fits.data.output = 'w'.repeat(EVENT_MAX_BYTES - Buffer.byteLength(JSON.stringify(fits)) - 50);
    const whole = await append(runId, { events: [fits] });
    expect(whole.status).toBe(201);
    expect(whole.body.truncated).toBeUndefined();
    const over = await append(runId, {
      events: [{ ...fits, metadata: { note: 'n'.repeat(2000) } }],
    });
    expect({ status: over.status, events: over.body.events }).toEqual({
      status: 201,
      events: whole.body.events,
    });
    expect(over.body.truncated).toBeUndefined();
    expect(await recorded(runId)).toHaveLength(3);
  });

  it('answer a model call reduced when first sent 413 again, even when its retry would fit', async () => {
    const runId = await newRun();
    const id = randomUUID();
    const call = {
      id,
      type: 'model.call',
      data: { callId: 'c1', model: 'gpt-4o', messages: [{ role: 'user', content: 'hello' }] },
    };
    // Its metadata alone takes it over the limit: it is recorded reduced, not to be dispatched.
    const first = await append(runId, {
      events: [{ ...call, metadata: { notes: 'n'.repeat(EVENT_MAX_BYTES) } }],
    });
    expect(first.status).toBe(413);
    const retry = await append(runId, { events: [{ ...call, metadata: {} }] });
    expect(retry.status).toBe(413);
    expect(retry.body).toMatchObject({ dispatch: 'refused', recorded: first.body.recorded });
    expect(await recorded(runId)).toHaveLength(2);
  });

  it('answer a conflict over a large recorded event without reading it once per id sent', async () => {
    const runId = await newRun();
    const id = randomUUID();
    const big = await append(runId, {
      events: [
        {
          id,
          type: 'tool.finished',
          data: { toolCallId: 'c1', failed: false, output: 'o'.repeat(12_000) },
        },
      ],
    });
    expect(big.status).toBe(201);
    const store = t.app.get(EVENT_STORE) as EventStore;
    const reads = jest.spyOn(store, 'readByIds');
    try {
      const same = { id, type: 'message.added', data: { messageId: 'm', role: 'user', text: 'x' } };
      const twice = await append(runId, { events: Array.from({ length: 50 }, () => same) });
      expect(twice.status).toBe(409);
      expect(twice.body.message).toMatch(/appears twice in the batch/);
      const other = await append(runId, { events: [same] });
      expect(other.status).toBe(409);
      const idsRead = reads.mock.calls.reduce((sum, [, ids]) => sum + ids.length, 0);
      expect(idsRead).toBeLessThanOrEqual(1);
    } finally {
      reads.mockRestore();
    }
  });

  it('refuse a truncation stamp a client sent, 400 naming it; nothing is written', async () => {
    const runId = await newRun();
    const stamp = {
      originalByteLength: 99_999,
      limitBytes: 1,
      omittedMessageCount: 3,
      clampedParts: 2,
    };
    const res = await append(runId, {
      events: [
        { type: 'message.added', data: { messageId: 'm1', role: 'user', text: 'fine' } },
        {
          type: 'message.added',
          data: { messageId: 'm2', role: 'user', text: 'hi', truncation: stamp },
        },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      error: 'validation_failed',
      details: [{ index: 1, field: 'data.truncation', rule: 'serverOnly' }],
    });
    expect(await recorded(runId)).toHaveLength(1);
  });

  it("refuse a client's digest of an original: on an event it did not reduce it would look reduced", async () => {
    const runId = await newRun();
    const res = await append(runId, {
      events: [
        {
          type: 'message.added',
          data: { messageId: 'm1', role: 'user', text: 'fine' },
          metadata: { originalSha256: 'f'.repeat(64) },
        },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      error: 'validation_failed',
      details: [{ index: 0, field: 'metadata.originalSha256', rule: 'serverOnly' }],
    });
    expect(await recorded(runId)).toHaveLength(1);
  });

  it('leave an event under the limit byte-for-byte unchanged', async () => {
    const runId = await newRun();
    const data = { messageId: 'm1', role: 'user', text: 'ü'.repeat(1000) };
    const res = await append(runId, { events: [{ type: 'message.added', data }] });
    expect(res.body.truncated).toBeUndefined();
    expect((await recorded(runId))[1].data).toEqual(data);
  });

  it('leave a model.call of exactly EVENT_MAX_BYTES unchanged, and dispatchable', async () => {
    const runId = await newRun();
    const id = randomUUID();
    const call = (content: string) => ({
      id,
      type: 'model.call',
      data: { callId: 'c1', model: 'm', messages: [{ role: 'user', content }] },
    });
    // Canonical JSON of this event with one-byte characters: its length is its size.
    const padding = EVENT_MAX_BYTES - JSON.stringify({ ...call(''), metadata: {} }).length;
    const event = call('x'.repeat(padding));
    const res = await append(runId, { events: [event] });
    expect(`${res.status} ${JSON.stringify(res.body.truncated)}`).toBe('201 undefined');
    expect((await recorded(runId))[1].data).toEqual(event.data);
    const byteOver = await append(runId, {
      events: [{ ...call('x'.repeat(padding + 1)), id: randomUUID() }],
    });
    expect(byteOver.status).toBe(413);
    expect(byteOver.body.originalByteLength).toBe(EVENT_MAX_BYTES + 1);
  });
});

describe('a body over BODY_MAX_BYTES', () => {
  function postDeclaring(path: string, declaredBytes: number, key = KEYS.tenantA) {
    return new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
      const req = httpRequest(`${baseUrl}${path}`, {
        method: 'POST',
        headers: {
          Authorization: `Bearer ${key}`,
          'Content-Type': 'application/json',
          'Content-Length': String(declaredBytes),
        },
      });
      req.on('response', (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
        res.on('end', () => {
          req.destroy();
          resolve({
            status: res.statusCode ?? 0,
            body: JSON.parse(text) as Record<string, unknown>,
          });
        });
      });
      req.on('error', reject);
      // Only the head is sent: the server must answer without reading the declared body.
      req.flushHeaders();
    });
  }

  it('is answered 413 unread, and recorded as append.rejected in a run the caller may append to', async () => {
    const runId = await newRun();
    const res = await postDeclaring(`/v1/runs/${runId}/events`, 40_000_000);
    expect(res.status).toBe(413);
    expect(res.body.error).toBe('body_too_large');
    const events = await recorded(runId);
    expect(events.map((e) => e.type)).toEqual(['run.started', 'append.rejected']);
    expect(events[1].data).toEqual({
      reason: 'body_too_large',
      declaredBytes: 40_000_000,
      limitBytes: BODY_MAX_BYTES,
    });
    const next = await append(runId, {
      events: [
        { type: 'message.added', data: { messageId: 'm', role: 'user', text: 'smaller now' } },
      ],
    });
    expect(next.status).toBe(201);
  });

  it('coalesces a burst of refusals to one run into one marker now and one with a count per window', async () => {
    const runId = await newRun();
    const declared = Array.from({ length: 30 }, (_, i) => 1_000_000 + i);
    for (const bytes of declared) {
      expect((await postDeclaring(`/v1/runs/${runId}/events`, bytes)).status).toBe(413);
    }
    const now = await recorded(runId);
    expect(now.map((e) => e.type)).toEqual(['run.started', 'append.rejected']);
    // When the window closes, the 29 refusals after the first become one marker.
    let events = now;
    for (let i = 0; i < 100 && events.length < 3; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      events = await recorded(runId);
    }
    expect(events.map((e) => e.type)).toEqual([
      'run.started',
      'append.rejected',
      'append.rejected',
    ]);
    expect(events[2].data).toEqual({
      reason: 'body_too_large',
      declaredBytes: 1_000_029,
      limitBytes: BODY_MAX_BYTES,
      count: 29,
    });
    // Appends are not held up by any of it.
    const next = await append(runId, {
      events: [{ type: 'message.added', data: { messageId: 'm', role: 'user', text: 'ok' } }],
    });
    expect(next.status).toBe(201);
  });

  it('records nothing for an unknown run or another tenant, and answers 413 all the same; a read-only key is 403 first', async () => {
    const runId = await newRun();
    expect((await postDeclaring(`/v1/runs/run-${randomUUID()}/events`, 1_000_000)).status).toBe(
      413,
    );
    expect((await postDeclaring(`/v1/runs/${runId}/events`, 1_000_000, KEYS.tenantB)).status).toBe(
      413,
    );
    expect((await postDeclaring(`/v1/runs/${runId}/events`, 1_000_000, KEYS.readerA)).status).toBe(
      403,
    );
    expect((await recorded(runId)).map((e) => e.type)).toEqual(['run.started']);
    const metrics = await t.http().get('/metrics');
    expect(metrics.text).toMatch(/runledger_body_rejections_total\{marker="no_such_run"\} [1-9]/);
  });
});
