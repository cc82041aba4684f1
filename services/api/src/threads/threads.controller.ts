import { Readable } from 'node:stream';
import { Controller, Get, Header, Param, Query, StreamableFile } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import type { ThreadStatus } from '@runledger/domain';
import { CurrentPrincipal, RequireScope } from '../auth/access.decorators';
import type { Principal } from '../auth/principal';
import { ApiError } from '../http/api-error';
import { BulkRead } from '../limits/bulk-reads';
import { RateLimited } from '../limits/rate-limit.decorators';
import { assertRunId } from '../runs/run-log.service';
import { queryInt } from '../runs/runs.controller';
import {
  THREAD_PAGE_DEFAULT,
  THREAD_PAGE_MAX,
  THREAD_STATUSES,
  ThreadsService,
} from './threads.service';
import { ApiMinPosition, ApiOptionalQuery, ApiRoute } from '../openapi/api-route.decorator';
import {
  ThreadListPage,
  ThreadView,
  ToolResultText,
  UIMessage,
  VoiceSeed,
} from '../openapi/schemas';

const NEWLINE = Buffer.from('\n');

const MIN_POSITION_DOC =
  "Every query accepts `?minPosition=` (an append's `position`): it waits up to READ_WAIT_MS for the " +
  "projection to pass it, else answers 503 `projection_behind` with the projection's `position`.";

function minPosition(raw: string | undefined): number | undefined {
  return raw === undefined
    ? undefined
    : queryInt('minPosition', raw, 0, 0, Number.MAX_SAFE_INTEGER);
}

@ApiTags('threads')
@RateLimited('call')
@Controller('v1/threads')
export class ThreadsController {
  constructor(private readonly threads: ThreadsService) {}

  @Get()
  @RequireScope('read')
  @ApiOperation({
    summary:
      'List threads, newest activity first (`?status=running|blocked|idle|finished&limit=&cursor=`)',
    description: MIN_POSITION_DOC,
  })
  @ApiRoute({
    ok: { status: 200, description: 'A page of threads', type: ThreadListPage },
    errors: [400, 429, 503],
  })
  @ApiMinPosition()
  @ApiOptionalQuery(
    'status',
    { type: 'string', enum: [...THREAD_STATUSES] },
    'Only threads in this status',
  )
  @ApiOptionalQuery(
    'limit',
    { type: 'integer', minimum: 1, maximum: 100 },
    'Page size (default 20)',
  )
  @ApiOptionalQuery('cursor', { type: 'string' }, 'The `nextCursor` of the previous page')
  list(
    @CurrentPrincipal() principal: Principal,
    @Query('status') status?: string,
    @Query('limit') limit?: string,
    @Query('cursor') cursor?: string,
    @Query('minPosition') min?: string,
  ) {
    if (status !== undefined && !(THREAD_STATUSES as readonly string[]).includes(status)) {
      const rule = `status must be one of ${THREAD_STATUSES.join(', ')}`;
      throw new ApiError(400, 'validation_failed', rule, [
        { field: 'status', rule: 'isIn', message: rule },
      ]);
    }
    return this.threads.list(principal.tenantId, {
      status: status as ThreadStatus | undefined,
      limit: queryInt('limit', limit, 20, 1, 100),
      cursor,
      minPosition: minPosition(min),
    });
  }

  @Get(':threadId')
  @RequireScope('read')
  @Header('Content-Type', 'application/json; charset=utf-8')
  @ApiOperation({
    summary:
      'A thread: title, status, runs, pending approvals, active tools, and its newest page of AI SDK UIMessages',
    description:
      `\`messages\` holds at most \`?limit=\` messages (default ${THREAD_PAGE_DEFAULT}, at most ${THREAD_PAGE_MAX}), ` +
      'oldest first within the page, and stops before the page passes 1 MiB (it always holds at least one message); ' +
      '`messageCount` counts the whole thread. `page: { limit, before, hasMore }`: ' +
      'pass `page.before` as `?before=` for the page of older messages (null at the first message); a cursor ' +
      'stays valid while the thread grows. ' +
      MIN_POSITION_DOC,
  })
  @ApiRoute({
    ok: { status: 200, description: 'The thread view', type: ThreadView },
    errors: [400, 404, 414, 429, 503],
  })
  @ApiMinPosition()
  @ApiOptionalQuery(
    'limit',
    { type: 'integer', minimum: 1, maximum: THREAD_PAGE_MAX },
    'Messages in the page',
  )
  @ApiOptionalQuery('before', { type: 'string' }, 'The `page.before` of a newer page')
  view(
    @CurrentPrincipal() principal: Principal,
    @Param('threadId') threadId: string,
    @Query('limit') limit?: string,
    @Query('before') before?: string | string[],
    @Query('minPosition') min?: string,
  ) {
    const cursor = onceOnly('before', before);
    return this.threads.view(principal.tenantId, threadId, {
      limit: queryInt('limit', limit, THREAD_PAGE_DEFAULT, 1, THREAD_PAGE_MAX),
      before: cursor === '' ? undefined : cursor,
      minPosition: minPosition(min),
    });
  }

