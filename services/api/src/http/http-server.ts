/**
 * The HTTP server every runledger process listens with: the api (`createApp`) and the
 * standalone mirror (services/mirror). Whatever a process serves, a stranger's request costs
 * a header lookup, a body costs what its route's limits allow, and a client that trickles or
 * idles is cut off: the same hooks and the same server options on both, so that no server
 * of ours is the easy one to stall (docs/limits.md).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Metrics } from '@runledger/observability';
import type {
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  FastifyServerFactory,
} from 'fastify';
import { AccessPolicy } from '../auth/access.guard';
import { authenticateRequests } from '../auth/authenticate.hook';
import type { AppConfig } from '../config/config';
import { limitBulkReads } from '../limits/bulk-reads';
import { ApiError } from './api-error';
import { answerRefusal } from './error.filter';
import { carryRequestContext } from './request-context';
import { answerClientError, guardRequestBodies } from './request-guards';

/** Path ids may be 128 characters (PATH_ID_PATTERN); Fastify's default cap is 100. */
const MAX_PARAM_LENGTH = 256;

/**
 * Requests one connection may have in flight at once. HTTP/1.1 lets a client write as many
 * requests as it likes before reading an answer, and node:http hands the server every request
 * of what it read from a socket in one turn of the event loop: 20,000 tiny ones without a key,
 * each costing the refusal path, held the loop for 1 to 2.5 s. Browsers and undici do not
 * pipeline at all by default; a client that does sends a few.
 */
export const MAX_PIPELINED_REQUESTS = 16;

/** Connections refused for pipelining too many requests (refusePipelineFloods). */
const floodedConnections = new WeakSet<Socket>();

/**
 * A gateway's own id for a request, kept when it is one `X-Request-Id` header of up to 128
 * characters from this set: enough for UUIDs, trace ids (`Root=1-…;Parent=…`) and the like,
 * and nothing a log line or a header would have to escape.
 */
const GATEWAY_REQUEST_ID = /^[A-Za-z0-9._:;=+/@-]{1,128}$/;

/**
 * The request's id: the gateway's, when it sent one we can keep, so its logs and ours name
 * the same request; otherwise a random UUID, unique across restarts and replicas (Fastify's
 * own count starts again at req-1 in every process). Sent twice, node joins the header with
 * ", ", which the pattern refuses.
 */
export function requestIdOf(request: IncomingMessage): string {
  const given = request.headers['x-request-id'];
  return typeof given === 'string' && GATEWAY_REQUEST_ID.test(given) ? given : randomUUID();
}

/** Pass as NestFactory.create's options: the JSON parser is ours (guardRequestBodies). */
export const OWN_BODY_PARSER = { bodyParser: false } as const;

export function httpAdapter(config: AppConfig): FastifyAdapter {
  return new FastifyAdapter({
    genReqId: requestIdOf,
    // Refused by our own hook instead (guardHttp), in the API's shape: Fastify's own 503 body
    // is `{ error: 'Service Unavailable', statusCode }`.
    return503OnClosing: false,
    // Each route's own limit is set by its scope (guardRequestBodies); this is the ceiling.
    bodyLimit: config.bodyMaxBytes,
    // A JSON key like __proto__ or constructor.prototype is refused, never merged.
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    clientErrorHandler: answerClientError,
    // A path Fastify cannot route (a bad %-escape, an id past maxParamLength) is answered in
    // the API's shape; Fastify's own answer quoted the whole path, up to the header limit.
    frameworkErrors: answerUnroutable,
    // A client that trickles its request, or idles on a kept-alive socket, is disconnected.
    requestTimeout: config.http.requestTimeoutMs,
    keepAliveTimeout: config.http.keepAliveTimeoutMs,
    // node:http's own timeouts are set on the server itself.
    serverFactory: serverFor(config),
  });
}

/**
 * The node:http server Fastify would make with the options above, but for one thing: a
 * connection refused for pipelining (refusePipelineFloods) that still sends requests is cut
 * off at the first, before Fastify routes it. node:http goes on handing over the requests of
 * what it had read, and each left waiting behind the refusal cost an abort with a stack trace
 * when the connection closed: 80 to 100 ms a flood; dropped on a closed connection, little.
 */
