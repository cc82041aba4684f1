/**
 * The OpenAPI document the running app serves at /docs-json is a contract a generator can
 * use: valid OpenAPI 3, every route of every controller in it, every operation with its
 * request body (when it takes one), a success schema, and every error status with the one
 * error body; opaque bearer keys; the SSE and NDJSON media types. openapi-typescript turns
 * it into types with a real body for every POST.
 */
import { readFileSync } from 'node:fs';
import SwaggerParser from '@apidevtools/swagger-parser';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { RequestMethod } from '@nestjs/common';
import { OPENAPI_TYPES_FILE, typesOf } from '../../../../scripts/openapi-types';
import { getMetadataStorage } from 'class-validator';
import { AppModule } from '../app.module';
import { ConsumeBody, DecisionBody, SteerBody, StopBody } from '../commands/command-bodies';
import { startTestApp, type TestApp } from '../testing/test-app';

interface Operation {
  parameters?: { name: string; in: string; required?: boolean }[];
  requestBody?: { content: Record<string, { schema?: unknown }> };
  responses: Record<
    string,
    { content?: Record<string, { schema?: { $ref?: string; oneOf?: { $ref?: string }[] } }> }
  >;
  security?: Record<string, unknown>[];
}
/** The streams a browser may open with a stream token instead of the key. */
const TOKEN_STREAMS = ['get /v1/runs/{runId}/stream', 'get /v1/threads/{threadId}/stream'];

/** POSTs that take no body at all: re-driving a parked event names it in the path. */
const BODILESS_POSTS = ['post /v1/admin/mirror/parked/{eventId}/retry'];

type Doc = {
  paths: Record<string, Record<string, Operation>>;
  components: {
    securitySchemes: Record<string, Record<string, unknown>>;
    schemas: Record<string, { properties?: Record<string, unknown> }>;
  };
};

/** Every (method, path) the app's documented controllers route, as OpenAPI spells them. */
function routesOfControllers(app: TestApp): string[] {
  const controllers = AppModule.create(app.config, []).controllers ?? [];
  const routes: string[] = [];
  for (const controller of controllers) {
    if (Reflect.getMetadata('swagger/apiExcludeController', controller)) continue;
    const prefix = String(Reflect.getMetadata(PATH_METADATA, controller) ?? '');
    const proto = controller.prototype as Record<string, unknown>;
    for (const name of Object.getOwnPropertyNames(proto)) {
      const handler = proto[name];
      if (typeof handler !== 'function' || name === 'constructor') continue;
      const path = Reflect.getMetadata(PATH_METADATA, handler) as string | undefined;
      const method = Reflect.getMetadata(METHOD_METADATA, handler) as RequestMethod | undefined;
      if (path === undefined || method === undefined) continue;
      const full = `/${[prefix, path].filter((p) => p !== '' && p !== '/').join('/')}`
        .replace(/\/+/g, '/')
        .replace(/:([A-Za-z]+)/g, '{$1}');
      routes.push(`${RequestMethod[method].toLowerCase()} ${full}`);
    }
  }
  return routes.sort();
}

