/**
 * What a request may cost before and while its body is read, through the listening app:
 * the key is checked before the body (401 with the body unsent), limits by scope, the
 * declared length, chunked bodies, the JSON's shape, capped problem lists and the number
 * of large bodies read at once. Each refusal writes nothing.
 */
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { TextDecoder } from 'node:util';
import { Logger } from '@nestjs/common';
import { loopTurns } from '../../../../libs/domain/src/testing/loop-turns';
import { KEYS, startTestApp, type TestApp } from '../testing/test-app';
import { ERROR_BODY_MAX_BYTES } from './api-error';

async function listening(env: Record<string, string> = {}): Promise<TestApp> {
  const app = await startTestApp(env);
  await app.app.listen(0, '127.0.0.1');
  return app;
}

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Sends `head` (request line and headers) and then `body`, on a socket of its own, and
 * resolves with the first answer: a server that answers before the body is complete is
 * seen doing so, since the rest of a declared body is never sent.
 */
function rawRequest(
  t: TestApp,
  head: string,
  body = '',
  { halfClose = false } = {},
): Promise<RawAnswer> {
  const { port } = t.app.getHttpServer().address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let received = '';
    const done = () => {
      const end = received.indexOf('\r\n\r\n');
      if (end < 0) return false;
      const [statusLine, ...lines] = received.slice(0, end).split('\r\n');
      const headers = Object.fromEntries(
        lines.map((line) => {
          const colon = line.indexOf(':');
          return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()];
        }),
      );
      const length = Number(headers['content-length'] ?? NaN);
      const rest = received.slice(end + 4);
      if (!Number.isFinite(length) || Buffer.byteLength(rest) < length) return false;
      socket.destroy();
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: rest });
      return true;
    };
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
      done();
    });
    socket.on('error', (error) => {
      if (!done()) reject(error);
    });
    socket.on('close', () => {
      if (!done()) reject(new Error(`connection closed after ${JSON.stringify(received)}`));
    });
    socket.write(`${head}\r\n\r\n`);
    if (body !== '') socket.write(body);
    if (halfClose) socket.end();
  });
}

function post(path: string, headers: Record<string, string | number>): string {
  return [
    `POST ${path} HTTP/1.1`,
    'Host: 127.0.0.1',
    'Content-Type: application/json',
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ].join('\r\n');
}

/** An append of RUN_STARTED to `runId` with tenant A's key, as raw text: head and body. */
function rawAppend(runId: string): string {
  return `${post(`/v1/runs/${runId}/events`, {
    Authorization: `Bearer ${KEYS.tenantA}`,
    'Content-Length': Buffer.byteLength(RUN_STARTED),
  })}\r\n\r\n${RUN_STARTED}`;
}

/** Sends `text` on a socket of its own, ends its side, and resolves with all it received. */
function sendAll(t: TestApp, text: string): Promise<string> {
  const { port } = t.app.getHttpServer().address() as AddressInfo;
  return new Promise<string>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (received += chunk));
    socket.on('close', () => resolve(received));
    socket.end(text);
  });
}

async function startRun(t: TestApp, key: string = KEYS.tenantA): Promise<string> {
  const runId = `run-${randomUUID()}`;
  const res = await t
    .http()
    .post(`/v1/runs/${runId}/events`)
    .set(t.auth(key))
    .send({
      events: [
        { type: 'run.started', data: { threadId: `t-${runId}`, agent: 'a', source: 'api' } },
      ],
    });
  expect(res.status).toBe(201);
  return runId;
}

/** Events of the run other than the server's append.rejected markers. */
const RUN_STARTED = JSON.stringify({
  events: [{ type: 'run.started', data: { threadId: 't1', agent: 'a', source: 'api' } }],
});

async function eventCount(t: TestApp, runId: string): Promise<number> {
  const res = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
  return (res.body.events as { type: string }[]).filter((e) => e.type !== 'append.rejected').length;
}

describe('a client that half-closes its socket after its request', () => {
  let t: TestApp;
  beforeAll(async () => {
    // As the service runs: appends are written by the store's writer thread.
    t = await listening({ BACKGROUND_THREADS: 'on' });
  });
  afterAll(async () => {
    await t.close();
  });

  // node:http's default aborted every request of a connection whose client ended its side,
  // and closed it: an answer that waited on I/O (an append, on the writer thread) was lost.
  it('is answered an append that waits on the store', async () => {
    const runId = `run-${randomUUID()}`;
    const answer = await rawRequest(
      t,
      post(`/v1/runs/${runId}/events`, {
        Authorization: `Bearer ${KEYS.tenantA}`,
        'Content-Length': Buffer.byteLength(RUN_STARTED),
      }),
      RUN_STARTED,
      { halfClose: true },
    );
    expect(answer.status).toBe(201);
    expect(await eventCount(t, runId)).toBe(1);
  });

  it('is answered every request it pipelined, then the connection closes', async () => {
    const runIds = [1, 2, 3].map(() => `run-${randomUUID()}`);
    const received = await sendAll(t, runIds.map(rawAppend).join(''));
    expect(received.match(/HTTP\/1\.1 201 /g)).toHaveLength(3);
    for (const runId of runIds) expect(await eventCount(t, runId)).toBe(1);
  });
});

