/**
 * What a request body may cost, decided before and while it is read (docs/limits.md):
 *
 * - **A limit by scope.** Routes that need the append scope take up to BODY_MAX_BYTES (an
 *   oversize event must reach the size gate to be reduced); every other route takes up to
 *   SMALL_BODY_MAX_BYTES. A declared Content-Length above the limit is refused 413 before a
 *   byte is read; a chunked body is counted as it arrives and refused at the limit.
 * - **Few large bodies at once.** A body that may pass LARGE_BODY_BYTES (declared so, or
 *   chunked on a route that allows it) takes one of LARGE_BODY_CONCURRENCY slots until its
 *   response is sent; with none free it is refused 503 unread. Parsing and validating a
 *   large body is what can hold the event loop, so this bounds how much of it can pile up.
 *   One tenant holds at most half the slots, so its slow or stalled bodies cannot refuse
 *   every other tenant's.
 * - **The JSON's shape, before parsing.** The bytes are scanned as they arrive for nesting,
 *   keys and values (JsonShapeScanner); past a limit the body is refused 400 without being
 *   parsed. JSON.parse then runs once, on a text whose cost is known to be bounded.
 *
 * Authentication has already happened (auth/authenticate.hook.ts): a stranger's body never
 * gets this far. A client that asks first (`Expect: 100-continue`) is told to send its body
 * only once the key and these limits let it through.
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { MAX_JSON_DEPTH, TurnQueue } from '@runledger/domain';
import { routeAccess } from '../auth/access.decorators';
import type { AppConfig } from '../config/config';
import { ApiError } from './api-error';
import { JsonShapeScanner, type JsonShapeLimits, type JsonShapeProblem } from './json-shape';

/**
 * The domain caps a value's nesting at MAX_JSON_DEPTH (and names the field past it); the
 * append envelope (body, events, event, data) sits on top of the deepest value it carries.
 */
export const BODY_MAX_DEPTH = MAX_JSON_DEPTH + 4;

/**
 * How long a connection stays open, discarding, after a refusal sent before its body was
 * read. Closing at once would make the client's next write meet a reset, and a reset can
 * discard the refusal before the client reads it: nginx calls this a lingering close.
 */
export const UNREAD_BODY_LINGER_MS = 1000;

/**
 * After `reply` is sent, the rest of the request's body is read and discarded (node:http's
 * own behaviour) for at most UNREAD_BODY_LINGER_MS; a body still arriving then is cut off
 * with its connection. A body that ends in time leaves the connection usable.
 */
export function lingerUnread(request: FastifyRequest, reply: FastifyReply): void {
  if (request.raw.complete) return;
  // Fastify asks for an immediate close after a body parser's error: this replaces it.
  void reply.removeHeader('connection');
  reply.raw.once('finish', () => {
    if (request.raw.complete) return;
    const { socket } = request.raw;
    const timer = setTimeout(() => socket.destroy(), UNREAD_BODY_LINGER_MS);
    timer.unref();
    request.raw.once('end', () => clearTimeout(timer));
    socket.once('close', () => clearTimeout(timer));
    // A parser that stopped reading left the stream paused: discard the rest.
    request.raw.resume();
  });
}

/** Whether the request carries a body: a positive Content-Length, or chunked. */
export function hasBody(request: FastifyRequest): boolean {
  const { headers } = request;
  if (headers['transfer-encoding'] !== undefined) return true;
  const declared = Number(headers['content-length']);
  return Number.isFinite(declared) && declared > 0;
}

/** The Content-Length when the request declares one (not chunked). */
function declaredLength(request: FastifyRequest): number | undefined {
  if (request.headers['transfer-encoding'] !== undefined) return undefined;
  const declared = Number(request.headers['content-length']);
  return Number.isSafeInteger(declared) && declared >= 0 ? declared : undefined;
}

export function bodyTooLarge(limitBytes: number, declaredBytes?: number): ApiError {
  const what =
    declaredBytes === undefined
      ? 'the request body passed'
      : `the request body declares ${declaredBytes} bytes, over`;
  return new ApiError(
    413,
    'body_too_large',
    `${what} this route's limit of ${limitBytes} bytes; it was not read and nothing in it was done`,
    undefined,
    { limitBytes },
  );
}

