/**
 * Hostile input never answers 5xx and never writes partially (docs/api.md, errors;
 * docs/architecture.md, "The write path"). fast-check throws random and mutated bodies, headers, ids and query
 * values at every route of one app with a seeded log. Every answer must be a 4xx with a JSON
 * `error`, unless the input is known valid (then a 2xx is allowed too); and the log — the whole
 * SQLite `events` table, read through its own read-only connection — must be unchanged after
 * every 4xx, and grow by exactly the events a 2xx names (all of a batch, or none) after a 2xx.
 *
 * Requests go through node:http (raw sockets for bytes node:http refuses to send) against the
 * listening app, so a body or a header reaches the server exactly as generated.
 */
import { randomUUID } from 'node:crypto';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import {
  EVENT_TYPES,
  PATH_ID_PATTERN,
  SERVER_ONLY_TYPES,
  isPlainObject,
  validateEvent,
} from '@runledger/domain';
import { EVENT_DATA_EXAMPLES } from '../../../libs/domain/src/testing/event-fixtures';
import {
  Obj,
  PROTOTYPE_KEYS,
  Raw,
  appendEnvelope,
  authorization,
  contentType,
  deepJson,
  encodeLoose,
  expectedRevision,
  hostileSegment,
  hostileString,
  hostileTree,
  jsonText,
  mutate,
  mutatedExample,
  mutation,
  queryValue,
  toTree,
  userHeader,
  type Tree,
} from './testing/fuzz-arbitraries';
import { KEYS, startTestApp, type TestApp } from './testing/test-app';

// ---------------------------------------------------------------------------------------------
// The app, its seeded log, and the log's snapshot

const SEED = {
  runA: 'fz-run-a',
  threadA: 'fz-thread-a',
  runSink: 'fz-run-sink',
  threadSink: 'fz-thread-sink',
  runFinished: 'fz-run-finished',
  threadFinished: 'fz-thread-finished',
  runStop: 'fz-run-stop',
  threadStop: 'fz-thread-stop',
  runReceipt: 'fz-run-receipt',
  threadReceipt: 'fz-thread-receipt',
  runB: 'fz-run-b',
  threadB: 'fz-thread-b',
};

const SCALE = Number(process.env.FUZZ_SCALE ?? 1);
/** Runs per property, scaled by FUZZ_SCALE (e.g. 20) for a longer local hunt. */
const runs = (n: number) => ({ numRuns: Math.max(1, Math.round(n * SCALE)) });
jest.setTimeout(30_000 * Math.max(1, SCALE));

const TENANT_A = 'tenant-a';
const TENANT_B = 'tenant-b';
const RUNS: Record<string, string> = {
  [SEED.runA]: TENANT_A,
  [SEED.runSink]: TENANT_A,
  [SEED.runFinished]: TENANT_A,
  [SEED.runStop]: TENANT_A,
  [SEED.runReceipt]: TENANT_A,
  [SEED.runB]: TENANT_B,
};
const THREADS: Record<string, string> = {
  [SEED.threadA]: TENANT_A,
  [SEED.threadSink]: TENANT_A,
  [SEED.threadFinished]: TENANT_A,
  [SEED.threadStop]: TENANT_A,
  [SEED.threadReceipt]: TENANT_A,
  [SEED.threadB]: TENANT_B,
};

const PRINCIPALS = new Map<string, { tenant: string; scopes: string[] }>([
  [KEYS.tenantA, { tenant: TENANT_A, scopes: ['append', 'read', 'admin', 'approve'] }],
  [KEYS.tenantB, { tenant: TENANT_B, scopes: ['append', 'read', 'approve'] }],
  [KEYS.readerA, { tenant: TENANT_A, scopes: ['read'] }],
  [KEYS.gatewayA, { tenant: TENANT_A, scopes: ['append', 'read', 'approve', 'act-as'] }],
]);

let t: TestApp;
let port: number;
let log: Database.Database;
let snapshotStatement: Database.Statement<[], { count: number; head: number }>;
let receipt: { value: string; toolName: string; input: Record<string, unknown> };
let realCursor: string;

interface Snapshot {
  count: number;
  head: number;
}

function snapshot(): Snapshot {
  return snapshotStatement.get()!;
}

async function seed(): Promise<void> {
  const append = async (runId: string, events: object[], key = KEYS.tenantA) => {
    const res = await t.http().post(`/v1/runs/${runId}/events`).set(t.auth(key)).send({ events });
    expect(res.status).toBe(201);
    return res.body as { position: number };
  };
  const started = (threadId: string) => ({
    type: 'run.started',
    data: { threadId, agent: 'fuzz', source: 'api', title: 'fuzz' },
  });
  const approval = (approvalId: string) => ({
    type: 'approval.requested',
    data: {
      approvalId,
      toolCallId: `call-${approvalId}`,
      toolName: 'deploy',
      input: { env: 'prod' },
      question: 'Deploy?',
    },
  });
  await append(SEED.runA, [
    started(SEED.threadA),
    { type: 'message.added', data: { messageId: 'm1', role: 'user', text: 'hello' } },
    { type: 'turn.started', data: { turnId: 'turn-1', source: 'voice' } },
    { type: 'tool.started', data: { toolCallId: 'tc-1', toolName: 'lookup', input: { q: 1 } } },
    {
      type: 'tool.finished',
      data: { toolCallId: 'tc-1', toolName: 'lookup', output: { ok: true }, failed: false },
    },
    approval('ap-1'),
    { type: 'transcript.added', data: { utteranceId: 'u1', role: 'user', text: 'yes' } },
  ]);
  await append(SEED.runSink, [started(SEED.threadSink)]);
  await append(SEED.runFinished, [
    started(SEED.threadFinished),
    { type: 'run.finished', data: { status: 'completed' } },
  ]);
  await append(SEED.runStop, [
    started(SEED.threadStop),
    { type: 'turn.started', data: { turnId: 'turn-1', source: 'api' } },
  ]);
  await append(SEED.runReceipt, [started(SEED.threadReceipt), approval('ap-r')]);
  await append(SEED.runB, [started(SEED.threadB), approval('ap-b')], KEYS.tenantB);
  const resolved = await t
    .http()
    .post(`/v1/runs/${SEED.runReceipt}/approvals/ap-r/resolve`)
    .set(t.auth())
    .send({ decision: 'allow' });
  expect(resolved.body).toMatchObject({ decision: 'allow' });
  receipt = { value: resolved.body.receipt, toolName: 'deploy', input: { env: 'prod' } };
  // Every read below starts from a projection that has caught up with the seeded log.
  const page = await caughtUp('/v1/threads?limit=1');
  realCursor = page.nextCursor as string;
  expect(typeof realCursor).toBe('string');
}

/** GETs `path` once the projection has passed the log's head (READ_WAIT_MS is short here). */
async function caughtUp(path: string): Promise<Record<string, unknown>> {
  const head = snapshot().head;
  for (let attempt = 1; ; attempt += 1) {
    const res = await t.http().get(`${path}&minPosition=${head}`).set(t.auth());
    if (res.status === 200) return res.body as Record<string, unknown>;
    if (attempt >= 50) throw new Error(`the projection did not reach ${head}: ${res.text}`);
  }
}

beforeAll(async () => {
  // A short read wait: a generated minPosition past the log's head answers 503 quickly.
  t = await startTestApp({ READ_WAIT_MS: '100' });
  await t.app.listen(0, '127.0.0.1');
  port = (t.app.getHttpServer().address() as AddressInfo).port;
  log = new Database(join(t.config.dataDir, 'runledger.db'), {
    readonly: true,
    fileMustExist: true,
  });
  snapshotStatement = log.prepare(
    'SELECT COUNT(*) AS count, COALESCE(MAX(position), 0) AS head FROM events',
  );
  await seed();
});

