import { Body, Controller, Get, Headers, HttpCode, Post, Query, Req, Res } from '@nestjs/common';
import { ApiHeader, ApiOperation, ApiTags } from '@nestjs/swagger';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CurrentPrincipal, RequireScope } from '../auth/access.decorators';
import type { Principal } from '../auth/principal';
import { USER_NAME_MAX } from '../config/config';
import { ApiError } from '../http/api-error';
import { clientCaller, type ClientCaller } from '../http/caller';
import { RateLimited } from '../limits/rate-limit.decorators';
import { queryInt } from '../runs/runs.controller';
import { StreamSlots } from '../streams/stream-slots';
import { optionalPosition, streamStart } from '../streams/streams.controller';
import { NotificationsService } from './notifications.service';
import { ApiMinPosition, ApiOptionalQuery, ApiRoute } from '../openapi/api-route.decorator';
import { NotificationPage, SeenRequest, SeenResponse } from '../openapi/schemas';

const ITEM_DOC =
  'Items `{ threadId, runId, kind: "blocked"|"finished", state: "blocked"|"completed"|"failed"|"cancelled", ' +
  'title, summary, position, event, eventId, recordedAt, approvalId?, toolName?, question? }`, oldest first: ' +
  'one per thread transition into blocked or finished. `?user=` keeps the threads of one user ' +
  "(a user's name as recorded, `key:<key id>` for a key acting as itself, or `me`).";

/** `me` is the caller; anything else names a user as the API records them. */
function userFilter(caller: ClientCaller, raw: string | string[] | undefined): string | undefined {
  if (raw === undefined) return undefined;
  if (raw === 'me') return caller.user;
  if (typeof raw !== 'string' || raw === '' || [...raw].length > USER_NAME_MAX) {
    const rule = `user must be me, a user's name or key:<key id>, 1 to ${USER_NAME_MAX} characters`;
    throw new ApiError(400, 'validation_failed', rule, [
      { field: 'user', rule: 'length', message: rule },
    ]);
  }
  return raw;
}

@ApiTags('notifications')
@RateLimited('call')
@Controller('v1/notifications')
export class NotificationsController {
  constructor(
    private readonly notifications: NotificationsService,
    private readonly slots: StreamSlots,
  ) {}

  @Get()
  @RequireScope('read')
  @ApiOperation({
    summary:
      "What needs me: threads that became blocked or finished, after `?after=` (a position) or after the caller's seen cursor",
    description: `${ITEM_DOC} Answers \`{ notifications, nextAfter, seen, position }\`; \`?limit=\` (1-100, default 50), \`?minPosition=\`.`,
  })
  @ApiRoute({
    ok: { status: 200, description: 'A page of notifications', type: NotificationPage },
    errors: [400, 429, 503],
  })
  @ApiOptionalQuery(
    'after',
    { type: 'integer', minimum: 0 },
    "After this position (default: the caller's seen cursor)",
  )
  @ApiOptionalQuery(
    'user',
    { type: 'string' },
    "`me`, a user's name as recorded, or `key:<key id>`",
  )
  @ApiOptionalQuery(
    'limit',
    { type: 'integer', minimum: 1, maximum: 100 },
    'Page size (default 50)',
  )
  @ApiMinPosition()
  list(
    @Req() request: FastifyRequest,
    @Query('after') after?: string | string[],
    @Query('user') user?: string | string[],
    @Query('limit') limit?: string | string[],
    @Query('minPosition') minPosition?: string | string[],
  ) {
    const caller = clientCaller(request);
    return this.notifications.list(caller, {
      after: optionalPosition('after', after),
      user: userFilter(caller, user),
      limit: queryInt('limit', limit, 50, 1, 100),
      minPosition: optionalPosition('minPosition', minPosition),
    });
  }

  @Get('stream')
  @RequireScope('read')
  @ApiOperation({
    summary: 'What needs me, live (Server-Sent Events)',
    description:
      `${ITEM_DOC} Starts after \`Last-Event-ID\`, else \`?after=\`, else the caller's seen cursor, else from now; each ` +
      'message is `id: <position>`, `event: notification`, `data: <item>`. With `?minPosition=`, it starts once the ' +
      'notifications have passed that position (503 `projection_behind` if not within `READ_WAIT_MS`).',
  })
  @ApiRoute({
    ok: { status: 200, description: 'The stream: `event: notification` messages', sse: true },
    errors: [400, 429, 503],
  })
  @ApiHeader({
    name: 'Last-Event-ID',
    required: false,
    description: 'Resume after this position (exclusive)',
  })
  @ApiOptionalQuery(
    'after',
    { type: 'integer', minimum: 0 },
    'Start after this position (exclusive)',
  )
  @ApiOptionalQuery(
    'user',
    { type: 'string' },
    "`me`, a user's name as recorded, or `key:<key id>`",
  )
  @ApiMinPosition()
  async stream(
    @Req() request: FastifyRequest,
    @Headers('last-event-id') lastEventId: string | undefined,
    @Query('after') after: string | string[] | undefined,
    @Query('user') user: string | string[] | undefined,
    @Query('minPosition') minPosition: string | string[] | undefined,
    @Res() reply: FastifyReply,
    @CurrentPrincipal() principal: Principal,
  ): Promise<void> {
    const caller = clientCaller(request);
    const query = {
      after: streamStart(lastEventId, after, 'after'),
      user: userFilter(caller, user),
      minPosition: optionalPosition('minPosition', minPosition),
    };
    // One of the caller's stream slots, like run and thread streams, until it closes.
    const release = this.slots.acquire(principal, request);
    reply.raw.once('close', release);
    try {
      await this.notifications.stream(reply, caller, query);
    } catch (error) {
      release();
      throw error;
    }
  }

  @Post('seen')
  @HttpCode(200)
  @RequireScope('read')
  @ApiOperation({
    summary: "Mark notifications seen up to `{ position }`: the caller's cursor only moves forward",
    description:
      "The cursor belongs to the caller (tenant and acting user: the key's user, the one a gateway names, else the API key). Answers `{ seen }`.",
  })
  @ApiRoute({
    body: SeenRequest,
    ok: { status: 200, description: 'The cursor now', type: SeenResponse },
    errors: [400, 409, 429],
  })
  seen(@Req() request: FastifyRequest, @Body() body: unknown) {
    return this.notifications.markSeen(clientCaller(request), body);
  }
}