describe('request ids', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening();
  });
  afterAll(async () => {
    await t.close();
  });

  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

  it('names every answer with an X-Request-Id of its own: success, refusal, not found, probe', async () => {
    const answers = [
      await t.http().get('/health/live'),
      await t.http().get('/v1/threads'),
      await t.http().get('/v1/threads').set(t.auth()),
      await t.http().get(`/v1/runs/run-${randomUUID()}/events`).set(t.auth()),
      await t.http().get('/no/such/route').set(t.auth()),
    ];
    expect(answers.map((a) => a.status)).toEqual([200, 401, 200, 404, 404]);
    const ids = answers.map((a) => a.headers['x-request-id']);
    for (const id of ids) expect(id).toMatch(UUID);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("keeps a gateway's own id when it is one header of up to 128 plain characters", async () => {
    for (const id of [
      'gw-7f3a.19:2',
      'Root=1-67891233-abcdef012345678912345678',
      'a'.repeat(128),
    ]) {
      const res = await t.http().get('/health/live').set('X-Request-Id', id);
      expect(res.headers['x-request-id']).toBe(id);
    }
  });

  it("names the answers Fastify cannot route, keeping a gateway's id: 414 and bad_url", async () => {
    const tooLong = await t
      .http()
      .get(`/v1/threads/${'a'.repeat(300)}`)
      .set(t.auth())
      .set('X-Request-Id', 'gw-414');
    expect(tooLong.status).toBe(414);
    expect(tooLong.headers['x-request-id']).toBe('gw-414');
    const badUrl = await rawRequest(
      t,
      'GET /v1/runs/%zz/stream HTTP/1.1\r\nHost: x\r\nX-Request-Id: gw-400\r\nConnection: close\r\n\r\n',
    );
    expect(badUrl.status).toBe(400);
    expect(badUrl.headers['x-request-id']).toBe('gw-400');
  });

  it('names the refusals written before a request exists with an id of their own', async () => {
    const garbage = await rawRequest(t, 'GARBAGE\r\n\r\n');
    expect(garbage.status).toBe(400);
    expect(garbage.headers['x-request-id']).toMatch(UUID);
    const huge = await rawRequest(
      t,
      `GET /health/live HTTP/1.1\r\nHost: x\r\nX-Filler: ${'a'.repeat(17 * 1024)}\r\n\r\n`,
    );
    expect(huge.status).toBe(431);
    expect(huge.headers['x-request-id']).toMatch(UUID);
  });

  it('makes its own id instead of one too long, with spaces or controls, or sent twice', async () => {
    for (const id of ['a'.repeat(129), 'two words', 'a\tb', '<script>', '']) {
      const res = await t.http().get('/health/live').set('X-Request-Id', id);
      expect(res.status).toBe(200);
      expect(res.headers['x-request-id']).toMatch(UUID);
    }
    const twice = await rawRequest(
      t,
      'GET /health/live HTTP/1.1\r\nHost: x\r\nX-Request-Id: one\r\nX-Request-Id: two\r\nConnection: close\r\n\r\n',
    );
    expect(twice.status).toBe(200);
    expect(twice.headers['x-request-id']).toMatch(UUID);
  });
});

describe('shutting down', () => {
  it('answers a request that arrives while the service closes 503 in the API shape', async () => {
    const t = await listening();
    const { port } = t.app.getHttpServer().address() as AddressInfo;
    const socket = connect(port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
    });
    const ended = new Promise((resolve) => socket.once('close', resolve));
    // Its headers begin before the close and end after it: routed while the service closes.
    socket.write(`GET /v1/threads HTTP/1.1\r\nHost: x\r\n`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const closing = t.close();
    await new Promise((resolve) => setTimeout(resolve, 50));
    socket.write(`Authorization: Bearer ${KEYS.tenantA}\r\n\r\n`);
    // The connection is closed after the answer: the close does not wait on it.
    await ended;
    await closing;
    const [head, body] = received.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1.1 503 /);
    expect(head.toLowerCase()).toContain('retry-after: 1');
    expect(JSON.parse(body)).toEqual({
      error: 'shutting_down',
      message: 'this instance is shutting down; retry, and another will answer',
    });
  });
});