const SHAPE_MESSAGES: Record<JsonShapeProblem['rule'], (limit: number) => string> = {
  maxDepth: (limit) => `the body is nested deeper than ${limit} levels`,
  maxKeys: (limit) => `the body holds more than ${limit} object members (JSON_MAX_KEYS)`,
  maxObjectKeys: (limit) =>
    `an object in the body has more than ${limit} members (JSON_MAX_OBJECT_KEYS)`,
  maxItems: (limit) =>
    `the body holds more than ${limit} values, array elements and object members (JSON_MAX_ITEMS)`,
};

function shapeRefusal(problem: JsonShapeProblem): ApiError {
  const message = `${SHAPE_MESSAGES[problem.rule](problem.limit)}; it was not parsed and nothing was done`;
  return new ApiError(400, 'validation_failed', message, [
    { field: 'body', rule: problem.rule, message },
  ]);
}

function isJson(text: string | Buffer): boolean {
  try {
    JSON.parse(text.toString());
    return true;
  } catch {
    return false;
  }
}

function forbiddenKeyRefusal(): ApiError {
  const message =
    'the body holds a __proto__ or constructor.prototype key, which is refused; nothing was done';
  return new ApiError(400, 'validation_failed', message, [
    { field: 'body', rule: 'forbiddenKey', message },
  ]);
}

/**
 * node:http's answer to bytes that are not a request (Fastify's default, but for one case).
 * Requests are now answered as soon as they are routed, some before their body was read;
 * a client that sends a body without framing (no Content-Length, not chunked) then has that
 * body parsed as a next request. Once anything was written on a connection, a second answer
 * could land inside the first as the client reads it, so the connection is only closed.
 */