afterAll(async () => {
  log?.close();
  await t?.close();
});

// ---------------------------------------------------------------------------------------------
// Sending requests exactly as generated

interface Req {
  method: string;
  path: string;
  headers: Record<string, string | undefined>;
  body?: string | Buffer;
}

interface Res {
  status: number;
  headers: IncomingHttpHeaders | Record<string, string>;
  text: string;
}

/** The headers that are set: undefined means "do not send it". */
function defined(headers: Req['headers']): Record<string, string> {
  return Object.fromEntries(
    Object.entries(headers).filter((entry): entry is [string, string] => entry[1] !== undefined),
  );
}

function send(req: Req): Promise<Res> {
  const headers = defined(req.headers);
  return new Promise<Res>((resolve, reject) => {
    const outgoing = httpRequest(
      // A connection per request: a hostile request may leave its connection closed.
      { host: '127.0.0.1', port, method: req.method, path: req.path, headers, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            text: Buffer.concat(chunks).toString('utf8'),
          }),
        );
        res.on('error', reject);
      },
    );
    outgoing.setTimeout(15_000, () => outgoing.destroy(new Error('no answer within 15 s')));
    outgoing.on('error', reject);
    outgoing.end(req.body);
  });
}

/** Sends bytes on a fresh socket and reads the one answer (the request says Connection: close). */
function sendRaw(bytes: Buffer): Promise<Res> {
  return new Promise<Res>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.setTimeout(15_000, () => socket.destroy(new Error('no answer within 15 s')));
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const all = Buffer.concat(chunks);
      const split = all.indexOf('\r\n\r\n');
      if (split < 0) {
        reject(new Error(`no HTTP answer: ${JSON.stringify(all.toString('latin1'))}`));
        return;
      }
      const [statusLine, ...lines] = all.subarray(0, split).toString('latin1').split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      let body: Buffer = all.subarray(split + 4);
      if (/chunked/i.test(headers['transfer-encoding'] ?? '')) body = dechunk(body);
      resolve({
        status: Number(statusLine.split(' ')[1]),
        headers,
        text: body.toString('utf8'),
      });
    });
    socket.end(bytes);
  });
}

