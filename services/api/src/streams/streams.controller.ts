/**
 * Server-Sent Events routes: a run's events, or every run of a thread, live. Access is
 * decided like every other read (a foreign or missing run or thread answers a JSON 404
 * before the stream starts); the streaming itself is the SseFanout's.
 */
import { Controller, Get, Headers, Param, Query, Res } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { CurrentPrincipal, ReadOrStreamToken } from '../auth/access.decorators';
import type { Principal } from '../auth/principal';
import { RateLimited } from '../limits/rate-limit.decorators';
import { RunLogService } from '../runs/run-log.service';
import { queryInt } from '../runs/runs.controller';
import { ThreadsService } from '../threads/threads.service';
import type { StreamWatch } from './sse-client';
import { SseFanout, type StreamStart } from './sse-fanout.service';
import { ApiMinPosition, ApiRoute, ApiStreamStart } from '../openapi/api-route.decorator';
import { StreamSlots } from './stream-slots';

const STREAM_DOC =
  'Server-Sent Events: every event after `Last-Event-ID` (a position, exclusive), else after `?from=` ' +
  '(a position, exclusive: `?from=0` is the whole history), else from now; then live. Each message: ' +
  '`id: <position>`, `event: <type>`, `data: { id, type, revision, position, recordedAt, data, metadata }`. ' +
  'A client with more than SSE_MAX_BUFFER_BYTES waiting for its socket, or whose socket took nothing for ' +
  'SSE_SEND_TIMEOUT_MS, gets `event: overflow` with `data: { resumeFrom }` and the stream closes: reconnect ' +
  'with `Last-Event-ID: <resumeFrom>`. `: heartbeat` comments every SSE_HEARTBEAT_MS. Each connection is a ' +
  'call against the rate limit; beyond SSE_MAX_STREAMS_PER_KEY or SSE_MAX_STREAMS_PER_TENANT open streams, 429.';

/**
 * A position a client sent back (a query parameter, a header); undefined when absent or blank.
 * A repeated parameter is refused by queryInt.
 */
export function optionalPosition(
  field: string,
  raw: string | string[] | undefined,
): number | undefined {
  if (raw === undefined || (typeof raw === 'string' && raw.trim() === '')) return undefined;
  return queryInt(field, typeof raw === 'string' ? raw.trim() : raw, 0, 0, Number.MAX_SAFE_INTEGER);
}

/**
 * Where a stream starts: Last-Event-ID wins over the query's position (`?from=`, or the
 * notifications' `?after=`), since a browser reconnecting keeps the original URL and sends
 * the last id it received. Both are exclusive positions.
 */
export function streamStart(
  lastEventId: string | undefined,
  from: string | string[] | undefined,
  fromField = 'from',
): StreamStart | undefined {
  for (const [field, raw] of [
    ['Last-Event-ID', lastEventId],
    [fromField, from],
  ] as const) {
    const after = optionalPosition(field, raw);
    if (after !== undefined) return { field, after };
  }
  return undefined;
}

@ApiTags('streams')
@Controller('v1')
export class StreamsController {
  constructor(
    private readonly runLog: RunLogService,
    private readonly threads: ThreadsService,
    private readonly fanout: SseFanout,
    private readonly slots: StreamSlots,
  ) {}

  /** Streams `watch` while holding one of the caller's stream slots, freed when it closes. */
  private async stream(
    principal: Principal,
    reply: FastifyReply,
    watch: StreamWatch,
    start: StreamStart | undefined,
  ): Promise<void> {
    const release = this.slots.acquire(principal, reply.request);
    reply.raw.once('close', release);
    try {
      await this.fanout.open(reply, watch, start);
    } catch (error) {
      release();
      throw error;
    }
  }

  @Get('runs/:runId/stream')
  @ReadOrStreamToken('run', 'runId')
  // One call per connection, like the thread stream: a reconnect spends from the budget.
  @RateLimited('call')
  @ApiOperation({
    summary: "A run's events as Server-Sent Events, then live",
    description: STREAM_DOC,
  })
  @ApiRoute({
    ok: { status: 200, description: 'The stream', sse: true },
    errors: [400, 404, 414, 429],
    streamToken: true,
  })
  @ApiStreamStart()
  async runStream(
    @CurrentPrincipal() principal: Principal,
    @Param('runId') runId: string,
    @Headers('last-event-id') lastEventId: string | undefined,
    @Query('from') from: string | string[] | undefined,
    @Res() reply: FastifyReply,
  ): Promise<void> {
    const start = streamStart(lastEventId, from);
    await this.runLog.requireRun(principal.tenantId, runId);
    await this.stream(
      principal,
      reply,
      { kind: 'run', tenantId: principal.tenantId, runId },
      start,
    );
  }

  @Get('threads/:threadId/stream')
  @ReadOrStreamToken('thread', 'threadId')
  // One call per connection, like every thread route: a reconnect spends from the budget.
  @RateLimited('call')
  @ApiOperation({
    summary:
      "Every run of a thread as Server-Sent Events, then live (runs started later included; `?minPosition=` as the thread's queries)",
    description: STREAM_DOC,
  })
  @ApiRoute({
    ok: { status: 200, description: 'The stream', sse: true },
    errors: [400, 404, 414, 429, 503],
    streamToken: true,
  })
  @ApiStreamStart()
  @ApiMinPosition()
  async threadStream(
    @CurrentPrincipal() principal: Principal,
    @Param('threadId') threadId: string,
    @Headers('last-event-id') lastEventId: string | undefined,
    @Query('from') from: string | string[] | undefined,
    @Query('minPosition') minPosition: string | undefined,
    @Res() reply: FastifyReply,
  ): Promise<void> {
    const start = streamStart(lastEventId, from);
    const min =
      minPosition === undefined
        ? undefined
        : queryInt('minPosition', minPosition, 0, 0, Number.MAX_SAFE_INTEGER);
    await this.threads.require(principal.tenantId, threadId, min);
    await this.stream(
      principal,
      reply,
      { kind: 'thread', tenantId: principal.tenantId, threadId },
      start,
    );
  }
}