export function answerClientError(error: Error & { code?: string }, socket: Socket): void {
  if (isAborted(error) || socket.destroyed) return;
  if (socket.writable && socket.bytesWritten === 0) {
    const { status, body } = clientErrorAnswer(error.code);
    const json = JSON.stringify(body);
    // No request was made of these bytes (or node keeps it from us): the id is a new one.
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(json)}\r\nContent-Type: application/json\r\nX-Request-Id: ${randomUUID()}\r\nConnection: close\r\n\r\n${json}`,
    );
  }
  socket.destroy(error);
}

/** What node:http's refusals answer, in the API's error shape like every other refusal. */
function clientErrorAnswer(code: string | undefined): {
  status: number;
  body: { error: string; message: string };
} {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return {
      status: 408,
      body: {
        error: 'request_timeout',
        message:
          'the request did not arrive whole in time (HTTP_REQUEST_TIMEOUT_MS); nothing was done',
      },
    };
  }
  if (code === 'HPE_HEADER_OVERFLOW') {
    return {
      status: 431,
      body: {
        error: 'headers_too_large',
        message: 'the request line and headers are over 16 KiB; nothing was done',
      },
    };
  }
  return {
    status: 400,
    body: {
      error: 'bad_request',
      message: 'the bytes sent are not an HTTP request; nothing was done',
    },
  };
}

/**
 * A body's text, decoded a chunk at a time as it arrives. Decoded whole at its end, a body of
 * 32 MB held the event loop for 40-80 ms, and 150-180 ms when its text is not ASCII; a chunk
 * (at most 64 KiB from a socket) takes well under a millisecond. A character cut between two
 * chunks waits in the decoder for the next. Bytes that are not valid UTF-8 are refused, never
 * decoded (`fatal`): decoding would replace each with U+FFFD, and the log would hold words
 * the client never sent. A byte-order mark stays in the text, as the client sent it.
 */
class Utf8Text {
  private pieces: string[] = [];
  private readonly decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

  /** Whether the bytes so far, but for a character still incomplete, are valid UTF-8. */
  add(chunk: Buffer): boolean {
    return this.decode(() => this.decoder.decode(chunk, { stream: true }));
  }

  /** Whether the body ended between characters. */
  complete(): boolean {
    return this.decode(() => this.decoder.decode());
  }

  take(): string {
    const text = this.pieces.join('');
    this.pieces = [];
    return text;
  }

  clear(): void {
    this.pieces = [];
  }

  private decode(step: () => string): boolean {
    try {
      this.pieces.push(step());
      return true;
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ERR_ENCODING_INVALID_ENCODED_DATA') return false;
      throw error;
    }
  }
}

/**
 * At most `capacity` holders at once, shared by every tenant, of which one tenant holds at
 * most half (at least one); a release is safe to call twice.
 */
class Slots {
  private taken = 0;
  private readonly byTenant = new Map<string, number>();
  readonly perTenant: number;

  constructor(private readonly capacity: number) {
    this.perTenant = Math.max(1, Math.floor(capacity / 2));
  }

  /** A release, or why none is free: every slot, or this tenant's share, is taken. */
  take(tenant: string): (() => void) | 'all' | 'tenant' {
    const held = this.byTenant.get(tenant) ?? 0;
    if (this.taken >= this.capacity) return 'all';
    if (held >= this.perTenant) return 'tenant';
    this.taken += 1;
    this.byTenant.set(tenant, held + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.taken -= 1;
      const left = (this.byTenant.get(tenant) ?? 1) - 1;
      if (left === 0) this.byTenant.delete(tenant);
      else this.byTenant.set(tenant, left);
    };
  }
}

export function guardRequestBodies(fastify: FastifyInstance, config: AppConfig): void {
  // node:http answers `Expect: 100-continue` at once unless told otherwise; the answer waits
  // for the key and the limits (preParsing below), so a refused body is never sent at all.
  fastify.server.on('checkContinue', (request, response) => {
    fastify.server.emit('request', request, response);
  });

  fastify.addHook('onRoute', (route) => {
    const access = routeAccess(route.config);
    route.bodyLimit =
      access !== undefined && 'scope' in access && access.scope === 'append'
        ? config.bodyMaxBytes
        : config.smallBodyMaxBytes;
  });

  const largeBodies = new Slots(config.largeBodies.concurrency);
  // Parsing a large body holds the loop for tens of milliseconds (20-100 ms for 32 MB), and
  // bodies that ended together had their parses run back to back in one turn: each now has a
  // turn of its own, in order, and sockets, timers and other requests get turns between.
  const largeParses = new TurnQueue(0);
  const threshold = config.largeBodies.thresholdBytes;
  fastify.addHook('preParsing', (request, reply, payload, done) => {
    if (!hasBody(request)) {
      done(null, payload);
      return;
    }
    const limit = request.routeOptions.bodyLimit;
    const declared = declaredLength(request);
    if (declared !== undefined && declared > limit) {
      done(bodyTooLarge(limit, declared));
      return;
    }
    if ((declared ?? limit) > threshold) {
      const release = largeBodies.take(request.principal?.tenantId ?? '');
      if (typeof release !== 'function') {
        const held =
          release === 'all'
            ? `${config.largeBodies.concurrency} request bodies over ${threshold} bytes are being handled (LARGE_BODY_CONCURRENCY)`
            : `this tenant's ${largeBodies.perTenant} request bodies over ${threshold} bytes are being handled (half of LARGE_BODY_CONCURRENCY)`;
        done(
          new ApiError(
            503,
            'busy',
            `${held}; this one was not read and nothing was done, retry shortly`,
          ),
        );
        return;
      }
      reply.raw.once('close', release);
    }
    // The client waits for this before it sends the body (curl does above 1 MiB): only a
    // request that passed every check above gets it. An HTTP/1.0 client cannot expect one
    // (RFC 9110 §10.1.1), and would read it as the answer.
    if (
      request.raw.httpVersion === '1.1' &&
      /100-continue/i.test(String(request.headers.expect ?? ''))
    ) {
      reply.raw.writeContinue();
    }
    done(null, payload);
  });

  const shape: JsonShapeLimits = {
    maxDepth: BODY_MAX_DEPTH,
    maxKeys: config.json.maxKeys,
    maxObjectKeys: config.json.maxObjectKeys,
    maxItems: config.json.maxItems,
  };
  // As Fastify's own: a `__proto__` or `constructor.prototype` key is refused, never merged.
  // Every body is JSON: Fastify's text/plain parser handed routes a string, answered 400
  // "must be a JSON object" where every other media type is 415.
  fastify.removeContentTypeParser('text/plain');
  const parseStrict = fastify.getDefaultJsonParser('error', 'error');
  // Fastify answers "not valid JSON" for valid JSON with a forbidden key too: say which it is.
  const parseJson: typeof parseStrict = (request, text, done) =>
    parseStrict(request, text, (error, body) => {
      done(error !== null && isJson(text) ? forbiddenKeyRefusal() : error, body);
    });
  fastify.addContentTypeParser('application/json', (request, payload, done) => {
    const limit = request.routeOptions.bodyLimit;
    const scanner = new JsonShapeScanner(shape);
    const text = new Utf8Text();
    let received = 0;
    const stop = (error: Error) => {
      payload.removeListener('data', onData);
      payload.removeListener('end', onEnd);
      // The rest is discarded, for a while (lingerUnread, from the ErrorFilter).
      payload.pause();
      text.clear();
      done(error, undefined);
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limit) {
        stop(bodyTooLarge(limit));
        return;
      }
      const problem = scanner.feed(chunk);
      if (problem) {
        stop(shapeRefusal(problem));
        return;
      }
      if (!text.add(chunk)) stop(invalidUtf8Refusal());
    };
    const onEnd = () => {
      payload.removeListener('data', onData);
      if (!text.complete()) {
        done(invalidUtf8Refusal(), undefined);
        return;
      }
      if (received <= threshold) {
        parseJson(request, text.take(), done);
        return;
      }
      // Joining a large body's text and parsing it hold the event loop for tens of
      // milliseconds: that is a turn of its own, never shared with another large body's.
      largeParses.run(() => parseJson(request, text.take(), done));
    };
    const charset = charsetOf(request.headers['content-type']);
    if (charset !== null && !UTF8_NAMES.has(charset)) {
      stop(charsetRefusal(charset));
      return;
    }
    const encoding = String(request.headers['content-encoding'] ?? 'identity').trim();
    if (encoding.toLowerCase() !== 'identity') {
      stop(encodingRefusal(encoding));
      return;
    }
    payload.on('data', onData);
    payload.once('end', onEnd);
    payload.once('error', (error: Error) => stop(isAborted(error) ? requestAborted() : error));
  });
}