function dechunk(body: Buffer): Buffer {
  const parts: Buffer[] = [];
  for (let at = 0; at < body.length;) {
    const eol = body.indexOf('\r\n', at);
    const size = parseInt(body.subarray(at, eol).toString('latin1'), 16);
    if (!(size > 0)) break;
    parts.push(body.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

// ---------------------------------------------------------------------------------------------
// What an answer may be

/**
 * What the input allows: `refuse` — it is invalid, so a 4xx and no write; `write` — it is
 * known valid and may be answered 2xx writing `events` events (or none when `idempotent`),
 * or refused by a rule of the moment (409…); `read` — a valid read: 2xx (or a 4xx the
 * moment explains, like a tool call not found), never a write.
 */
type Verdict =
  | { kind: 'refuse' }
  | { kind: 'write'; events: number; idempotent?: boolean }
  | { kind: 'read'; mustSucceed: boolean };

const REFUSE: Verdict = { kind: 'refuse' };

const ALLOWED_4XX = [400, 401, 403, 404, 405, 409, 413, 414, 415, 429, 431];

interface Allowances {
  /** A valid minPosition past the log's head: 503 projection_behind is the documented answer. */
  projectionBehind?: boolean;
  /** The mirror admin routes of an app without Kafka: 503 mirror_off is the documented answer. */
  mirrorOff?: boolean;
  /** HEAD answers carry no body. */
  noBody?: boolean;
  /** A 2xx is not JSON: NDJSON (replay) or text (metrics). */
  ndjson?: boolean;
}

function requestSize(req: Req): number {
  return Object.entries(req.headers).reduce(
    (size, [name, value]) => size + name.length + Buffer.byteLength(value ?? '') + 4,
    Buffer.byteLength(req.path),
  );
}

function describeReq(req: Req): string {
  const body =
    req.body === undefined
      ? '(none)'
      : Buffer.isBuffer(req.body)
        ? `<${req.body.length} bytes> ${JSON.stringify(req.body.subarray(0, 600).toString('latin1'))}`
        : `${JSON.stringify(req.body.slice(0, 1500))}${req.body.length > 1500 ? ` …(${req.body.length} chars)` : ''}`;
  const headers = JSON.stringify(
    Object.fromEntries(
      Object.entries(req.headers).map(([k, v]) => [
        k,
        v && v.length > 200 ? `${v.slice(0, 200)}…(${v.length})` : v,
      ]),
    ),
  );
  return `${req.method} ${req.path.length > 300 ? `${req.path.slice(0, 300)}…(${req.path.length})` : req.path}\n  headers: ${headers}\n  body: ${body}`;
}

/** Sends `req` and checks the answer and the log against `verdict`; returns the answer. */
async function check(
  req: Req,
  verdict: Verdict,
  allow: Allowances = {},
  transport: (req: Req) => Promise<Res> = send,
): Promise<Res> {
  const before = snapshot();
  const res = await transport(req);
  const after = snapshot();
  const written = after.count - before.count;
  const fail = (why: string): never => {
    throw new Error(
      `${why}\n  request: ${describeReq(req)}\n  verdict: ${JSON.stringify(verdict)}\n` +
        `  answer: ${res.status} ${res.text.slice(0, 800)}\n  log: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`,
    );
  };
  if (after.head - before.head !== written) fail('the log changed other than by appending events');
  const ok = res.status >= 200 && res.status < 300;
  const parsed = parseJson(res.text);
  if (res.status >= 500) {
    const documented =
      res.status === 503 &&
      ((allow.projectionBehind && parsed.error === 'projection_behind') ||
        (allow.mirrorOff && parsed.error === 'mirror_off'));
    if (!documented) fail(`answered ${res.status}`);
    if (written !== 0) fail('a 503 wrote to the log');
    return res;
  }
  if (!ok) {
    if (!ALLOWED_4XX.includes(res.status)) fail(`answered ${res.status}, not an expected 4xx`);
    if (!allow.noBody) {
      if (!/application\/json/.test(String(res.headers['content-type'])))
        fail('an error answered without a JSON content type');
      if (typeof parsed.error !== 'string') fail('an error answered without a string `error`');
    }
    if (written !== 0) fail(`a ${res.status} wrote ${written} event(s) to the log`);
    // Node refuses a request line and headers over 16 KiB (431) before the app sees them.
    const oversize = res.status === 431 && requestSize(req) > 16 * 1024;
    if (verdict.kind === 'read' && verdict.mustSucceed && !oversize)
      fail('a valid read was refused');
    return res;
  }
  if (verdict.kind === 'refuse') fail(`invalid input answered ${res.status}`);
  if (verdict.kind === 'read' && written !== 0) fail(`a read wrote ${written} event(s)`);
  if (verdict.kind === 'write') {
    const whole = written === verdict.events || (verdict.idempotent === true && written === 0);
    if (!whole) fail(`a ${res.status} wrote ${written} of ${verdict.events} event(s)`);
  }
  if (!allow.noBody && !allow.ndjson && parsed.invalid) fail('a 2xx answered no JSON');
  return res;
}

function parseJson(text: string): { error?: unknown; invalid?: true } {
  try {
    const value: unknown = JSON.parse(text);
    return isPlainObject(value) ? value : {};
  } catch {
    return { invalid: true };
  }
}

// ---------------------------------------------------------------------------------------------
// Oracles: what the documented API says about an input, independent of the server's answer

function principalOf(authorization: string | undefined) {
  const match = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return match ? (PRINCIPALS.get(match[1]) ?? null) : null;
}

function can(authorization: string | undefined, scope: string): string | null {
  const principal = principalOf(authorization);
  return principal && principal.scopes.includes(scope) ? principal.tenant : null;
}

/** The decoded path segment, or null when it cannot be decoded (the router answers 400). */
function decodeSegment(segment: string): string | null {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

/** Whose resource an id is: a seeded owner, `unknown` for a well-formed other id, `invalid`. */
function ownerOf(segment: string, known: Record<string, string>): string | 'unknown' | 'invalid' {
  const id = decodeSegment(segment);
  if (id === null || !PATH_ID_PATTERN.test(id)) return 'invalid';
  return Object.hasOwn(known, id) ? known[id] : 'unknown';
}

/**
 * Whether the acting user a request names is accepted: naming none (absent or blank) always
 * is; naming one needs a key with act-as, and a name that percent-decodes to 1–128 printable
 * characters (no controls, separators or format characters but the joiners), trimmed, not
 * spelled like a key's identity (`key:`).
 */
function userValid(authorization: string | undefined, value: string | undefined): boolean {
  const sent = value?.trim() ?? '';
  if (sent === '') return true;
  if (!principalOf(authorization)?.scopes.includes('act-as')) return false;
  let name: string;
  try {
    name = decodeURIComponent(sent).trim();
  } catch {
    return false;
  }
  return (
    name !== '' &&
    [...name].length <= 128 &&
    // eslint-disable-next-line no-control-regex
    !/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(name) &&
    // Format characters (bidirectional controls, zero-width spaces), but for the joiners.
    ![...name].some((c) => /\p{Cf}/u.test(c) && c !== '\u200c' && c !== '\u200d') &&
    !name.startsWith('key:')
  );
}

/** The body as the server's JSON parser reads it, or undefined when it refuses it. */
function parseBody(text: string): { value: unknown } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text.replace(/^\uFEFF/, ''));
  } catch {
    return undefined;
  }
  const poisoned = (node: unknown): boolean => {
    if (Array.isArray(node)) return node.some(poisoned);
    if (!isPlainObject(node)) return false;
    if (Object.prototype.hasOwnProperty.call(node, '__proto__')) return true;
    const ctor = Object.prototype.hasOwnProperty.call(node, 'constructor')
      ? node.constructor
      : undefined;
    if (isPlainObject(ctor) && Object.prototype.hasOwnProperty.call(ctor, 'prototype')) return true;
    return Object.values(node).some(poisoned);
  };
  return poisoned(value) ? undefined : { value };
}

function queryIntValid(raw: string | string[] | undefined, min: number, max: number): boolean {
  if (raw === undefined || raw === '') return true;
  if (typeof raw !== 'string' || !/^\d+$/.test(raw)) return false;
  const value = Number(raw);
  return Number.isSafeInteger(value) && value >= min && value <= max;
}

/** The append body's verdict: the envelope rules of docs/api.md and the domain's event schemas. */
function appendBodyVerdict(text: string): Verdict {
  const parsed = parseBody(text);
  if (!parsed || !isPlainObject(parsed.value)) return REFUSE;
  const body = parsed.value;
  if (Object.keys(body).some((k) => k !== 'expectedRevision' && k !== 'events')) return REFUSE;
  const { expectedRevision = 'any', events } = body;
  const revisionOk =
    (typeof expectedRevision === 'number' &&
      Number.isSafeInteger(expectedRevision) &&
      expectedRevision >= 0) ||
    ['no_stream', 'stream_exists', 'any'].includes(expectedRevision as string);
  if (!revisionOk || !Array.isArray(events) || events.length === 0 || events.length > 1000)
    return REFUSE;
  for (const event of events) {
    let checked: ReturnType<typeof validateEvent>;
    try {
      checked = validateEvent(event);
    } catch {
      // The schemas could not decide (the same input fails the server's own validator): the
      // server must refuse it or record it whole, and never answer 5xx.
      continue;
    }
    if (!checked.ok || SERVER_ONLY_TYPES.has(checked.value.type)) return REFUSE;
  }
  return {
    kind: 'write',
    events: events.length,
    idempotent: events.some((e) => isPlainObject(e) && e.id !== undefined),
  };
}

function appendVerdict(segment: string, headers: Req['headers'], body: string): Verdict {
  const tenant = can(headers.authorization, 'append');
  const owner = ownerOf(segment, RUNS);
  if (!tenant || owner === 'invalid' || (owner !== 'unknown' && owner !== tenant)) return REFUSE;
  return appendBodyVerdict(body);
}

// ---------------------------------------------------------------------------------------------
// Generators of whole requests (their parts come from ./testing/fuzz-arbitraries)

const jsonHeaders = (auth: string | undefined) => ({
  authorization: auth,
  'content-type': 'application/json',
});

/** A run id for a write: mostly the sink run, then foreign, finished, unknown and hostile ids. */
const runSegment: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constant(SEED.runSink), weight: 8 },
  { arbitrary: fc.constantFrom(SEED.runB, SEED.runFinished), weight: 2 },
  { arbitrary: hostileSegment, weight: 3 },
);

// ---------------------------------------------------------------------------------------------
// The properties

describe('POST /v1/runs/:runId/events', () => {
  it('refuses random envelopes with a JSON 4xx and writes nothing (or all of a valid batch)', async () => {
    await fc.assert(
      fc.asyncProperty(runSegment, authorization, appendEnvelope, async (segment, auth, tree) => {
        const body = jsonText(tree);
        const req: Req = {
          method: 'POST',
          path: `/v1/runs/${segment}/events`,
          headers: jsonHeaders(auth),
          body,
        };
        await check(req, appendVerdict(segment, req.headers, body));
      }),
      runs(200),
    );
  });

  it('refuses a valid catalogue example with one field mutated unless it is still valid', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(mutatedExample, { minLength: 1, maxLength: 3 }),
        fc.option(expectedRevision, { nil: undefined }),
        async (batch, revision) => {
          const tree = new Obj([
            ...(revision === undefined ? [] : [['expectedRevision', revision] as [string, Tree]]),
            ['events', batch],
          ]);
          const body = jsonText(tree);
          const headers = jsonHeaders(`Bearer ${KEYS.tenantA}`);
          await check(
            { method: 'POST', path: `/v1/runs/${SEED.runSink}/events`, headers, body },
            appendVerdict(SEED.runSink, headers, body),
          );
        },
      ),
      runs(200),
    );
  });

  it('refuses bodies that are not JSON objects: truncated, invalid UTF-8, wrong content types', async () => {
    const valid = JSON.stringify({
      events: [{ type: 'message.added', data: EVENT_DATA_EXAMPLES['message.added'] }],
    });
    const body = fc.oneof(
      fc.constantFrom(
        '',
        ' ',
        'null',
        '[]',
        '{}',
        '"events"',
        '123',
        'true',
        '\uFEFF{}',
        '{"events":[]}',
      ),
      fc.nat().map((n) => valid.slice(0, n % valid.length)),
      fc.tuple(fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 4 })).map(([n, bytes]) => {
        const at = n % valid.length;
        const raw = Buffer.from(valid);
        return Buffer.concat([raw.subarray(0, at), Buffer.from(bytes), raw.subarray(at)]);
      }),
      fc.constantFrom(
        Buffer.from([0xff, 0xfe, 0x7b, 0x00, 0x7d, 0x00]),
        Buffer.from(
          '{"events":[{"type":"message.added","data":{"messageId":"m","role":"user","text":"\xed\xa0\x80"}}]}',
          'latin1',
        ),
      ),
      fc.constant(valid),
    );
    await fc.assert(
      fc.asyncProperty(body, contentType, async (payload, type) => {
        const headers = { authorization: `Bearer ${KEYS.tenantA}`, 'content-type': type };
        // The server reads the bytes as UTF-8 (bad sequences become U+FFFD). A valid batch may
        // still be refused for its content type; text/plain hands the handler a string.
        const text = Buffer.isBuffer(payload) ? payload.toString('utf8') : payload;
        const verdict = /^text\/plain/.test(type ?? '')
          ? REFUSE
          : appendVerdict(SEED.runSink, headers, text);
        await check(
          { method: 'POST', path: `/v1/runs/${SEED.runSink}/events`, headers, body: payload },
          verdict,
        );
      }),
      runs(150),
    );
  });
});