  @Get(':threadId/export')
  @RequireScope('read')
  @BulkRead()
  @ApiOperation({
    summary: "A whole thread's messages as NDJSON: one AI SDK UIMessage a line, oldest first",
    description: MIN_POSITION_DOC,
  })
  @ApiRoute({
    ok: { status: 200, description: 'Every message, one JSON object a line', ndjson: UIMessage },
    errors: [400, 404, 414, 429, 503],
  })
  @ApiMinPosition()
  async export(
    @CurrentPrincipal() principal: Principal,
    @Param('threadId') threadId: string,
    @Query('minPosition') min?: string,
  ) {
    const pages = await this.threads.export(principal.tenantId, threadId, minPosition(min));
    const lines = async function* () {
      for await (const page of pages) {
        yield Buffer.concat(page.flatMap((message) => [message, NEWLINE]));
      }
    };
    return new StreamableFile(Readable.from(lines()), { type: 'application/x-ndjson' });
  }

  @Get(':threadId/voice-seed')
  @RequireScope('read')
  @ApiOperation({
    summary: 'The last spoken and typed turns, oldest first: at most 20 turns and 4,000 tokens',
    description: MIN_POSITION_DOC,
  })
  @ApiRoute({
    ok: { status: 200, description: 'The seed for a new voice call', type: VoiceSeed },
    errors: [400, 404, 414, 429, 503],
  })
  @ApiMinPosition()
  voiceSeed(
    @CurrentPrincipal() principal: Principal,
    @Param('threadId') threadId: string,
    @Query('minPosition') min?: string,
  ) {
    return this.threads.voiceSeed(principal.tenantId, threadId, minPosition(min));
  }

  @Get(':threadId/tool-results/:toolCallId')
  @RequireScope('read')
  @ApiOperation({
    summary:
      "A tool's output as text: whole, or for a voice model (`?for=voice`) cut above 12,000 characters " +
      'with a hint naming where the rest starts, which `?offset=` then reads from',
    description: MIN_POSITION_DOC,
  })
  @ApiRoute({
    ok: { status: 200, description: 'The tool result as text', type: ToolResultText },
    errors: [400, 404, 414, 429, 503],
  })
  @ApiMinPosition()
  @ApiOptionalQuery(
    'for',
    { type: 'string', enum: ['voice'] },
    'Cut for a voice model, with a continuation hint',
  )
  @ApiOptionalQuery(
    'offset',
    { type: 'integer', minimum: 0 },
    'Character to start from (default 0)',
  )
  @ApiOptionalQuery(
    'runId',
    { type: 'string' },
    "The run whose call it is: call ids are unique within a run, and two runs of a thread may use the same one. Without it, the thread's newest call with this id",
  )
  toolResult(
    @CurrentPrincipal() principal: Principal,
    @Param('threadId') threadId: string,
    @Param('toolCallId') toolCallId: string,
    @Query('for') audience?: string,
    @Query('offset') offset?: string,
    @Query('minPosition') min?: string,
    @Query('runId') runId?: string | string[],
  ) {
    if (audience !== undefined && audience !== 'voice') {
      throw new ApiError(400, 'validation_failed', 'for must be voice', [
        { field: 'for', rule: 'isIn', message: 'for must be voice' },
      ]);
    }
    const run = onceOnly('runId', runId);
    if (run !== undefined) assertRunId(run);
    return this.threads.toolResult(principal.tenantId, threadId, toolCallId, {
      runId: run,
      forVoice: audience === 'voice',
      offset: queryInt('offset', offset, 0, 0, Number.MAX_SAFE_INTEGER),
      minPosition: minPosition(min),
    });
  }
}

/** A text query parameter, which a client may give once: repeated, 400 naming it. */
function onceOnly(field: string, raw: string | string[] | undefined): string | undefined {
  if (raw === undefined || typeof raw === 'string') return raw;
  const rule = `${field} must be given once`;
  throw new ApiError(400, 'validation_failed', rule, [{ field, rule: 'isString', message: rule }]);
}