/** node:http's error for a connection its client reset, mid-request or mid-body. */
function isAborted(error: Error): boolean {
  return (error as NodeJS.ErrnoException).code === 'ECONNRESET';
}

/**
 * The client hung up mid-body: nobody reads this answer, but it is counted as a refusal like
 * any other, where it was logged as an unexpected error (anyone could fill the error log).
 */
function requestAborted(): ApiError {
  return new ApiError(
    400,
    'request_aborted',
    'the client closed the request before its body was complete; nothing was done',
  );
}

/** JSON is UTF-8 (RFC 8259): a body declared in another charset is refused, not misread. */
const UTF8_NAMES = new Set(['utf-8', 'utf8']);

function charsetOf(contentType: string | undefined): string | null {
  const match = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(contentType ?? '');
  return match ? match[1].toLowerCase() : null;
}

function charsetRefusal(charset: string): ApiError {
  return new ApiError(
    415,
    'unsupported_media_type',
    `the body is declared as charset ${charset}; JSON bodies must be UTF-8. Nothing was done`,
  );
}

/**
 * Bodies are read as sent: one declared compressed would be parsed as its compressed bytes
 * (refused as malformed), or, mislabelled plain JSON, accepted under a false header. RFC
 * 9110 answers an unsupported content coding with 415.
 */
function encodingRefusal(encoding: string): ApiError {
  return new ApiError(
    415,
    'unsupported_media_type',
    `the body is declared as Content-Encoding ${encoding.slice(0, 64)}; send it uncompressed (identity). Nothing was done`,
  );
}

/**
 * The 415 for a body no parser takes (another media type, one that does not parse, or none):
 * Fastify's own says only "Unsupported Media Type", this one what was sent and what to send.
 */
export function mediaTypeRefusal(contentType: string | undefined): ApiError {
  const declared =
    contentType === undefined || contentType.trim() === ''
      ? 'the body has no Content-Type'
      : `the body is declared as ${contentType.slice(0, 64)}`;
  return new ApiError(
    415,
    'unsupported_media_type',
    `${declared}; send it as Content-Type: application/json. Nothing was done`,
  );
}

function invalidUtf8Refusal(): ApiError {
  const message =
    'the body is not valid UTF-8; it was not decoded (bytes are never replaced) and nothing was done';
  return new ApiError(400, 'malformed_body', message, [{ field: 'body', rule: 'utf8', message }]);
}