interface QueryParam {
  name: string;
  value: string | undefined;
  twice: boolean;
}

function queryString(params: QueryParam[]): string {
  const parts = params.flatMap(({ name, value, twice }) =>
    value === undefined
      ? []
      : Array.from({ length: twice ? 2 : 1 }, () => `${encodeLoose(name)}=${encodeLoose(value)}`),
  );
  return parts.length === 0 ? '' : `?${parts.join('&')}`;
}

/** Each param's value as the controller sees it: undefined, a string, or (repeated) an array. */
function valueOf(params: QueryParam[], name: string): string | string[] | undefined {
  const p = params.find((q) => q.name === name && q.value !== undefined);
  if (!p || p.value === undefined) return undefined;
  return p.twice ? [p.value, p.value] : p.value;
}

/** An encoded value the server may decode otherwise than encodeURIComponent (lone surrogates). */
function ambiguous(params: QueryParam[]): boolean {
  return params.some(({ value }) => {
    if (value === undefined) return false;
    try {
      encodeURIComponent(value);
      return false;
    } catch {
      return true;
    }
  });
}

const param = (name: string): fc.Arbitrary<QueryParam> =>
  fc.record({ name: fc.constant(name), value: queryValue, twice: fc.boolean() });

const extraParam: fc.Arbitrary<QueryParam> = fc.record({
  name: fc.oneof(fc.constantFrom(...PROTOTYPE_KEYS, 'foo', 'limit[]', 'a.b'), hostileString),
  value: queryValue,
  twice: fc.boolean(),
});

/**
 * Whether a minPosition may answer 503 projection_behind, as documented: one past the log's
 * head always does, and any other may while the projection catches up with a recent write.
 */
function mayBeBehind(raw: string | string[] | undefined): boolean {
  return typeof raw === 'string' && raw !== '' && queryIntValid(raw, 0, Number.MAX_SAFE_INTEGER);
}

const readSegment = (own: string, foreign: string): fc.Arbitrary<string> =>
  fc.oneof(
    { arbitrary: fc.constant(own), weight: 5 },
    { arbitrary: fc.constant(foreign), weight: 1 },
    { arbitrary: hostileSegment, weight: 3 },
  );

/**
 * A read's verdict: refused when unauthorized, malformed or foreign; must succeed when own
 * (and `ownMustSucceed`). `unknown` params are those the server may decode otherwise.
 */
function readVerdict(
  auth: string | undefined,
  owner: string | 'unknown' | 'invalid',
  params: boolean | 'unknown',
  ownMustSucceed = true,
): Verdict {
  const tenant = can(auth, 'read');
  if (!tenant || owner === 'invalid' || params === false) return REFUSE;
  if (owner === 'unknown' || params === 'unknown') return { kind: 'read', mustSucceed: false };
  if (owner !== tenant) return REFUSE;
  return { kind: 'read', mustSucceed: ownMustSucceed };
}

describe('GET /v1/runs/:runId/…', () => {
  it('events: random fromRevision and limit answer 200 only when valid, never 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        readSegment(SEED.runA, SEED.runB),
        authorization,
        param('fromRevision'),
        param('limit'),
        fc.option(extraParam, { nil: undefined }),
        async (segment, auth, from, limit, extra) => {
          const params = [from, limit, ...(extra ? [extra] : [])];
          const valid =
            queryIntValid(valueOf(params, 'fromRevision'), 0, Number.MAX_SAFE_INTEGER) &&
            queryIntValid(valueOf(params, 'limit'), 1, 1000);
          await check(
            {
              method: 'GET',
              path: `/v1/runs/${segment}/events${queryString(params)}`,
              headers: { authorization: auth },
            },
            readVerdict(auth, ownerOf(segment, RUNS), ambiguous(params) ? 'unknown' : valid),
          );
        },
      ),
      runs(150),
    );
  });

  it('replay and audit: hostile ids and keys answer a JSON 4xx, own runs 200', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('replay', 'audit'),
        readSegment(SEED.runA, SEED.runB),
        authorization,
        async (route, segment, auth) => {
          await check(
            {
              method: 'GET',
              path: `/v1/runs/${segment}/${route}`,
              headers: { authorization: auth },
            },
            readVerdict(auth, ownerOf(segment, RUNS), true),
            { ndjson: route === 'replay' },
          );
        },
      ),
      runs(150),
    );
  });
});

/**
 * Like `send`, but an answer that is a Server-Sent Events stream is read up to its first
 * message and then cut off (a stream never ends by itself); its text is that message.
 */
function sendStream(req: Req): Promise<Res> {
  return new Promise<Res>((resolve, reject) => {
    const outgoing = httpRequest(
      {
        host: '127.0.0.1',
        port,
        method: req.method,
        path: req.path,
        headers: defined(req.headers),
        agent: false,
      },
      (res) => {
        let text = '';
        const streaming = /^text\/event-stream/.test(String(res.headers['content-type']));
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
          if (streaming && text.includes('\n\n')) {
            resolve({ status: res.statusCode ?? 0, headers: res.headers, text });
            outgoing.destroy();
          }
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
        res.on('error', () => undefined);
      },
    );
    outgoing.setTimeout(15_000, () => outgoing.destroy(new Error('no answer within 15 s')));
    outgoing.on('error', (error) => {
      if (!outgoing.destroyed || error.message.includes('15 s')) reject(error);
    });
    outgoing.end();
  });
}

/** A Last-Event-ID header: absent, a position, blank, or noise a client could send. */
const lastEventId: fc.Arbitrary<string | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.nat().map(String),
  fc.constantFrom('', ' ', '-1', '1e3', '0x10', '9007199254740993', ' 12 '),
  fc.string({ unit: fc.constantFrom('1', 'a', '.', '-', ' ', 'é'), maxLength: 12 }),
);

/**
 * Where a stream starts, as docs/api.md says: Last-Event-ID wins over ?from=; both positions,
 * at most the log's head (a start past it would skip events unseen).
 */
function streamStartValid(lid: string | undefined, from: string | string[] | undefined): boolean {
  const given = (raw: string | undefined) => raw !== undefined && raw.trim() !== '';
  const { head } = snapshot();
  if (given(lid)) return queryIntValid((lid as string).trim(), 0, head);
  if (typeof from === 'string' && from.trim() === '') return true;
  return queryIntValid(typeof from === 'string' ? from.trim() : from, 0, head);
}