function serverFor(config: AppConfig): FastifyServerFactory {
  return (handler) => {
    const server = createServer(
      {
        // Checked below instead, to answer in the API's error shape.
        requireHostHeader: false,
        headersTimeout: config.http.headersTimeoutMs,
        // node:http checks those timeouts every 30 s by default: a trickle would outlive them.
        connectionsCheckingInterval: Math.min(1000, config.http.headersTimeoutMs),
      },
      (request, response) => {
        if (floodedConnections.has(request.socket)) request.socket.destroy();
        else if (request.headers.host === undefined && request.httpVersion === '1.1') {
          answerUnrouted(request, response, 400, {
            error: 'missing_host',
            message: 'an HTTP/1.1 request must send a Host header; nothing was done',
          });
        } else handler(request, response);
      },
    );
    // node:http's own answers to these (an empty 400, an empty 417) are in the API's error
    // shape too, like its answers to bytes that are not a request.
    server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => {
      answerUnrouted(request, response, 417, {
        error: 'expectation_failed',
        message: 'the only Expect understood is 100-continue; nothing was done',
      });
    });
    server.keepAliveTimeout = config.http.keepAliveTimeoutMs;
    server.requestTimeout = config.http.requestTimeoutMs;
    // A client may end its side of the connection once its requests are sent (HTTP/1.1
    // allows it; raw-socket clients and some proxies do): each is still answered, in order,
    // and the connection closes after the last. node:http's default aborted every
    // request of such a connection and closed it, so an answer that waited on I/O (an append,
    // on the writer thread) or a pipelined one was lost. The property is node:http's own,
    // undocumented but kept for this (its test-http-server.js sets it).
    (server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
    return server;
  };
}

/**
 * Answers a request before Fastify sees it. The connection stays open, as after any refusal:
 * node:http has framed the request and discards its body, and a request pipelined behind it
 * is answered in its turn (closed after this answer, it was carried out and never answered).
 */
function answerUnrouted(
  request: IncomingMessage,
  response: ServerResponse,
  status: number,
  body: { error: string; message: string },
): void {
  const json = JSON.stringify(body);
  response.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(json),
    'X-Request-Id': requestIdOf(request),
  });
  response.end(json);
}

function answerUnroutable(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const refusal =
    error.code === 'FST_ERR_MAX_PARAM_LENGTH'
      ? new ApiError(
          414,
          'uri_too_long',
          `a path segment is longer than ${MAX_PARAM_LENGTH} characters`,
        )
      : new ApiError(400, 'bad_url', 'the path is not a valid URL: a %-escape does not decode');
  // Answered before routing, so without the hooks that name every routed answer.
  void reply.header('X-Request-Id', request.id).code(refusal.status).send(refusal.body());
}

/**
 * The key checked as a request is routed, bodies read under their route's limits, every
 * answer named by its request id (`X-Request-Id`), and its latency in
 * `http_request_duration_seconds`. Call before `app.init()`: the body limits are set as
 * routes are registered.
 */
export function guardHttp(app: NestFastifyApplication, config: AppConfig): void {
  const fastify = app.getHttpAdapter().getInstance();
  const metrics = app.get(Metrics);
  // First: what the hooks after it log names the request.
  carryRequestContext(fastify);
  refusePipelineFloods(fastify, metrics);
  refuseWhileClosing(fastify, metrics);
  authenticateRequests(fastify, app.get(AccessPolicy), metrics);
  limitBulkReads(fastify, config, metrics);
  guardRequestBodies(fastify, config);
  cutOffStalledStreams(fastify, config.sse.sendTimeoutMs);
  // Every answer names its request, so a client's report or a gateway's log finds ours.
  fastify.addHook('onSend', (request, reply, payload, done) => {
    void reply.header('X-Request-Id', request.id);
    done(null, payload);
  });
  fastify.addHook('onResponse', (request, reply, done) => {
    metrics.httpDuration.observe(
      {
        method: request.method,
        route: request.routeOptions.url ?? 'unmatched',
        status: String(reply.statusCode),
      },
      reply.elapsedTime / 1000,
    );
    done();
  });
}

/**
 * The request past MAX_PIPELINED_REQUESTS in flight on its connection is refused 429
 * `too_many_pipelined`, and the connection closes once the answers before it are sent.
 * Reading the socket stops, so a flood behind a slow answer cannot pile up requests while it
 * waits; a request already read after it cuts the connection off (serverFor).
 */