describe('authentication before the body', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening();
  });
  afterAll(async () => {
    await t.close();
  });

  it('answers 401 to a request without a key while its body is still unsent', async () => {
    const answer = await rawRequest(
      t,
      post(`/v1/runs/run-${randomUUID()}/events`, { 'Content-Length': 16 * 1024 * 1024 }),
      '{"events":[',
    );
    expect(answer.status).toBe(401);
    expect(answer.headers['www-authenticate']).toBe('Bearer');
    expect(JSON.parse(answer.body)).toEqual({
      error: 'unauthorized',
      message: 'send Authorization: Bearer <api key>',
    });
  });

  it('tells a client that asks first (Expect: 100-continue) to send its body only with a key', async () => {
    const runId = await startRun(t);
    const path = `/v1/runs/${runId}/events`;
    const stranger = await rawRequest(
      t,
      post(path, { 'Content-Length': 5000, Expect: '100-continue' }),
    );
    expect(stranger.status).toBe(401);

    const { port } = t.app.getHttpServer().address() as AddressInfo;
    const body = JSON.stringify({
      events: [
        { type: 'message.added', data: { messageId: 'm', role: 'user', text: 'asked first' } },
      ],
    });
    const socket = connect(port, '127.0.0.1');
    socket.setEncoding('utf8');
    let received = '';
    const continued = new Promise<void>((resolve) => {
      socket.on('data', (chunk: string) => {
        received += chunk;
        if (received.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) resolve();
      });
    });
    socket.write(
      `${post(path, {
        'Content-Length': Buffer.byteLength(body),
        Expect: '100-continue',
        Authorization: `Bearer ${KEYS.tenantA}`,
      })}\r\n\r\n`,
    );
    await continued;
    socket.write(body);
    while (!/HTTP\/1\.1 201/.test(received))
      await new Promise((resolve) => setTimeout(resolve, 10));
    socket.destroy();
    expect(await eventCount(t, runId)).toBe(2);
  });

  it('sends no 100 Continue to an HTTP/1.0 client, which cannot expect one (RFC 9110)', async () => {
    const runId = await startRun(t);
    const body = JSON.stringify({
      events: [{ type: 'message.added', data: { messageId: 'm', role: 'user', text: 'old' } }],
    });
    const head = [
      `POST /v1/runs/${runId}/events HTTP/1.0`,
      'Host: 127.0.0.1',
      'Content-Type: application/json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      'Expect: 100-continue',
      `Authorization: Bearer ${KEYS.tenantA}`,
    ].join('\r\n');
    const answer = await rawRequest(t, head, body);
    expect(answer.status).toBe(201);
    expect(await eventCount(t, runId)).toBe(2);
  });

  it('answers 401 to an unknown key the same way, on every kind of route', async () => {
    for (const path of ['/v1/threads', '/v1/runs/r/steer', '/v1/admin/mirror/parked/e/retry']) {
      const answer = await rawRequest(
        t,
        post(path, { 'Content-Length': 1000, Authorization: 'Bearer not-a-key' }),
      );
      expect(answer.status).toBe(401);
      expect(JSON.parse(answer.body)).toMatchObject({ message: 'the API key is not recognised' });
    }
  });

  it('keeps the probes, the metrics and the API docs public', async () => {
    for (const path of ['/health/live', '/health/ready', '/metrics', '/docs-json', '/docs']) {
      expect([path, (await t.http().get(path)).status]).toEqual([path, 200]);
    }
  });

  it("answers 403 to a key without the route's scope while its body is still unsent", async () => {
    const answer = await rawRequest(
      t,
      post(`/v1/runs/run-${randomUUID()}/events`, {
        'Content-Length': 16 * 1024 * 1024,
        Authorization: `Bearer ${KEYS.readerA}`,
      }),
      '{"events":[',
    );
    expect(answer.status).toBe(403);
    expect(JSON.parse(answer.body)).toEqual({
      error: 'forbidden',
      message: 'this API key lacks the append scope',
    });
  });
});

describe('the acting user', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
    await t.app.listen(0, '127.0.0.1');
  });
  afterAll(() => t.close());

  it('is refused while the body is still unsent: a user the key may not name, or a header sent twice', async () => {
    const steer = `/v1/runs/run-${randomUUID()}/steer`;
    const notActAs = await rawRequest(
      t,
      `${post(steer, {
        'Content-Length': 16 * 1024 * 1024,
        Authorization: `Bearer ${KEYS.tenantA}`,
      })}\r\nX-Runledger-User: bob`,
      '{"expectedTurnId":',
    );
    expect(notActAs.status).toBe(403);
    const twice = await rawRequest(
      t,
      `${post(steer, {
        'Content-Length': 16 * 1024 * 1024,
        Authorization: `Bearer ${KEYS.gatewayA}`,
      })}\r\nX-Runledger-User: ana\r\nX-Runledger-User: bob`,
      '{"expectedTurnId":',
    );
    expect(twice.status).toBe(400);
    // Two keys: which was meant is not guessed, whichever comes first.
    for (const [first, second] of [
      [KEYS.tenantA, KEYS.tenantB],
      [KEYS.tenantA, KEYS.tenantA],
    ]) {
      const twoKeys = await rawRequest(
        t,
        `${post(steer, {
          'Content-Length': 16 * 1024 * 1024,
          Authorization: `Bearer ${first}`,
        })}\r\nAuthorization: Bearer ${second}`,
        '{"expectedTurnId":',
      );
      expect(twoKeys.status).toBe(401);
    }
  });
});