describe('GET …/stream (Server-Sent Events) and the mirror admin routes', () => {
  it('streams: hostile ids, keys, ?from= and Last-Event-ID answer a JSON 4xx, valid ones a stream', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.tuple(fc.constant('runs' as const), readSegment(SEED.runA, SEED.runB)),
          fc.tuple(fc.constant('threads' as const), readSegment(SEED.threadA, SEED.threadB)),
        ),
        authorization,
        param('from'),
        lastEventId,
        async ([kind, target], auth, from, lid) => {
          const known = kind === 'runs' ? RUNS : THREADS;
          const params = [from];
          const valid = ambiguous(params)
            ? 'unknown'
            : streamStartValid(lid, valueOf(params, 'from'));
          const res = await check(
            {
              method: 'GET',
              path: `/v1/${kind}/${target}/stream${queryString(params)}`,
              headers: { authorization: auth, 'last-event-id': lid },
            },
            readVerdict(auth, ownerOf(target, known), valid),
            { ndjson: true },
            sendStream,
          );
          if (res.status === 200) {
            expect(String(res.headers['content-type'])).toMatch(/^text\/event-stream/);
            expect(res.text).toMatch(/^(id|event|:)/m);
          }
        },
      ),
      runs(100),
    );
  });

  it('mirror admin: hostile event ids and keys never write, and answer a JSON 4xx or mirror_off', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.boolean(),
        fc.oneof(fc.constant(randomUUID()), hostileSegment),
        authorization,
        async (retry, eventId, auth) => {
          const admin = can(auth, 'admin') !== null;
          await check(
            {
              method: retry ? 'POST' : 'GET',
              path: retry ? `/v1/admin/mirror/parked/${eventId}/retry` : '/v1/admin/mirror/parked',
              headers: { authorization: auth },
            },
            admin ? { kind: 'read', mustSucceed: false } : REFUSE,
            { mirrorOff: admin },
          );
        },
      ),
      runs(100),
    );
  });
});

/** A cursor: the real one, well-formed ones naming any place (never issued), or noise. */
const cursorValue: fc.Arbitrary<string | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.constant('real'),
  fc
    .tuple(hostileString, hostileString)
    .map(([a, b]) => Buffer.from(JSON.stringify([a, b])).toString('base64url')),
  hostileTree.map((tree) => Buffer.from(jsonText(tree)).toString('base64url')),
  hostileString,
);

/**
 * Only the cursor the list issued is taken, and only from the tenant it was issued to (the
 * seed read it with tenant A's key): well-formed ones naming any other place are refused.
 */
function cursorValid(raw: string | string[] | undefined, tenant: string): boolean {
  return raw === undefined || (raw === realCursor && tenant === TENANT_A);
}