describe('OpenAPI at /docs-json', () => {
  let app: TestApp;
  let doc: Doc;
  const operations = () =>
    Object.entries(doc.paths).flatMap(([path, methods]) =>
      Object.entries(methods).map(([method, op]) => ({ key: `${method} ${path}`, method, op })),
    );

  beforeAll(async () => {
    app = await startTestApp();
    const res = await app.http().get('/docs-json');
    expect(res.status).toBe(200);
    doc = res.body as Doc;
  });
  afterAll(() => app.close());

  it('is a valid OpenAPI document', async () => {
    await expect(SwaggerParser.validate(structuredClone(doc) as never)).resolves.toBeDefined();
  });

  it('documents every route of every controller, and nothing else', () => {
    expect(
      operations()
        .map((o) => o.key)
        .sort(),
    ).toEqual(routesOfControllers(app));
  });

  it.each([
    [SteerBody, 'SteerRequest'],
    [StopBody, 'StopRequest'],
    [DecisionBody, 'DecisionRequest'],
    [ConsumeBody, 'ConsumeRequest'],
  ])('documents every field the %p validator accepts as %s, and no other', (body, schema) => {
    const accepted = new Set(
      getMetadataStorage()
        .getTargetValidationMetadatas(body, '', true, false)
        .map((rule) => rule.propertyName),
    );
    expect(Object.keys(doc.components.schemas[schema].properties ?? {}).sort()).toEqual(
      [...accepted].sort(),
    );
  });

  it('authenticates with an opaque bearer key (not a JWT), streams also with ?token=', () => {
    expect(doc.components.securitySchemes).toEqual({
      apiKey: expect.objectContaining({ type: 'http', scheme: 'bearer' }),
      streamToken: expect.objectContaining({ type: 'apiKey', in: 'query', name: 'token' }),
    });
    expect(JSON.stringify(doc.components.securitySchemes)).not.toMatch(/JWT/i);
    for (const { key, op } of operations()) {
      const security = TOKEN_STREAMS.includes(key)
        ? [{ apiKey: [] }, { streamToken: [] }]
        : [{ apiKey: [] }];
      expect({ key, security: op.security }).toEqual({ key, security });
    }
  });

  it('gives every operation a success schema and every POST and PUT its request body', () => {
    for (const { key, method, op } of operations()) {
      const successes = Object.entries(op.responses).filter(([status]) => /^2/.test(status));
      expect({ key, some: successes.length > 0 }).toEqual({ key, some: true });
      for (const [status, response] of successes) {
        const schemas = Object.values(response.content ?? {}).map((c) => c.schema);
        expect({ key, status, schema: schemas[0] }).toEqual({
          key,
          status,
          schema: expect.any(Object),
        });
      }
      if ((method === 'post' || method === 'put') && !BODILESS_POSTS.includes(key)) {
        const body = op.requestBody?.content['application/json']?.schema;
        expect({ key, body }).toEqual({ key, body: expect.any(Object) });
      }
    }
  });

  it('documents 401 and every other error status with the error body', () => {
    for (const { key, op } of operations()) {
      const errors = Object.entries(op.responses).filter(([status]) => /^[45]/.test(status));
      expect({ key, has401: errors.some(([status]) => status === '401') }).toEqual({
        key,
        has401: true,
      });
      for (const [status, response] of errors) {
        const schema = response.content?.['application/json']?.schema;
        const refs = schema?.oneOf?.map((one) => one.$ref) ?? [schema?.$ref];
        expect({ key, status, refs }).toEqual({
          key,
          status,
          refs: expect.arrayContaining(['#/components/schemas/ErrorBody']),
        });
      }
    }
  });

  it('marks every query parameter optional: each has a default', () => {
    for (const { key, op } of operations()) {
      for (const param of (op.parameters ?? []).filter((p) => p.in === 'query')) {
        expect({ key, param: param.name, required: param.required }).toEqual({
          key,
          param: param.name,
          required: false,
        });
      }
    }
  });

  it('gives every page size its maximum, the one the route enforces', async () => {
    const limits = operations().flatMap(({ key, op }) =>
      (op.parameters as { name: string; in: string; schema?: { maximum?: unknown } }[])
        .filter((param) => param.in === 'query' && param.name === 'limit')
        .map((param) => ({ key, maximum: param.schema?.maximum })),
    );
    expect(limits.length).toBeGreaterThanOrEqual(4);
    for (const limit of limits)
      expect(limit).toEqual({ key: limit.key, maximum: expect.any(Number) });
    const thread = limits.find((limit) => limit.key === 'get /v1/threads/{threadId}')!;
    const over = await app
      .http()
      .get(`/v1/threads/any?limit=${Number(thread.maximum) + 1}`)
      .set(app.auth());
    expect(over.status).toBe(400);
    expect(JSON.stringify(over.body)).toContain(`${String(thread.maximum)}`);
  });

  it('serves streams as text/event-stream with Last-Event-ID and ?from=, replay as NDJSON', () => {
    for (const path of ['/v1/runs/{runId}/stream', '/v1/threads/{threadId}/stream']) {
      const op = doc.paths[path].get;
      expect(Object.keys(op.responses['200'].content ?? {})).toEqual(['text/event-stream']);
      const params = (op.parameters ?? []).map((p) => `${p.in}:${p.name}`);
      expect(params).toEqual(expect.arrayContaining(['query:from', 'header:Last-Event-ID']));
    }
    const replay = doc.paths['/v1/runs/{runId}/replay'].get;
    expect(Object.keys(replay.responses['200'].content ?? {})).toEqual(['application/x-ndjson']);
  });

  it('generates TypeScript types in which every POST takes a JSON body', () => {
    const types = typesOf(doc);
    for (const { method, key } of operations()) {
      if (method !== 'post' || BODILESS_POSTS.includes(key)) continue;
      const path = key.slice('post '.length);
      const pathBlock = types.slice(types.indexOf(`"${path}": {`));
      const operationId = /post: operations\["([^"]+)"\]/.exec(pathBlock)?.[1];
      const operation = types.slice(types.indexOf(`    ${String(operationId)}: {`));
      const body = /^\s+requestBody\??: \{\s+content: \{\s+"application\/json"/m.test(
        operation.slice(0, operation.indexOf('responses:')),
      );
      expect({ key, body }).toEqual({ key, body: true });
    }
    // The client is written over these types: they must be the ones the app documents now.
    const committed = readFileSync(OPENAPI_TYPES_FILE, 'utf8');
    if (committed !== types) {
      throw new Error(
        `${OPENAPI_TYPES_FILE} is stale: run \`npm run openapi:types\` and commit the result`,
      );
    }
  });
});

type Schema = {
  $ref?: string;
  type?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  allOf?: Schema[];
  additionalProperties?: unknown;
};

/**
 * Where `value` departs from `schema`: a required property missing, or one the schema does
 * not list (a field the code added without documenting it). Nested objects and arrays too.
 */
function drift(value: unknown, schema: Schema, doc: Doc, at = '$'): string[] {
  const resolved = schema.$ref
    ? (doc as unknown as { components: { schemas: Record<string, Schema> } }).components.schemas[
        schema.$ref.split('/').pop()!
      ]
    : schema.allOf?.length === 1
      ? schema.allOf[0]
      : schema;
  if (resolved !== schema) return drift(value, resolved, doc, at);
  if (Array.isArray(value) && schema.items) {
    return value.flatMap((item, i) => drift(item, schema.items!, doc, `${at}[${i}]`));
  }
  if (value === null || typeof value !== 'object' || !schema.properties) return [];
  const record = value as Record<string, unknown>;
  const missing = (schema.required ?? [])
    .filter((name) => !(name in record))
    .map((name) => `${at}.${name} is required but absent`);
  const extra = Object.keys(record)
    .filter((name) => !(name in schema.properties!))
    .map((name) => `${at}.${name} is not documented`);
  const nested = Object.entries(record).flatMap(([name, v]) =>
    schema.properties![name] ? drift(v, schema.properties![name], doc, `${at}.${name}`) : [],
  );
  return [...missing, ...extra, ...nested];
}

describe('OpenAPI schemas against what the app answers', () => {
  let app: TestApp;
  let doc: Doc;
  beforeAll(async () => {
    app = await startTestApp();
    doc = (await app.http().get('/docs-json')).body as Doc;
  });
  afterAll(() => app.close());

  const documented = (method: string, path: string, status: number) => {
    const op = doc.paths[path][method];
    return op.responses[String(status)].content!['application/json'].schema as Schema;
  };

  it('notices a missing and an undocumented field, so the check below can fail', () => {
    const schema: Schema = {
      type: 'object',
      properties: {
        runId: {},
        events: { type: 'array', items: { $ref: '#/components/schemas/AppendedEvent' } },
      },
      required: ['runId', 'events'],
    };
    expect(
      drift({ events: [{ id: 'e', revision: 0, position: 1, extra: true }], more: 1 }, schema, doc),
    ).toEqual([
      '$.runId is required but absent',
      '$.more is not documented',
      '$.events[0].extra is not documented',
    ]);
  });

  it('answers every documented success with exactly the documented fields', async () => {
    const auth = app.auth();
    const post = (url: string, body: object) => app.http().post(url).set(auth).send(body);
    const get = (url: string) => app.http().get(url).set(auth);
    const calls: [string, string, number, () => Promise<{ status: number; body: unknown }>][] = [
      [
        'post',
        '/v1/runs/{runId}/events',
        201,
        () =>
          post('/v1/runs/doc-run/events', {
            events: [
              { type: 'run.started', data: { threadId: 'doc-thread', agent: 'a', source: 'api' } },
              { type: 'turn.started', data: { turnId: 'turn-1', source: 'api' } },
              { type: 'message.added', data: { messageId: 'm1', role: 'user', text: 'hi' } },
              {
                type: 'tool.started',
                data: { toolCallId: 'tc-1', toolName: 'shell', input: { cmd: 'ls' } },
              },
              {
                type: 'approval.requested',
                data: { approvalId: 'ap-1', toolCallId: 'tc-2', toolName: 'deploy', input: {} },
              },
            ],
          }),
      ],
      ['get', '/v1/runs/{runId}/events', 200, () => get('/v1/runs/doc-run/events')],
      ['get', '/v1/runs/{runId}/audit', 200, () => get('/v1/runs/doc-run/audit')],
      ['get', '/v1/threads', 200, () => get('/v1/threads?minPosition=5')],
      ['get', '/v1/threads/{threadId}', 200, () => get('/v1/threads/doc-thread?minPosition=5')],
      [
        'get',
        '/v1/threads/{threadId}/voice-seed',
        200,
        () => get('/v1/threads/doc-thread/voice-seed'),
      ],
      [
        'post',
        '/v1/runs/{runId}/steer',
        201,
        () => post('/v1/runs/doc-run/steer', { expectedTurnId: 'turn-1', instruction: 'go on' }),
      ],
      [
        'post',
        '/v1/runs/{runId}/approvals/{approvalId}/resolve',
        201,
        () => post('/v1/runs/doc-run/approvals/ap-1/resolve', { decision: 'allow' }),
      ],
      ['post', '/v1/stream-tokens', 201, () => post('/v1/stream-tokens', { runId: 'doc-run' })],
      ['post', '/v1/runs/{runId}/stop', 201, () => post('/v1/runs/doc-run/stop', {})],
      [
        'post',
        '/v1/threads/{threadId}/prompt',
        201,
        () => post('/v1/threads/doc-thread/prompt', { text: 'and now?' }),
      ],
      [
        'put',
        '/v1/bindings',
        201,
        () =>
          app
            .http()
            .put('/v1/bindings')
            .set(auth)
            .send({ channel: 'telegram', account: 'bot', chat: 'c-1', threadId: 'doc-thread' }),
      ],
      ['get', '/v1/bindings', 200, () => get('/v1/bindings')],
      ['get', '/v1/notifications', 200, () => get('/v1/notifications?after=0')],
      [
        'post',
        '/v1/runs/{runId}/events',
        404,
        () =>
          post('/v1/runs/no-run/events', {
            events: [{ type: 'message.added', data: { messageId: 'm', role: 'user', text: 'x' } }],
          }),
      ],
    ];
    for (const [method, path, status, call] of calls) {
      const res = await call();
      expect({ path, status: res.status }).toEqual({ path, status });
      expect({ path, drift: drift(res.body, documented(method, path, status), doc) }).toEqual({
        path,
        drift: [],
      });
    }
  });
});