describe('body limits', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening({
      BODY_MAX_BYTES: String(256 * 1024),
      EVENT_MAX_BYTES: String(64 * 1024),
      SMALL_BODY_MAX_BYTES: '4096',
      JSON_MAX_KEYS: '1000',
      JSON_MAX_OBJECT_KEYS: '600',
      JSON_MAX_ITEMS: '5000',
    });
  });
  afterAll(async () => {
    await t.close();
  });

  it('refuses a declared length over the limit 413 before reading it; nothing is written', async () => {
    const runId = await startRun(t);
    const answer = await rawRequest(
      t,
      post(`/v1/runs/${runId}/events`, {
        'Content-Length': 99_999_999_999,
        Authorization: `Bearer ${KEYS.tenantA}`,
      }),
    );
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toMatchObject({
      error: 'body_too_large',
      limitBytes: 256 * 1024,
    });
  });

  it('gives routes that do not need append the small limit (SMALL_BODY_MAX_BYTES)', async () => {
    const big = { pad: 'x'.repeat(8 * 1024) };
    const small = await t
      .http()
      .post('/v1/admin/mirror/parked/some-event/retry')
      .set(t.auth())
      .send(big);
    expect(small.status).toBe(413);
    expect(small.body).toMatchObject({ error: 'body_too_large', limitBytes: 4096 });
    // The append route takes the same body (and refuses it for its content, not its size).
    const append = await t
      .http()
      .post(`/v1/runs/run-${randomUUID()}/events`)
      .set(t.auth())
      .send(big);
    expect(append.status).toBe(400);
  });

  it('counts a chunked body as it arrives and refuses it at the limit', async () => {
    const runId = await startRun(t);
    const before = await eventCount(t, runId);
    const chunk = `{"events":[{"type":"message.added","data":{"messageId":"m","role":"user","text":"${'y'.repeat(300 * 1024)}"}}]}`;
    const answer = await rawRequest(
      t,
      post(`/v1/runs/${runId}/events`, {
        'Transfer-Encoding': 'chunked',
        Authorization: `Bearer ${KEYS.tenantA}`,
      }),
      `${Buffer.byteLength(chunk).toString(16)}\r\n${chunk}\r\n0\r\n\r\n`,
    );
    expect(answer.status).toBe(413);
    expect(await eventCount(t, runId)).toBe(before);
  });

  it.each([
    ['maxDepth', () => `{"events":${'['.repeat(100)}${']'.repeat(100)}}`, /nested deeper than 68/],
    [
      'maxObjectKeys',
      () => JSON.stringify({ events: [{ type: 'message.added', data: keys(601) }] }),
      /more than 600 members \(JSON_MAX_OBJECT_KEYS\)/,
    ],
    [
      'maxKeys',
      () =>
        JSON.stringify({
          events: [1, 2].map(() => ({ type: 'message.added', data: keys(550) })),
        }),
      /more than 1000 object members \(JSON_MAX_KEYS\)/,
    ],
    [
      'maxItems',
      () => JSON.stringify({ events: [{ type: 'x', data: { list: Array(6000).fill(0) } }] }),
      /more than 5000 values/,
    ],
  ])(
    'refuses a body past %s 400 before parsing it, naming the rule',
    async (rule, body, message) => {
      const runId = await startRun(t);
      const before = await eventCount(t, runId);
      const res = await t
        .http()
        .post(`/v1/runs/${runId}/events`)
        .set({ ...t.auth(), 'Content-Type': 'application/json' })
        .send(body());
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({
        error: 'validation_failed',
        message: expect.stringMatching(message),
        details: [{ field: 'body', rule }],
      });
      expect(await eventCount(t, runId)).toBe(before);
    },
  );

  it('lists the first problems that fit in a page and counts them all', async () => {
    const runId = await startRun(t);
    const res = await t
      .http()
      .post(`/v1/runs/${runId}/events`)
      .set(t.auth())
      .send({ events: [{ type: 'message.added', data: keys(500) }] });
    expect(res.status).toBe(400);
    const listed = (res.body.details as unknown[]).length;
    expect(listed).toBeGreaterThan(10);
    // 500 unknown keys, and the three required fields missing.
    expect(res.body.problemCount).toBeGreaterThanOrEqual(500);
    expect(res.body.message).toMatch(new RegExp(`the first ${listed} of \\d+ problems are listed`));
    expect(Buffer.byteLength(res.text)).toBeLessThanOrEqual(ERROR_BODY_MAX_BYTES);
    expect(await eventCount(t, runId)).toBe(1);
  });

  it('answers twenty 10,000-character unknown keys with a small body, each key cut', async () => {
    const runId = await startRun(t);
    const data = Object.fromEntries(
      Array.from({ length: 20 }, (_, i) => [`${i}-${'k'.repeat(10_000)}`, 1]),
    );
    const res = await t
      .http()
      .post(`/v1/runs/${runId}/events`)
      .set(t.auth())
      .send({ events: [{ type: 'message.added', data }] });
    expect(res.status).toBe(400);
    expect(res.text.length).toBeLessThan(20 * 3 * 300);
    expect(res.body.details).toContainEqual(
      expect.objectContaining({
        field: expect.stringMatching(/^data\.0-k+… \(10007 characters\)$/),
      }),
    );
    expect(await eventCount(t, runId)).toBe(1);
  });

  it.each([
    ['__proto__', '{"events":[],"__proto__":{"polluted":true}}'],
    ['constructor.prototype', '{"events":[],"constructor":{"prototype":{"polluted":true}}}'],
  ])('refuses a %s key 400, naming it rather than calling the JSON invalid', async (_, body) => {
    const res = await t
      .http()
      .post(`/v1/runs/run-${randomUUID()}/events`)
      .set({ ...t.auth(), 'Content-Type': 'application/json' })
      .send(body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      error: 'validation_failed',
      details: [{ field: 'body', rule: 'forbiddenKey' }],
    });
  });

  it.each([
    'text/plain',
    'application/x-www-form-urlencoded',
    'application/vnd.api+json',
    'json',
    'application/json, text/plain',
  ])('answers a %s body 415 unsupported_media_type', async (type) => {
    const res = await t
      .http()
      .post(`/v1/runs/run-${randomUUID()}/events`)
      .set({ ...t.auth(), 'Content-Type': type })
      .send('{"events":[]}');
    expect(res.status).toBe(415);
    expect(res.body).toMatchObject({ error: 'unsupported_media_type' });
    // What to send instead, and the type that was sent.
    expect(res.body.message).toContain('application/json');
    expect(res.body.message).toContain(type);
  });

  it('answers a body of another media type sent to no route 404, as before any body is read', async () => {
    const res = await t
      .http()
      .post('/v1/no-such-route')
      .set({ ...t.auth(), 'Content-Type': 'text/plain' })
      .send('hello');
    expect(res.status).toBe(404);
    expect(res.body).toMatchObject({ error: 'not_found' });
  });

  it.each([[[]], [['Content-Type: ']]])(
    'answers a body sent with no Content-Type (%j) 415, saying what to send; nothing is written',
    async (contentType) => {
      const runId = `run-${randomUUID()}`;
      // On a socket of its own: supertest names a type for every body it sends.
      const head = [
        `POST /v1/runs/${runId}/events HTTP/1.1`,
        'Host: 127.0.0.1',
        `Authorization: Bearer ${KEYS.tenantA}`,
        `Content-Length: ${Buffer.byteLength(RUN_STARTED)}`,
        ...contentType,
      ].join('\r\n');
      const answer = await rawRequest(t, head, RUN_STARTED);
      expect(answer.status).toBe(415);
      expect(JSON.parse(answer.body)).toMatchObject({ error: 'unsupported_media_type' });
      expect(JSON.parse(answer.body).message).toMatch(/no Content-Type.*application\/json/);
      expect((await t.http().get(`/v1/runs/${runId}/events`).set(t.auth())).status).toBe(404);
    },
  );

  it.each(['; charset=utf-16', ';charset=latin1', '; CHARSET="ISO-8859-1"'])(
    'answers a JSON body declared with %s 415, unread; nothing is written',
    async (parameter) => {
      const runId = `run-${randomUUID()}`;
      const charset = /=\W*([\w-]+)/.exec(parameter)![1];
      const res = await t
        .http()
        .post(`/v1/runs/${runId}/events`)
        .set({ ...t.auth(), 'Content-Type': `application/json${parameter}` })
        .send(RUN_STARTED);
      expect(res.status).toBe(415);
      expect(res.body).toMatchObject({ error: 'unsupported_media_type' });
      expect(res.body.message).toContain(`charset ${charset.toLowerCase()}`);
      expect((await t.http().get(`/v1/runs/${runId}/events`).set(t.auth())).status).toBe(404);
    },
  );

  it('answers a body declared compressed 415, even when it is plain JSON; identity is taken', async () => {
    for (const encoding of ['gzip', 'br', 'deflate, gzip']) {
      const runId = `run-${randomUUID()}`;
      const res = await t
        .http()
        .post(`/v1/runs/${runId}/events`)
        .set({ ...t.auth(), 'Content-Type': 'application/json', 'Content-Encoding': encoding })
        .send(RUN_STARTED);
      expect({ encoding, status: res.status, error: res.body.error }).toEqual({
        encoding,
        status: 415,
        error: 'unsupported_media_type',
      });
      expect((await t.http().get(`/v1/runs/${runId}/events`).set(t.auth())).status).toBe(404);
    }
    const identity = await t
      .http()
      .post(`/v1/runs/run-${randomUUID()}/events`)
      .set({ ...t.auth(), 'Content-Type': 'application/json', 'Content-Encoding': 'Identity' })
      .send(RUN_STARTED);
    expect(identity.status).toBe(201);
  });

  it('takes a body declared as charset UTF-8, however it is spelt', async () => {
    for (const charset of ['utf-8', 'UTF-8', 'utf8', '"utf-8"']) {
      const res = await t
        .http()
        .post(`/v1/runs/run-${randomUUID()}/events`)
        .set({ ...t.auth(), 'Content-Type': `application/json; charset=${charset}` })
        .send(RUN_STARTED);
      expect(res.status).toBe(201);
    }
  });

  it('refuses a body that is not valid UTF-8 400, rather than recording U+FFFD in its place', async () => {
    const runId = `run-${randomUUID()}`;
    const invalid = Buffer.concat([
      Buffer.from('{"events":[{"type":"run.started","data":{"threadId":"t1","agent":"a'),
      Buffer.from([0xff, 0xfe, 0xc3]),
      Buffer.from('","source":"api"}}]}'),
    ]);
    // Sent as bytes: supertest would send a Buffer as its JSON.
    const { port } = t.app.getHttpServer().address() as AddressInfo;
    const res = await fetch(`http://127.0.0.1:${port}/v1/runs/${runId}/events`, {
      method: 'POST',
      headers: { ...t.auth(), 'Content-Type': 'application/json' },
      body: invalid,
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: 'malformed_body',
      details: [{ field: 'body', rule: 'utf8' }],
      message: expect.stringContaining('not valid UTF-8'),
    });
    expect((await t.http().get(`/v1/runs/${runId}/events`).set(t.auth())).status).toBe(404);
  });

  it('decodes a body a chunk at a time as it arrives, characters split between chunks too', async () => {
    const runId = `run-${randomUUID()}`;
    // About 220 KB, under BODY_MAX_BYTES, in events under EVENT_MAX_BYTES.
    const text = `a😀é中${'é😀'.repeat(9000)}`;
    const body = Buffer.from(
      JSON.stringify({
        events: [
          { type: 'run.started', data: { threadId: 't1', agent: 'a', source: 'api' } },
          ...[1, 2, 3, 4].map((n) => ({
            type: 'message.added',
            data: { messageId: `m${n}`, role: 'user', text },
          })),
        ],
      }),
    );
    // The most bytes decoded at once while the body is read, by either decoder: a chunk, not
    // the whole body.
    const decoded: number[] = [];
    const toString = Buffer.prototype.toString;
    Buffer.prototype.toString = function (
      this: Buffer,
      encoding?: BufferEncoding,
      start?: number,
      end?: number,
    ) {
      if (this.length > 1024 && (encoding === undefined || encoding === 'utf8')) {
        decoded.push(this.length);
      }
      return toString.call(this, encoding, start, end);
    };
    const decode = TextDecoder.prototype.decode;
    TextDecoder.prototype.decode = function (
      this: TextDecoder,
      input?: NodeJS.ArrayBufferView,
      options?: { stream?: boolean },
    ) {
      if (input !== undefined) decoded.push(input.byteLength);
      return decode.call(this, input, options);
    };
    const { port } = t.app.getHttpServer().address() as AddressInfo;
    const socket = connect(port, '127.0.0.1');
    try {
      const answer = new Promise<string>((resolve) => {
        let received = '';
        socket.setEncoding('utf8');
        socket.on('data', (chunk: string) => {
          received += chunk;
          if (received.includes('\r\n\r\n')) resolve(received.slice(0, 12));
        });
      });
      const head = post(`/v1/runs/${runId}/events`, {
        'Content-Length': body.length,
        Authorization: `Bearer ${KEYS.tenantA}`,
      });
      socket.write(`${head}\r\n\r\n`);
      // Cut inside the first 😀 (4 bytes), then inside é (2 bytes) and 中 (3 bytes).
      const start = body.indexOf('a😀') + 3;
      const cuts = [0, start, start + 4, start + 7, body.length];
      for (let i = 1; i < cuts.length; i += 1) {
        socket.write(body.subarray(cuts[i - 1], cuts[i]));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(await answer).toBe('HTTP/1.1 201');
    } finally {
      Buffer.prototype.toString = toString;
      TextDecoder.prototype.decode = decode;
      socket.destroy();
    }
    // Some decode was seen: an empty list would pass the bound below without a check.
    expect(decoded.length).toBeGreaterThan(1);
    expect(Math.max(...decoded)).toBeLessThan(body.length / 2);
    const read = await t.http().get(`/v1/runs/${runId}/events`).set(t.auth());
    expect(read.body.events.map((event: { data: { text?: string } }) => event.data.text)).toEqual([
      undefined,
      text,
      text,
      text,
      text,
    ]);
  });

  it('refuses a body that ends inside a character, or whose next chunk does not complete it', async () => {
    const { port } = t.app.getHttpServer().address() as AddressInfo;
    const send = async (parts: Buffer[]) => {
      const runId = `run-${randomUUID()}`;
      const socket = connect(port, '127.0.0.1');
      try {
        const answer = new Promise<string>((resolve) => {
          let received = '';
          socket.setEncoding('utf8');
          socket.on('data', (chunk: string) => {
            received += chunk;
            const end = received.indexOf('\r\n\r\n');
            if (end >= 0 && received.endsWith('}')) resolve(received.slice(end + 4));
          });
        });
        const length = parts.reduce((sum, part) => sum + part.length, 0);
        socket.write(
          `${post(`/v1/runs/${runId}/events`, { 'Content-Length': length, Authorization: `Bearer ${KEYS.tenantA}` })}\r\n\r\n`,
        );
        for (const part of parts) {
          socket.write(part);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        return JSON.parse(await answer) as { error: string; details: { rule: string }[] };
      } finally {
        socket.destroy();
      }
    };
    const head = Buffer.from('{"events":[{"type":"run.started","data":{"threadId":"t1","agent":"');
    const tail = Buffer.from('","source":"api"}}]}');
    const utf8 = { error: 'malformed_body', details: [{ rule: 'utf8' }] };
    // 😀 is F0 9F 98 80: its first two bytes end one chunk, a byte that cannot follow them
    // starts the next.
    expect(await send([head, Buffer.from([0xf0, 0x9f]), Buffer.from([0x41]), tail])).toMatchObject(
      utf8,
    );
    // The body's last bytes are the start of a character.
    expect(await send([head, tail, Buffer.from([0xe4, 0xb8])])).toMatchObject(utf8);
  });

  it('still calls JSON that does not parse malformed', async () => {
    const res = await t
      .http()
      .post(`/v1/runs/run-${randomUUID()}/events`)
      .set({ ...t.auth(), 'Content-Type': 'application/json' })
      .send('{"events":[');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: 'malformed_body' });
  });
});

