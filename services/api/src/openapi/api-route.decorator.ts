/**
 * One decorator per route for its OpenAPI description: the request body, the success
 * response with its media type, and every error status the route can answer, each with the
 * one error body. Controllers stay one line per concern; the schemas live in ./schemas.
 */
import { applyDecorators, type Type } from '@nestjs/common';
import {
  ApiBody,
  ApiExtraModels,
  ApiHeader,
  ApiQuery,
  ApiResponse,
  ApiSecurity,
  getSchemaPath,
} from '@nestjs/swagger';
import type { SchemaObject } from '@nestjs/swagger/dist/interfaces/open-api-spec.interface';
import { ErrorBody, ModelCallRefusedBody, Problem, RecordedEvent } from './schemas';

/** The security scheme's name in the document: an opaque bearer key, not a JWT. */
export const API_KEY_SCHEME = 'apiKey';
/** The alternative on streams: a stream token in `?token=` (POST /v1/stream-tokens). */
export const STREAM_TOKEN_SCHEME = 'streamToken';

const ERROR_MEANING: Record<number, string> = {
  400: 'Invalid input: `details` names each field and rule. Nothing was written.',
  401: 'No key, or an unknown key (`unauthorized`).',
  403: "The key lacks the route's scope (`forbidden`), or the request is refused as such.",
  404: "Unknown, or another tenant's (the same answer, by design).",
  408: 'The request did not arrive whole within `HTTP_REQUEST_TIMEOUT_MS` (`request_timeout`).',
  409: 'A precondition failed: the current state is in the body. Nothing was written.',
  413: 'Too large (`body_too_large`: the body was not read).',
  414: 'A path segment over 256 characters (`uri_too_long`).',
  415: 'A body that is not `application/json`, or not in UTF-8 (`unsupported_media_type`).',
  429: 'Rate limited (`rate_limited`): retry after `Retry-After` seconds.',
  503: 'Not available now (`projection_behind` with its `position`, `busy`, `store_unavailable`, ...): retry after `Retry-After` seconds.',
};

/** What the HTTP edge answers any route that takes a body, before the route sees it. */
const BODY_ERRORS = [400, 408, 413, 415];

type Success =
  | { status: number; description: string; type: Type<unknown> | [Type<unknown>] }
  | { status: number; description: string; ndjson: Type<unknown> }
  | { status: number; description: string; sse: true };

export interface RouteDoc {
  body?: Type<unknown>;
  /** A body every field of which is optional may also be left out (stop's `{ reason? }`). */
  bodyOptional?: true;
  ok: Success;
  /**
   * Error statuses besides those every keyed route may answer (401; 403, for a key without
   * the route's scope) and those of taking a body (400, 408, 413, 415).
   */
  errors: number[];
  /** A stream a browser may open with `?token=` instead of the key. */
  streamToken?: true;
  /**
   * A status the route may also answer with a body that extends the error body (the 413 of a
   * refused model call), and when: documented as either body.
   */
  errorBodies?: Partial<Record<number, { type: Type<ErrorBody>; when: string }>>;
}

function success(ok: Success): MethodDecorator {
  if ('type' in ok)
    return ApiResponse({ status: ok.status, description: ok.description, type: ok.type });
  if ('ndjson' in ok) {
    return ApiResponse({
      status: ok.status,
      description: ok.description,
      content: { 'application/x-ndjson': { schema: { $ref: getSchemaPath(ok.ndjson) } } },
    });
  }
  const schema: SchemaObject = {
    type: 'string',
    description:
      'A stream of `id: <position>`, `event: <type>`, `data: <RecordedEvent JSON>` messages; ' +
      '`event: overflow` with `data: { resumeFrom }` ends a stream whose client fell behind.',
  };
  return ApiResponse({
    status: ok.status,
    description: ok.description,
    content: { 'text/event-stream': { schema } },
  });
}

export function ApiRoute(doc: RouteDoc): MethodDecorator {
  const errors = [...new Set([401, 403, ...(doc.body ? BODY_ERRORS : []), ...doc.errors])].sort(
    (a, b) => a - b,
  );
  return applyDecorators(
    ApiSecurity(API_KEY_SCHEME),
    ...(doc.streamToken ? [ApiSecurity(STREAM_TOKEN_SCHEME)] : []),
    ApiExtraModels(ErrorBody, Problem, ModelCallRefusedBody, RecordedEvent),
    ...(doc.body ? [ApiBody({ type: doc.body, required: !doc.bodyOptional })] : []),
    success(doc.ok),
    ...errors.map((status) => {
      const also = doc.errorBodies?.[status];
      if (also === undefined) {
        return ApiResponse({ status, description: ERROR_MEANING[status], type: ErrorBody });
      }
      return ApiResponse({
        status,
        description: `${ERROR_MEANING[status]} ${also.when}`,
        schema: {
          oneOf: [{ $ref: getSchemaPath(ErrorBody) }, { $ref: getSchemaPath(also.type) }],
        },
      });
    }),
  );
}

/** The start of a Server-Sent Events stream: `Last-Event-ID` wins over `?from=`. */
export function ApiStreamStart(): MethodDecorator {
  return applyDecorators(
    ApiHeader({
      name: 'Last-Event-ID',
      required: false,
      description: 'Resume after this position (exclusive); what EventSource sends on reconnect.',
    }),
    ApiQuery({
      name: 'from',
      required: false,
      schema: { type: 'integer', minimum: 0 },
      description: 'Start after this position (exclusive): `0` is the whole history. Default: now.',
    }),
  );
}

/** `?minPosition=`: read-your-writes for a read of the projections. */
export function ApiMinPosition(): MethodDecorator {
  return ApiQuery({
    name: 'minPosition',
    required: false,
    schema: { type: 'integer', minimum: 0 },
    description:
      "Wait (up to READ_WAIT_MS) until the projection has passed this position (an append's `position`), else 503.",
  });
}

/** An optional query parameter: every query parameter of this API has a default. */
export function ApiOptionalQuery(
  name: string,
  schema: SchemaObject,
  description: string,
): MethodDecorator {
  return ApiQuery({ name, required: false, schema, description });
}