function refusePipelineFloods(fastify: FastifyInstance, metrics: Metrics): void {
  /** Requests in flight on a connection. */
  const inFlight = new WeakMap<Socket, number>();
  fastify.addHook('onRequest', (request, reply, done) => {
    const socket = request.raw.socket;
    const count = inFlight.get(socket) ?? 0;
    if (count >= MAX_PIPELINED_REQUESTS) {
      floodedConnections.add(socket);
      socket.pause();
      reply.raw.shouldKeepAlive = false;
      const refusal = new ApiError(
        429,
        'too_many_pipelined',
        `this connection has ${MAX_PIPELINED_REQUESTS} requests in flight; read their answers before sending more. This request and any after it on this connection were not done, and the connection closes`,
      );
      answerRefusal(request, reply, refusal, metrics);
      return;
    }
    inFlight.set(socket, count + 1);
    reply.raw.once('close', () => {
      const now = inFlight.get(socket) ?? 0;
      if (now > 0) inFlight.set(socket, now - 1);
    });
    done();
  });
}

/**
 * An answer streamed as its client's socket takes it (a run's replay, a thread's export, a
 * page of the log at a time) waits, with what it has read, while the socket is full; so does a
 * large JSON answer (a page of events, up to 16 MiB). A client that stopped reading held it,
 * about 10 MB a replay and 22 MB a page, for as long as it kept the connection: 40 replays
 * held 300 MB, 40 pages 900 MB, for as long as they liked. Like an SSE stream, the answer is
 * cut off once its socket took nothing for SSE_SEND_TIMEOUT_MS while bytes waited; the
 * client reads on from where it was (`?fromRevision=`).
 */
function cutOffStalledStreams(fastify: FastifyInstance, sendTimeoutMs: number): void {
  fastify.addHook('onSend', (_request, reply, payload, done) => {
    let sent = payload;
    if ((typeof sent === 'string' || Buffer.isBuffer(sent)) && sent.length > STREAMED_ABOVE) {
      // Written whole, 16 MiB of JSON is one write: the socket's progress shows only at its
      // end, and a slow reader could not be told from one that stopped.
      const bytes = typeof sent === 'string' ? Buffer.from(sent) : sent;
      void reply.header('Content-Length', bytes.length);
      sent = Readable.from(slices(bytes));
    }
    if (sent instanceof Readable) watchSends(reply.raw, sendTimeoutMs);
    done(null, sent);
  });
}

/** A JSON answer longer than this (a page of large events) goes out as a stream of slices. */
const STREAMED_ABOVE = 1024 * 1024;
const SLICE_BYTES = 64 * 1024;

function* slices(bytes: Buffer): Generator<Buffer> {
  for (let at = 0; at < bytes.length; at += SLICE_BYTES) yield bytes.subarray(at, at + SLICE_BYTES);
}

function watchSends(response: ServerResponse, sendTimeoutMs: number): void {
  let tookSome = Date.now();
  response.on('drain', () => (tookSome = Date.now()));
  const timer = setInterval(
    () => {
      if (!response.writableNeedDrain) tookSome = Date.now();
      else if (Date.now() - tookSome >= sendTimeoutMs) response.destroy();
    },
    Math.min(1000, sendTimeoutMs),
  );
  timer.unref();
  response.once('close', () => clearInterval(timer));
}

/**
 * A request routed once the service has begun to close (a SIGTERM under load: one already on
 * a kept-alive connection, or whose headers were still arriving) is refused 503
 * `shutting_down` with Retry-After, before its key or body is read: another replica answers it.
 */
function refuseWhileClosing(fastify: FastifyInstance, metrics: Metrics): void {
  let closing = false;
  fastify.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  fastify.addHook('onRequest', (request, reply, done) => {
    if (!closing) {
      done();
      return;
    }
    const refusal = new ApiError(
      503,
      'shutting_down',
      'this instance is shutting down; retry, and another will answer',
    );
    // And the connection closes after it, so the close is not kept waiting on it.
    reply.raw.shouldKeepAlive = false;
    answerRefusal(request, reply, refusal, metrics);
  });
}