describe('paths that quote themselves in errors', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening();
  });
  afterAll(async () => {
    await t.close();
  });

  it.each([
    ['an unknown route', `/v1/${'z'.repeat(15_000)}`, 404, 'not_found'],
    ['an undecodable %-escape', `/v1/threads/${'%ff'.repeat(5000)}`, 400, 'bad_url'],
    ['a path id past 256 characters', `/v1/runs/${'r'.repeat(15_000)}/events`, 414, 'uri_too_long'],
  ])('answers %s in the API shape with a small body', async (_, path, status, error) => {
    const res = await t.http().get(path).set(t.auth());
    expect(res.status).toBe(status);
    expect(res.body).toMatchObject({ error });
    expect(res.text.length).toBeLessThan(1200);
  });
});

describe('large bodies at once', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening({ LARGE_BODY_BYTES: '2048', LARGE_BODY_CONCURRENCY: '1' });
  });
  afterAll(async () => {
    await t.close();
  });

  it('reads LARGE_BODY_CONCURRENCY of them; beyond, 503 with Retry-After, unread', async () => {
    const runId = await startRun(t);
    const { port } = t.app.getHttpServer().address() as AddressInfo;
    // The first large body arrives slowly and holds the one slot.
    const slow = connect(port, '127.0.0.1');
    const text = 'z'.repeat(4000);
    const body = JSON.stringify({
      events: [{ type: 'message.added', data: { messageId: 'm1', role: 'user', text } }],
    });
    const slowAnswer = new Promise<string>((resolve) => {
      let received = '';
      slow.setEncoding('utf8');
      slow.on('data', (chunk: string) => {
        received += chunk;
        if (received.includes('\r\n\r\n')) resolve(received);
      });
    });
    slow.write(
      `${post(`/v1/runs/${runId}/events`, {
        'Content-Length': Buffer.byteLength(body),
        Authorization: `Bearer ${KEYS.tenantA}`,
      })}\r\n\r\n${body.slice(0, 100)}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 100));

    const refused = await rawRequest(
      t,
      post(`/v1/runs/${runId}/events`, {
        'Content-Length': 5000,
        Authorization: `Bearer ${KEYS.tenantA}`,
      }),
    );
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(JSON.parse(refused.body)).toMatchObject({
      error: 'busy',
      message: expect.stringContaining('LARGE_BODY_CONCURRENCY'),
    });
    // A small body is not held up.
    expect((await t.http().get('/v1/threads').set(t.auth())).status).toBe(200);

    slow.write(body.slice(100));
    expect(await slowAnswer).toMatch(/^HTTP\/1.1 201/);
    slow.destroy();
    const after = await t
      .http()
      .post(`/v1/runs/${runId}/events`)
      .set(t.auth())
      .send(JSON.parse(body.replace('"m1"', '"m2"')));
    expect(after.status).toBe(201);
  });
});

describe('large bodies of one tenant', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening({ LARGE_BODY_BYTES: '2048', LARGE_BODY_CONCURRENCY: '2' });
  });
  afterAll(async () => {
    await t.close();
  });

  it("holds at most half the slots: its stalled bodies never refuse another tenant's", async () => {
    const [runA, runB] = [await startRun(t), await startRun(t, KEYS.tenantB)];
    const { port } = t.app.getHttpServer().address() as AddressInfo;
    const stalled = connect(port, '127.0.0.1');
    stalled.write(
      `${post(`/v1/runs/${runA}/events`, {
        'Content-Length': 30_000_000,
        Authorization: `Bearer ${KEYS.tenantA}`,
      })}\r\n\r\n{"events":[`,
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    try {
      const refused = await rawRequest(
        t,
        post(`/v1/runs/${runA}/events`, {
          'Content-Length': 5000,
          Authorization: `Bearer ${KEYS.tenantA}`,
        }),
      );
      expect(refused.status).toBe(503);
      expect(JSON.parse(refused.body)).toMatchObject({
        error: 'busy',
        message: expect.stringContaining("this tenant's 1 request bodies"),
      });

      const text = 'z'.repeat(4000);
      const other = await t
        .http()
        .post(`/v1/runs/${runB}/events`)
        .set(t.auth(KEYS.tenantB))
        .send({
          events: [{ type: 'message.added', data: { messageId: 'm1', role: 'user', text } }],
        });
      expect(other.status).toBe(201);
    } finally {
      stalled.destroy();
    }
  });
});

describe('large bodies that end together', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening({ LARGE_BODY_BYTES: '2048', LARGE_BODY_CONCURRENCY: '8' });
  });
  afterAll(async () => {
    await t.close();
  });

  it('are parsed a turn of the event loop apart, not back to back in one turn', async () => {
    const runs = [await startRun(t), await startRun(t), await startRun(t)];
    const bodies = runs.map((_, n) =>
      JSON.stringify({
        events: Array.from({ length: 20 }, (_, k) => ({
          type: 'message.added',
          data: { messageId: `m-${n}-${k}`, role: 'user', text: 'é'.repeat(5000) },
        })),
      }),
    );
    // At each parse of a body, whether the loop had a turn since the parse before.
    const { turns, mark } = loopTurns();
    const parse = JSON.parse;
    const spy = jest.spyOn(JSON, 'parse').mockImplementation((text: string, reviver) => {
      if (bodies.includes(text)) mark();
      return parse(text, reviver) as unknown;
    });
    const { port } = t.app.getHttpServer().address() as AddressInfo;
    const sockets = runs.map(() => connect(port, '127.0.0.1'));
    try {
      // Each body is sent but for its last byte; then the three last bytes at once, so that
      // the bodies end in the same turn of the server's loop.
      const answers = sockets.map(
        (socket) =>
          new Promise<string>((resolve) => {
            let received = '';
            socket.setEncoding('utf8');
            socket.on('data', (chunk: string) => {
              received += chunk;
              if (received.includes('\r\n\r\n')) resolve(received.slice(0, 12));
            });
          }),
      );
      sockets.forEach((socket, n) => {
        const head = post(`/v1/runs/${runs[n]}/events`, {
          'Content-Length': Buffer.byteLength(bodies[n]),
          Authorization: `Bearer ${KEYS.tenantA}`,
        });
        socket.write(`${head}\r\n\r\n${bodies[n].slice(0, -1)}`);
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      sockets.forEach((socket) => socket.write('}'));
      expect(await Promise.all(answers)).toEqual(runs.map(() => 'HTTP/1.1 201'));
      expect(turns).toEqual([true, true, true]);
    } finally {
      spy.mockRestore();
      sockets.forEach((socket) => socket.destroy());
    }
  });
});

describe('process guards', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await listening({ HTTP_REQUEST_TIMEOUT_MS: '1500', HTTP_HEADERS_TIMEOUT_MS: '1000' });
  });
  afterAll(async () => {
    await t.close();
  });

  it('answers 408 and closes a request whose body stops arriving (HTTP_REQUEST_TIMEOUT_MS)', async () => {
    const answer = await rawRequest(
      t,
      post(`/v1/runs/run-${randomUUID()}/events`, {
        'Content-Length': 1000,
        Authorization: `Bearer ${KEYS.tenantA}`,
      }),
      '{"events":[',
    );
    expect(answer.status).toBe(408);
    expect(JSON.parse(answer.body)).toEqual({
      error: 'request_timeout',
      message: expect.stringContaining('HTTP_REQUEST_TIMEOUT_MS'),
    });
  });

  it('answers bytes that are not an HTTP request 400 in the API error shape', async () => {
    const answer = await rawRequest(t, 'NOT HTTP AT ALL');
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body)).toEqual({
      error: 'bad_request',
      message: expect.stringContaining('not an HTTP request'),
    });
  });

  it('answers an HTTP/1.1 request without Host 400 in the API error shape, and asks for no body', async () => {
    for (const head of [
      'GET /health/live HTTP/1.1',
      // A body it would refuse is not asked for (no 100 Continue first).
      ['POST /v1/runs/r/events HTTP/1.1', 'Expect: 100-continue', 'Content-Length: 10'].join(
        '\r\n',
      ),
    ]) {
      const answer = await rawRequest(t, head);
      expect(answer.status).toBe(400);
      expect(answer.headers['x-request-id']).toEqual(expect.any(String));
      expect(JSON.parse(answer.body)).toEqual({
        error: 'missing_host',
        message: expect.stringContaining('Host'),
      });
    }
  });

  it('answers an expectation other than 100-continue 417 in the API error shape', async () => {
    const answer = await rawRequest(
      t,
      ['GET /health/live HTTP/1.1', 'Host: 127.0.0.1', 'Expect: 200-ok'].join('\r\n'),
    );
    expect(answer.status).toBe(417);
    expect(JSON.parse(answer.body)).toEqual({
      error: 'expectation_failed',
      message: expect.stringContaining('100-continue'),
    });
  });

  it.each([
    ['without Host', ['GET /health/live HTTP/1.1'], 400],
    [
      'with Expect: 200-ok',
      ['GET /health/live HTTP/1.1', 'Host: 127.0.0.1', 'Expect: 200-ok'],
      417,
    ],
  ])(
    'answers a request pipelined behind one %s, in order, and does what it asks once',
    async (_name, refused, status) => {
      const runId = `run-${randomUUID()}`;
      const received = await sendAll(t, `${refused.join('\r\n')}\r\n\r\n${rawAppend(runId)}`);
      expect(received.match(/HTTP\/1\.1 \d{3} /g)).toEqual([
        `HTTP/1.1 ${status} `,
        'HTTP/1.1 201 ',
      ]);
      expect(await eventCount(t, runId)).toBe(1);
    },
  );

  it('answers headers over 16 KiB 431 in the API error shape, with or without a key', async () => {
    for (const auth of [{}, { Authorization: `Bearer ${KEYS.tenantA}` }]) {
      const answer = await rawRequest(
        t,
        [
          `GET /v1/threads?x=${'a'.repeat(20_000)} HTTP/1.1`,
          'Host: 127.0.0.1',
          ...Object.entries(auth).map(([name, value]) => `${name}: ${value}`),
        ].join('\r\n'),
      );
      expect(answer.status).toBe(431);
      expect(JSON.parse(answer.body)).toEqual({
        error: 'headers_too_large',
        message: expect.stringContaining('16 KiB'),
      });
    }
  });

  it('counts a body its client abandoned as a refusal, and logs no unexpected error', async () => {
    const aborted = async () => {
      const text = (await t.http().get('/metrics')).text as string;
      const line = /^runledger_rejections_total\{reason="request_aborted"\} (\d+)$/m.exec(text);
      return Number(line?.[1] ?? 0);
    };
    const errors = jest.spyOn(Logger.prototype, 'error');
    try {
      const before = await aborted();
      const { port } = t.app.getHttpServer().address() as AddressInfo;
      const socket = connect(port, '127.0.0.1');
      socket.write(
        `${post(`/v1/runs/run-${randomUUID()}/events`, {
          'Content-Length': 1000,
          Authorization: `Bearer ${KEYS.tenantA}`,
        })}\r\n\r\n{"events":[`,
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      socket.destroy();
      for (let waited = 0; (await aborted()) === before && waited < 5000; waited += 20) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(await aborted()).toBe(before + 1);
      expect(errors).not.toHaveBeenCalled();
    } finally {
      errors.mockRestore();
    }
  });

  it('reports the event-loop delay since the last scrape', async () => {
    const text = (await t.http().get('/metrics')).text as string;
    for (const stat of ['max', 'p99', 'mean']) {
      expect(text).toMatch(
        new RegExp(`^runledger_event_loop_delay_seconds\\{stat="${stat}"\\} [0-9.e-]+$`, 'm'),
      );
    }
  });
});

function keys(n: number): Record<string, number> {
  return Object.fromEntries(Array.from({ length: n }, (_, i) => [`unknown${i}`, i]));
}
