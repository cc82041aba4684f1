/**
 * Turns every thrown error (ours, Nest's, and Fastify's parser and body-limit errors, which
 * Nest's adapter hands to the filters) into the API's JSON error shape. Errors the service
 * did not anticipate are answered 500 and logged with the request's method and URL, never hidden.
 */
import { ArgumentsHost, Catch, HttpException, Logger, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { StoreUnavailableError, UnreadableEventError } from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import { BodyRejections } from '../runs/body-rejections';
import { ApiError } from './api-error';
import { refusalToApiError } from './refusals';
import { lingerUnread, mediaTypeRefusal } from './request-guards';

const STATUS_CODES: Record<number, string> = {
  // Fastify's JSON parser is the only source of a bare 400: every other 400 is an ApiError.
  400: 'malformed_body',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  406: 'not_acceptable',
  409: 'conflict',
  // Fastify refuses an over-limit body before any route runs.
  413: 'body_too_large',
  415: 'unsupported_media_type',
  429: 'too_many_requests',
  503: 'unavailable',
};

export function toApiError(error: unknown): ApiError | null {
  if (error instanceof ApiError) return error;
  const refusal = refusalToApiError(error);
  if (refusal) return refusal;
  if (error instanceof HttpException) {
    const status = error.getStatus();
    return new ApiError(status, STATUS_CODES[status] ?? 'error', error.message);
  }
  return null;
}

/** Sends a refusal in the API's shape, counted, by every server of ours (api, mirror). */
export function answerRefusal(
  request: FastifyRequest,
  reply: FastifyReply,
  apiError: ApiError,
  metrics: Metrics,
): void {
  metrics.rejections.inc({ reason: apiError.error });
  // Refused before its body was read: the rest is discarded for a while, then cut off.
  lingerUnread(request, reply);
  // Every "not now" says when to try again; the rate limiter sets its own.
  if ((apiError.status === 429 || apiError.status === 503) && !reply.hasHeader('Retry-After')) {
    void reply.header('Retry-After', 1);
  }
  void reply.status(apiError.status).send(apiError.body());
}

@Catch()
export class ErrorFilter implements ExceptionFilter {
  private readonly logger = new Logger('http');

  constructor(
    private readonly metrics: Metrics,
    private readonly bodyRejections: BodyRejections,
  ) {}

  async catch(error: unknown, host: ArgumentsHost): Promise<void> {
    const http = host.switchToHttp();
    const reply = http.getResponse<FastifyReply>();
    const request = http.getRequest<FastifyRequest>();
    if (error instanceof StoreUnavailableError) {
      // Not the client's doing, nor a fault of ours to hide: the operator is told what (a full
      // disk, a writer gone), the client that nothing was written and to come back.
      this.logError(request, 'the event store cannot write', error.message);
      const refusal = new ApiError(
        503,
        'store_unavailable',
        'the event store cannot write now; nothing of the request was written: retry in a moment',
      );
      answerRefusal(request, reply, refusal, this.metrics);
      return;
    }
    if (error instanceof UnreadableEventError) {
      // Damaged storage, not the client's doing: the answer says which event, so the report
      // that reaches an operator names what to mend (docs/operations.md).
      this.logError(request, 'a recorded event is unreadable', error.message);
      const { id, revision, position } = error.event;
      const facts = { eventId: id, revision, position };
      const answer = new ApiError(
        500,
        'event_unreadable',
        `event ${id} (revision ${revision}) is stored but cannot be read, so the request could not be served; an operator must mend it`,
        facts,
        facts,
      );
      answerRefusal(request, reply, answer, this.metrics);
      return;
    }
    const known = toApiError(error);
    if (!known) {
      this.logUnexpected(request, error);
      // The id the log line carries: what an operator greps for when a client reports this.
      void reply.status(500).send({
        error: 'internal',
        message: `an unexpected error occurred; it was logged with requestId ${request.id}`,
        requestId: request.id,
      });
      return;
    }
    // Fastify's 415s (ours say more) are only ever about the media type.
    const apiError =
      known.status === 415 && !(error instanceof ApiError)
        ? mediaTypeRefusal(request.headers['content-type'])
        : known;
    if (apiError.error === 'body_too_large') {
      // The answer is 413 whether or not the marker could be recorded; a failure to record is logged.
      await this.bodyRejections
        .record(request)
        .catch((cause: unknown) => this.logUnexpected(request, cause));
    }
    answerRefusal(request, reply, apiError, this.metrics);
  }

  private logUnexpected(request: FastifyRequest, error: unknown): void {
    this.logError(
      request,
      'unhandled error',
      error instanceof Error ? (error.stack ?? error.message) : String(error),
    );
  }

  /** An error line naming the request: the id its answer carries, its tenant, method and URL. */
  private logError(request: FastifyRequest, msg: string, error: string): void {
    this.logger.error({
      msg,
      requestId: request.id,
      tenantId: request.principal?.tenantId,
      method: request.method,
      url: request.url,
      error,
    });
  }
}