describe('GET /v1/threads…', () => {
  it('list: random status, limit, cursor and minPosition answer 200 only when valid', async () => {
    await fc.assert(
      fc.asyncProperty(
        authorization,
        fc.record({
          name: fc.constant('status'),
          value: fc.oneof(
            fc.constantFrom(undefined, 'running', 'blocked', 'idle', 'finished', 'RUNNING', ''),
            queryValue,
          ),
          twice: fc.boolean(),
        }),
        param('limit'),
        fc.record({ name: fc.constant('cursor'), value: cursorValue, twice: fc.boolean() }),
        param('minPosition'),
        async (auth, status, limit, cursor, min) => {
          if (cursor.value === 'real') cursor = { ...cursor, value: realCursor };
          const params = [status, limit, cursor, min];
          const statusValue = valueOf(params, 'status');
          const valid =
            (statusValue === undefined ||
              ['running', 'blocked', 'idle', 'finished'].includes(statusValue as string)) &&
            queryIntValid(valueOf(params, 'limit'), 1, 100) &&
            cursorValid(valueOf(params, 'cursor'), can(auth, 'read') ?? TENANT_A) &&
            queryIntValid(valueOf(params, 'minPosition'), 0, Number.MAX_SAFE_INTEGER);
          // The list is the caller's own: it has no owner to be foreign to.
          const owner = can(auth, 'read') ?? TENANT_A;
          await check(
            {
              method: 'GET',
              path: `/v1/threads${queryString(params)}`,
              headers: { authorization: auth },
            },
            readVerdict(auth, owner, ambiguous(params) ? 'unknown' : valid),
            { projectionBehind: mayBeBehind(valueOf(params, 'minPosition')) },
          );
        },
      ),
      runs(150),
    );
  });

  it('view, voice-seed and tool-results: hostile ids and queries answer a JSON 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('view', 'voice-seed', 'tool-results'),
        readSegment(SEED.threadA, SEED.threadB),
        fc.oneof(fc.constant('tc-1'), hostileSegment),
        authorization,
        fc.record({
          name: fc.constant('for'),
          value: fc.oneof(
            fc.constantFrom(undefined, 'voice', 'VOICE', 'voice ', 'text'),
            queryValue,
          ),
          twice: fc.boolean(),
        }),
        param('minPosition'),
        async (route, segment, toolCall, auth, audience, min) => {
          const params = route === 'tool-results' ? [audience, min] : [min];
          const path =
            route === 'view'
              ? `/v1/threads/${segment}`
              : route === 'voice-seed'
                ? `/v1/threads/${segment}/voice-seed`
                : `/v1/threads/${segment}/tool-results/${toolCall}`;
          const audienceValue = valueOf(params, 'for');
          const valid =
            (audienceValue === undefined || audienceValue === 'voice') &&
            queryIntValid(valueOf(params, 'minPosition'), 0, Number.MAX_SAFE_INTEGER) &&
            (route !== 'tool-results' || decodeSegment(toolCall) !== null);
          const verdict = readVerdict(
            auth,
            ownerOf(segment, THREADS),
            ambiguous(params) ? 'unknown' : valid,
            route !== 'tool-results' || toolCall === 'tc-1',
          );
          await check(
            {
              method: 'GET',
              path: `${path}${queryString(params)}`,
              headers: { authorization: auth },
            },
            verdict,
            { projectionBehind: mayBeBehind(valueOf(params, 'minPosition')) },
          );
        },
      ),
      runs(150),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Commands

type Command = 'steer' | 'stop' | 'resolve' | 'answer' | 'consume';

function validCommandBody(command: Command): Record<string, unknown> {
  switch (command) {
    case 'steer':
      return { expectedTurnId: 'turn-1', instruction: 'use the staging database' };
    case 'stop':
      return { reason: 'the caller hung up' };
    case 'resolve':
    case 'answer':
      return { decision: 'deny' };
    case 'consume':
      return { receipt: receipt.value, toolName: receipt.toolName, input: receipt.input };
  }
}

/** A length as class-validator's MaxLength counts it: code points, less variation selectors. */
const charLength = (text: string) =>
  Array.from(text).length - (text.match(/[\uFE0E\uFE0F]/g)?.length ?? 0);

const nonBlank = (v: unknown, max = Infinity) =>
  typeof v === 'string' && v !== '' && charLength(v) <= max;

/** The command bodies of docs/api.md: exactly these fields, of these types. */
function commandBodyValid(command: Command, body: unknown): boolean {
  if (!isPlainObject(body)) return false;
  const keys = Object.keys(body).sort().join(',');
  switch (command) {
    case 'steer':
      return (
        keys === 'expectedTurnId,instruction' &&
        nonBlank(body.expectedTurnId, 256) &&
        nonBlank(body.instruction)
      );
    case 'stop':
      return keys === '' || (keys === 'reason' && nonBlank(body.reason, 4096));
    case 'resolve':
    case 'answer':
      return keys === 'decision' && (body.decision === 'allow' || body.decision === 'deny');
    case 'consume':
      return (
        keys === 'input,receipt,toolName' &&
        nonBlank(body.receipt) &&
        nonBlank(body.toolName, 1024) &&
        // Only the seeded receipt's signed claims can verify.
        (body.receipt as string).split('.')[0] === receipt.value.split('.')[0] &&
        (body.receipt as string).split('.').length === 2
      );
  }
}

interface CommandInput {
  command: Command;
  target: string;
  approval: string;
  auth: string | undefined;
  user: string | undefined;
  minPosition: string | undefined;
}

function commandPath(input: CommandInput): string {
  const min =
    input.minPosition === undefined ? '' : `?minPosition=${encodeLoose(input.minPosition)}`;
  switch (input.command) {
    case 'steer':
    case 'stop':
      return `/v1/runs/${input.target}/${input.command}`;
    case 'resolve':
      return `/v1/runs/${input.target}/approvals/${input.approval}/resolve`;
    case 'answer':
      return `/v1/threads/${input.target}/approvals/answer${min}`;
    case 'consume':
      return '/v1/receipts/consume';
  }
}

function commandVerdict(input: CommandInput, body: string): Verdict {
  const approves = input.command === 'resolve' || input.command === 'answer';
  const tenant = can(input.auth, approves ? 'approve' : 'append');
  if (!tenant || !userValid(input.auth, input.user)) return REFUSE;
  const parsed = parseBody(body);
  if (!parsed || !commandBodyValid(input.command, parsed.value)) return REFUSE;
  // The seeded receipt is tenant A's: another tenant does not find it; any caller of tenant A
  // with `append` may spend it (the runtime consumes what a person decided), once.
  if (input.command === 'consume')
    return tenant === TENANT_A ? { kind: 'write', events: 1 } : REFUSE;
  if (input.command === 'answer') {
    if (!queryIntValid(input.minPosition, 0, Number.MAX_SAFE_INTEGER)) return REFUSE;
    const id = decodeSegment(input.target);
    if (id === null) return REFUSE;
    const owner = Object.hasOwn(THREADS, id) ? THREADS[id] : undefined;
    return owner !== undefined && owner !== tenant ? REFUSE : { kind: 'write', events: 1 };
  }
  if (input.command === 'resolve' && decodeSegment(input.approval) === null) return REFUSE;
  const owner = ownerOf(input.target, RUNS);
  if (owner === 'invalid' || (owner !== 'unknown' && owner !== tenant)) return REFUSE;
  return { kind: 'write', events: 1 };
}

/** A command, its target and headers, and a body: a mutation of the valid one, or noise. */
const commandCase = fc.record({
  command: fc.constantFrom<Command>('steer', 'stop', 'resolve', 'answer', 'consume'),
  target: fc.oneof(
    { arbitrary: fc.constantFrom<'own' | 'foreign' | 'finished'>('own'), weight: 6 },
    {
      arbitrary: fc.constantFrom<'own' | 'foreign' | 'finished'>('foreign', 'finished'),
      weight: 2,
    },
    { arbitrary: hostileSegment, weight: 3 },
  ),
  approval: fc.oneof({ arbitrary: fc.constant('ap-1'), weight: 3 }, hostileSegment),
  auth: authorization,
  user: fc.oneof({ arbitrary: fc.constant(undefined), weight: 3 }, userHeader),
  minPosition: fc.oneof({ arbitrary: fc.constant(undefined), weight: 3 }, queryValue),
  body: fc.oneof(
    { arbitrary: mutation.map((m) => ({ mutation: m })), weight: 3 },
    { arbitrary: hostileTree.map((tree) => ({ tree })), weight: 1 },
  ),
});

function commandTarget(command: Command, target: string): string {
  const thread = command === 'answer';
  if (target === 'own')
    return command === 'stop' ? SEED.runStop : thread ? SEED.threadA : SEED.runA;
  if (target === 'foreign') return thread ? SEED.threadB : SEED.runB;
  if (target === 'finished') return thread ? SEED.threadFinished : SEED.runFinished;
  return target;
}

describe('POST commands (steer, stop, resolve, answer, consume)', () => {
  it('refuse random and mutated bodies, hostile ids and users with a JSON 4xx, writing nothing', async () => {
    await fc.assert(
      fc.asyncProperty(commandCase, async ({ body: generated, target, ...rest }) => {
        const input: CommandInput = { ...rest, target: commandTarget(rest.command, target) };
        // The valid body is built here: the receipt exists only once the log is seeded.
        const body =
          'mutation' in generated
            ? jsonText(mutate(toTree(validCommandBody(input.command)), generated.mutation))
            : jsonText(generated.tree);
        const req: Req = {
          method: 'POST',
          path: commandPath(input),
          headers: { ...jsonHeaders(input.auth), 'x-runledger-user': input.user },
          body,
        };
        await check(req, commandVerdict(input, body), {
          projectionBehind: input.command === 'answer' && mayBeBehind(input.minPosition),
        });
      }),
      runs(200),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Headers on every route

/**
 * A route with a valid target of tenant A (or none: the list, the public probes). Every
 * authenticated route reads X-Runledger-User (the access guard resolves the acting user) and
 * refuses a bad one. A valid POST writes one event.
 */
const route = (
  name:
    | 'append'
    | 'events'
    | 'replay'
    | 'audit'
    | 'threads'
    | 'thread'
    | 'voice-seed'
    | 'tool-results'
    | 'live'
    | 'ready'
    | 'metrics'
    | 'docs-json'
    | Command,
  method: 'GET' | 'POST',
  path: string,
  scope: 'read' | 'append' | 'approve' | 'public',
) => ({
  name,
  method,
  path,
  writes: method === 'POST' ? 1 : 0,
  scope,
  owner: path.includes('/fz-') || name === 'consume' ? TENANT_A : null,
});

/** Every route with a valid target: only the headers (or the method) make a call wrong. */
const ROUTES = [
  route('append', 'POST', `/v1/runs/${SEED.runSink}/events`, 'append'),
  route('events', 'GET', `/v1/runs/${SEED.runA}/events?limit=5`, 'read'),
  route('replay', 'GET', `/v1/runs/${SEED.runA}/replay`, 'read'),
  route('audit', 'GET', `/v1/runs/${SEED.runA}/audit`, 'read'),
  route('threads', 'GET', '/v1/threads?limit=5', 'read'),
  route('thread', 'GET', `/v1/threads/${SEED.threadA}`, 'read'),
  route('voice-seed', 'GET', `/v1/threads/${SEED.threadA}/voice-seed`, 'read'),
  route('tool-results', 'GET', `/v1/threads/${SEED.threadA}/tool-results/tc-1?for=voice`, 'read'),
  route('steer', 'POST', `/v1/runs/${SEED.runA}/steer`, 'append'),
  route('stop', 'POST', `/v1/runs/${SEED.runStop}/stop`, 'append'),
  route('resolve', 'POST', `/v1/runs/${SEED.runA}/approvals/ap-1/resolve`, 'approve'),
  route('answer', 'POST', `/v1/threads/${SEED.threadA}/approvals/answer`, 'approve'),
  route('consume', 'POST', '/v1/receipts/consume', 'append'),
  route('live', 'GET', '/health/live', 'public'),
  route('ready', 'GET', '/health/ready', 'public'),
  route('metrics', 'GET', '/metrics', 'public'),
  route('docs-json', 'GET', '/docs-json', 'public'),
];

const notJson = (name: string): Allowances => ({ ndjson: name === 'replay' || name === 'metrics' });

/** A valid body for a POST route (a fresh message for the append, so it is never a re-send). */
function routeBody(r: (typeof ROUTES)[number]): string | undefined {
  if (r.method === 'GET') return undefined;
  if (r.name === 'append') {
    return JSON.stringify({
      events: [
        { type: 'message.added', data: { messageId: randomUUID(), role: 'user', text: 'hi' } },
      ],
    });
  }
  return JSON.stringify(validCommandBody(r.name as Command));
}

describe('headers on every route', () => {
  it('random Content-Type, Authorization and X-Runledger-User never answer 5xx or write when refused', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ROUTES),
        authorization,
        contentType,
        userHeader,
        fc.option(fc.constantFrom('a.json', '*/*', 'text/html', 'application/x-ndjson'), {
          nil: undefined,
        }),
        async (route, auth, type, user, accept) => {
          const req: Req = {
            method: route.method,
            path: route.path,
            headers: {
              authorization: auth,
              'content-type': route.method === 'POST' ? type : undefined,
              'x-runledger-user': user,
              accept,
            },
            body: routeBody(route),
          };
          const tenant = route.scope === 'public' ? 'anyone' : can(auth, route.scope);
          const allowed =
            tenant !== null &&
            (route.owner === null || route.scope === 'public' || tenant === route.owner) &&
            (route.scope === 'public' || userValid(auth, user));
          const verdict: Verdict = !allowed
            ? REFUSE
            : route.method === 'GET'
              ? { kind: 'read', mustSucceed: true }
              : // Another content type may or may not be read as JSON: a 2xx still writes whole.
                { kind: 'write', events: route.writes };
          await check(req, verdict, notJson(route.name));
        },
      ),
      runs(200),
    );
  });

  it('raw bytes in paths and header values never answer 5xx', async () => {
    const headerValue = fc.oneof(
      fc.uint8Array({ minLength: 0, maxLength: 40 }).map((bytes) => Buffer.from(bytes)),
      fc.string({ unit: 'grapheme', maxLength: 20 }).map((s) => Buffer.from(s, 'utf8')),
      fc.constantFrom(
        Buffer.from('a\x00b', 'latin1'),
        Buffer.from('a\x01b', 'latin1'),
        Buffer.from('a\x7fb', 'latin1'),
        Buffer.from('a\x85b', 'latin1'),
        Buffer.from('a\rb', 'latin1'),
        Buffer.from('a\r\nX-Injected: 1', 'latin1'),
        Buffer.from('x'.repeat(20_000)),
      ),
    );
    const pathBytes = fc.oneof(
      hostileSegment.map((s) => Buffer.from(s)),
      fc.uint8Array({ minLength: 1, maxLength: 16 }).map((bytes) => Buffer.from(bytes)),
      fc
        .string({ unit: 'grapheme', minLength: 1, maxLength: 10 })
        .map((s) => Buffer.from(s, 'utf8')),
      fc.constantFrom(Buffer.from('../../health/live'), Buffer.from('a/../b'), Buffer.from('a b')),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ROUTES),
        fc.constantFrom('authorization', 'x-runledger-user', 'content-type', 'x-other'),
        headerValue,
        pathBytes,
        fc.boolean(),
        async (route, headerName, value, segment, hostilePath) => {
          // The route's id (or, without one, a path piece appended) replaced by raw bytes.
          const id = Object.values(SEED).find((v) => route.path.includes(`/${v}`));
          const [head, tail] = id ? route.path.split(id) : [`${route.path.split('?')[0]}/`, ''];
          const path = hostilePath
            ? Buffer.concat([Buffer.from(head), segment, Buffer.from(tail)])
            : Buffer.from(route.path);
          // Every write carries an invalid body: whatever the headers say, nothing may be written.
          const body =
            route.method === 'POST' ? Buffer.from('{"invalid-field":1}') : Buffer.alloc(0);
          const lines: Buffer[] = [
            Buffer.concat([Buffer.from(`${route.method} `), path, Buffer.from(' HTTP/1.1\r\n')]),
            Buffer.from(
              `host: 127.0.0.1\r\nconnection: close\r\ncontent-length: ${body.length}\r\n`,
            ),
          ];
          if (headerName !== 'authorization')
            lines.push(Buffer.from(`authorization: Bearer ${KEYS.tenantA}\r\n`));
          if (headerName !== 'content-type' && route.method === 'POST')
            lines.push(Buffer.from('content-type: application/json\r\n'));
          lines.push(Buffer.concat([Buffer.from(`${headerName}: `), value, Buffer.from('\r\n')]));
          lines.push(Buffer.from('\r\n'), body);
          const bytes = Buffer.concat(lines);
          const req: Req = {
            method: route.method,
            path: path.toString('latin1'),
            headers: { [headerName]: value.toString('latin1') },
            body: bytes,
          };
          await check(
            req,
            route.method === 'GET' ? { kind: 'read', mustSucceed: false } : REFUSE,
            notJson(route.name),
            () => sendRaw(bytes),
          );
        },
      ),
      runs(150),
    );
  });

  it('other methods on every path answer a JSON 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ROUTES),
        fc.constantFrom(
          'PUT',
          'PATCH',
          'DELETE',
          'OPTIONS',
          'HEAD',
          'PROPFIND',
          'TRACE',
          'GET',
          'POST',
        ),
        authorization,
        async (route, method, auth) => {
          if (method === route.method) return;
          const req: Req = {
            method,
            path: route.path,
            headers: jsonHeaders(auth),
            body:
              method === 'GET' || method === 'HEAD' || method === 'TRACE'
                ? undefined
                : (routeBody(route) ?? '{}'),
          };
          // HEAD is GET without a body; the append's path also reads the run's events (GET).
          const reads =
            (method === 'HEAD' && route.method === 'GET') ||
            ((method === 'HEAD' || method === 'GET') && route.name === 'append');
          const verdict: Verdict = reads ? { kind: 'read', mustSucceed: false } : REFUSE;
          await check(req, verdict, { noBody: method === 'HEAD' });
        },
      ),
      runs(100),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Object.prototype's names as keys inside bodies

describe("Object.prototype's names as keys deep inside event data and command bodies", () => {
  it('are refused with a JSON 4xx or recorded whole, never a 5xx', async () => {
    // `__proto__` is refused by the JSON parser itself; these reach the validators.
    const key = fc.constantFrom(...PROTOTYPE_KEYS.filter((k) => k !== '__proto__'));
    const value = hostileTree.filter(
      (v) => !(v instanceof Obj && v.entries.some(([k]) => k === 'prototype')),
    );
    const target = fc.oneof(
      fc.constantFrom(...EVENT_TYPES.filter((type) => !SERVER_ONLY_TYPES.has(type))),
      fc.constantFrom<Command>('steer', 'stop', 'resolve', 'answer', 'consume'),
    );
    await fc.assert(
      fc.asyncProperty(target, fc.nat(), key, value, async (name, at, k, v) => {
        const headers = jsonHeaders(`Bearer ${KEYS.tenantA}`);
        if ((EVENT_TYPES as readonly string[]).includes(name)) {
          const data = toTree(
            structuredClone(EVENT_DATA_EXAMPLES[name as keyof typeof EVENT_DATA_EXAMPLES]),
          );
          const event = new Obj([
            ['type', name],
            ['data', mutate(data, { at, op: 'add', key: k, value: v })],
          ]);
          const body = jsonText(new Obj([['events', [event]]]));
          await check(
            { method: 'POST', path: `/v1/runs/${SEED.runSink}/events`, headers, body },
            appendVerdict(SEED.runSink, headers, body),
          );
          return;
        }
        const command = name as Command;
        const input: CommandInput = {
          command,
          target: commandTarget(command, 'own'),
          approval: 'ap-1',
          auth: headers.authorization,
          user: undefined,
          minPosition: undefined,
        };
        const nested = new Obj([[k, v]]);
        const body = jsonText(
          mutate(toTree(validCommandBody(command)), { at, op: 'replace', key: k, value: nested }),
        );
        await check(
          { method: 'POST', path: commandPath(input), headers, body },
          commandVerdict(input, body),
        );
      }),
      runs(150),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Numbers JSON.parse turns into Infinity

describe('numbers past Number.MAX_VALUE (1e309 parses as Infinity) in data, metadata and inputs', () => {
  it('are refused with a JSON 4xx or recorded whole, never a 5xx', async () => {
    const huge = fc.constantFrom('1e309', '-1e309', '1e400', '-2e999').map((text) => new Raw(text));
    const place = fc.constantFrom('data', 'metadata', 'consume');
    await fc.assert(
      fc.asyncProperty(
        place,
        fc.constantFrom(...EVENT_TYPES.filter((type) => !SERVER_ONLY_TYPES.has(type))),
        fc.nat(),
        fc.constantFrom<'add' | 'replace'>('add', 'replace'),
        huge,
        async (where, type, at, op, value) => {
          const headers = jsonHeaders(`Bearer ${KEYS.tenantA}`);
          if (where === 'consume') {
            const body = jsonText(
              new Obj([
                ['receipt', receipt.value],
                ['toolName', receipt.toolName],
                ['input', mutate(toTree(receipt.input), { at, op, key: 'n', value })],
              ]),
            );
            const input: CommandInput = {
              command: 'consume',
              target: '',
              approval: '',
              auth: headers.authorization,
              user: undefined,
              minPosition: undefined,
            };
            await check(
              { method: 'POST', path: '/v1/receipts/consume', headers, body },
              commandVerdict(input, body),
            );
            return;
          }
          const data = toTree(structuredClone(EVENT_DATA_EXAMPLES[type]));
          const event = new Obj([
            ['type', type],
            ['data', where === 'data' ? mutate(data, { at, op, key: 'n', value }) : data],
            ...(where === 'metadata'
              ? [['metadata', new Obj([['n', value]])] as [string, Tree]]
              : []),
          ]);
          const body = jsonText(new Obj([['events', [event]]]));
          await check(
            { method: 'POST', path: `/v1/runs/${SEED.runSink}/events`, headers, body },
            appendVerdict(SEED.runSink, headers, body),
          );
        },
      ),
      runs(100),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Deep nesting

describe('deeply nested JSON on every write route', () => {
  it('answers a JSON 4xx (or records it whole) and keeps the run readable, never a 5xx', async () => {
    const placement = fc.constantFrom(
      'append:input',
      'append:output',
      'append:metadata',
      'append:content',
      'append:body',
      'steer:instruction',
      'stop:reason',
      'resolve:decision',
      'consume:input',
      'consume:receipt',
    );
    await fc.assert(
      fc.asyncProperty(
        placement,
        fc.integer({ min: 100, max: 20_000 }),
        fc.constantFrom<'object' | 'array'>('object', 'array'),
        async (where, depth, kind) => {
          const deep = deepJson(depth, kind);
          const message = (data: string, extra = '') =>
            `{"events":[{"type":"message.added","data":${data}${extra}}]}`;
          const bodies: Record<string, [string, string]> = {
            'append:input': [
              `/v1/runs/${SEED.runSink}/events`,
              `{"events":[{"type":"tool.started","data":{"toolCallId":"deep-${depth}","toolName":"t","input":${deep}}}]}`,
            ],
            'append:output': [
              `/v1/runs/${SEED.runSink}/events`,
              `{"events":[{"type":"tool.finished","data":{"toolCallId":"deep-${depth}","failed":false,"output":${deep}}}]}`,
            ],
            'append:metadata': [
              `/v1/runs/${SEED.runSink}/events`,
              message('{"messageId":"m","role":"user","text":"x"}', `,"metadata":${deep}`),
            ],
            'append:content': [
              `/v1/runs/${SEED.runSink}/events`,
              `{"events":[{"type":"model.call","data":{"callId":"c","model":"m","messages":[{"role":"user","content":[{"type":"x","deep":${deep}}]}]}}]}`,
            ],
            'append:body': [`/v1/runs/${SEED.runSink}/events`, deep],
            'steer:instruction': [
              `/v1/runs/${SEED.runA}/steer`,
              `{"expectedTurnId":"turn-1","instruction":${deep}}`,
            ],
            'stop:reason': [`/v1/runs/${SEED.runStop}/stop`, `{"reason":${deep}}`],
            'resolve:decision': [
              `/v1/runs/${SEED.runA}/approvals/ap-1/resolve`,
              `{"decision":${deep}}`,
            ],
            'consume:input': [
              '/v1/receipts/consume',
              `{"receipt":${JSON.stringify(receipt.value)},"toolName":"deploy","input":${deep}}`,
            ],
            'consume:receipt': [
              '/v1/receipts/consume',
              `{"receipt":${deep},"toolName":"deploy","input":{}}`,
            ],
          };
          const [path, body] = bodies[where];
          // Nesting is valid JSON: recording it whole is as acceptable as refusing it with a 4xx.
          const verdict: Verdict =
            where.startsWith('append:') && where !== 'append:body'
              ? { kind: 'write', events: 1 }
              : REFUSE;
          const res = await check(
            { method: 'POST', path, headers: jsonHeaders(`Bearer ${KEYS.tenantA}`), body },
            verdict,
          );
          if (res.status >= 300) return;
          const position = (JSON.parse(res.text) as { position: number }).position;
          // What was recorded must stay readable: the projection, the replay and the audit.
          for (const read of [
            `/v1/threads/${SEED.threadSink}?minPosition=${position}`,
            `/v1/runs/${SEED.runSink}/audit`,
            `/v1/runs/${SEED.runSink}/events?fromRevision=0&limit=1000`,
            `/v1/runs/${SEED.runSink}/replay`,
          ]) {
            await check(
              { method: 'GET', path: read, headers: { authorization: `Bearer ${KEYS.tenantA}` } },
              { kind: 'read', mustSucceed: true },
              // A projector that stopped on the event shows in the readiness check at the end.
              { ndjson: read.endsWith('replay'), projectionBehind: read.includes('minPosition') },
            );
          }
        },
      ),
      runs(50),
    );
  });
});

// ---------------------------------------------------------------------------------------------

describe('after the fuzzing', () => {
  it('every seeded run still verifies, and the projector is ready and caught up', async () => {
    for (const runId of Object.keys(RUNS)) {
      const key = RUNS[runId] === TENANT_B ? KEYS.tenantB : KEYS.tenantA;
      const audit = await t.http().get(`/v1/runs/${runId}/audit`).set(t.auth(key));
      expect({ runId, status: audit.status, verified: audit.body.verified }).toEqual({
        runId,
        status: 200,
        verified: true,
      });
    }
    const ready = await t.http().get('/health/ready');
    expect(ready.body).toMatchObject({ status: 'ready' });
    await caughtUp('/v1/threads?limit=1');
  });
});
