import { Body, Controller, Get, Put, Query, Req, Res } from '@nestjs/common';
import { ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { maxLength } from 'class-validator';
import { RequireScope } from '../auth/access.decorators';
import { ApiError } from '../http/api-error';
import { clientCaller } from '../http/caller';
import { RateLimited } from '../limits/rate-limit.decorators';
import { queryInt } from '../runs/runs.controller';
import { CHANNEL_FIELD_MAX, CHANNEL_PATTERN } from './binding-bodies';
import { BindingsService } from './bindings.service';
import { ApiMinPosition, ApiOptionalQuery, ApiRoute } from '../openapi/api-route.decorator';
import { BindingAnswer, BindingPage, BindingRequest } from '../openapi/schemas';

function filter(
  name: string,
  raw: string | string[] | undefined,
  pattern: RegExp | null,
): string | undefined {
  if (raw === undefined) return undefined;
  if (
    typeof raw !== 'string' ||
    raw === '' ||
    // Counted as the body's MaxLength counts: a surrogate pair is one character.
    !maxLength(raw, CHANNEL_FIELD_MAX) ||
    (pattern !== null && !pattern.test(raw))
  ) {
    const rule = `${name} must be 1 to ${CHANNEL_FIELD_MAX} characters${pattern ? ` matching ${pattern.source}` : ''}`;
    throw new ApiError(400, 'validation_failed', rule, [
      { field: name, rule: 'matches', message: rule },
    ]);
  }
  return raw;
}

@ApiTags('bindings')
@RateLimited('call')
@Controller('v1/bindings')
export class BindingsController {
  constructor(private readonly bindings: BindingsService) {}

  @Put()
  @RequireScope('append')
  @ApiOperation({
    summary:
      'Find or create the thread of a chat conversation: `{ channel, account, chat, topic?, threadId? }`',
    description:
      '201 when this call bound the conversation (a new thread, or `threadId` when given), 200 when it was ' +
      'already bound: `{ bindingId, threadId, channel, account, chat, topic?, boundBy, boundAt, position, created }`. ' +
      'Idempotent under concurrency: racing calls for one conversation answer one thread. Two topics of one chat ' +
      'are two conversations. 409 `binding_conflict` when `threadId` names another thread than the bound one.',
  })
  @ApiRoute({
    body: BindingRequest,
    ok: {
      status: 201,
      description: 'Bound by this call (200 with `created: false` when it was already bound)',
      type: BindingAnswer,
    },
    errors: [400, 403, 404, 409, 429],
  })
  @ApiResponse({
    status: 200,
    description: 'Already bound: the existing binding',
    type: BindingAnswer,
  })
  async bind(
    @Req() request: FastifyRequest,
    @Body() body: unknown,
    @Res({ passthrough: true }) reply: FastifyReply,
  ) {
    const answer = await this.bindings.bind(clientCaller(request), body);
    void reply.status(answer.created ? 201 : 200);
    return answer;
  }

  @Get()
  @RequireScope('read')
  @ApiOperation({
    summary:
      "The tenant's bindings, oldest first (`?channel=&account=&after=&limit=&minPosition=`)",
    description:
      'Answers `{ bindings, nextAfter, position }`; pass `nextAfter` as `?after=` for the next page.',
  })
  @ApiRoute({
    ok: { status: 200, description: 'A page of bindings', type: BindingPage },
    errors: [400, 429, 503],
  })
  @ApiOptionalQuery('channel', { type: 'string' }, 'Only this channel')
  @ApiOptionalQuery('account', { type: 'string' }, 'Only this account')
  @ApiOptionalQuery(
    'after',
    { type: 'integer', minimum: 0 },
    'The `nextAfter` of the previous page',
  )
  @ApiOptionalQuery(
    'limit',
    { type: 'integer', minimum: 1, maximum: 100 },
    'Page size (default 50)',
  )
  @ApiMinPosition()
  list(
    @Req() request: FastifyRequest,
    @Query('channel') channel?: string | string[],
    @Query('account') account?: string | string[],
    @Query('after') after?: string | string[],
    @Query('limit') limit?: string | string[],
    @Query('minPosition') minPosition?: string | string[],
  ) {
    return this.bindings.list(clientCaller(request).tenantId, {
      channel: filter('channel', channel, CHANNEL_PATTERN),
      account: filter('account', account, null),
      after: queryInt('after', after, 0, 0, Number.MAX_SAFE_INTEGER),
      limit: queryInt('limit', limit, 50, 1, 100),
      minPosition:
        minPosition === undefined
          ? undefined
          : queryInt('minPosition', minPosition, 0, 0, Number.MAX_SAFE_INTEGER),
    });
  }
}
