import { Readable } from 'node:stream';
import {
  Body,
  Controller,
  Get,
  Header,
  HttpCode,
  Param,
  Post,
  Query,
  StreamableFile,
} from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import { CurrentActor, CurrentPrincipal, RequireScope } from '../auth/access.decorators';
import type { Actor, Principal } from '../auth/principal';
import { ApiError } from '../http/api-error';
import { BulkRead } from '../limits/bulk-reads';
import { costlyIfUserStartsTurn, RateLimited } from '../limits/rate-limit.decorators';
import { RunLogService } from './run-log.service';
import { ApiOptionalQuery, ApiRoute } from '../openapi/api-route.decorator';
import {
  AppendRequest,
  AppendResponse,
  AuditVerdict,
  ModelCallRefusedBody,
  RecordedEvent,
  RunEventsPage,
} from '../openapi/schemas';

@ApiTags('runs')
@Controller('v1/runs/:runId')
export class RunsController {
  constructor(private readonly runLog: RunLogService) {}

  @Post('events')
  @HttpCode(201)
  @RequireScope('append')
  @RateLimited(costlyIfUserStartsTurn)
  @ApiOperation({
    summary: 'Append a batch of events to a run',
    description:
      'Body `{ expectedRevision?, events: [{ id?, type, data, metadata? }] }`. The batch is validated whole and ' +
      'appended atomically; 201 `{ runId, firstRevision, lastRevision, position, events: [{ id, revision, position }] }`. ' +
      'Re-sending ids already recorded answers the originals. 400 invalid (nothing written), 403 server-only type, ' +
      '404 unknown or foreign run, 409 wrong expected revision / run finished / turn already active / id conflict.',
  })
  @ApiRoute({
    body: AppendRequest,
    ok: {
      status: 201,
      description: 'Appended (or already recorded: idempotent)',
      type: AppendResponse,
    },
    errors: [400, 403, 404, 409, 413, 414, 429, 503],
    errorBodies: {
      413: {
        type: ModelCallRefusedBody,
        when: 'Or `model_call_too_large`: an oversize model.call was recorded reduced, and must not be dispatched (`dispatch: "refused"`, the ModelCallRefusedBody).',
      },
    },
  })
  append(
    @CurrentPrincipal() principal: Principal,
    @CurrentActor() actor: Actor,
    @Param('runId') runId: string,
    @Body() body: unknown,
  ) {
    return this.runLog.append(principal.tenantId, runId, body, actor);
  }

  @Get('events')
  @RequireScope('read')
  @BulkRead()
  @Header('Content-Type', 'application/json; charset=utf-8')
  @ApiOperation({ summary: "Read a run's events from a revision (`?fromRevision=0&limit=100`)" })
  @ApiRoute({
    ok: { status: 200, description: 'A page of the run, oldest first', type: RunEventsPage },
    errors: [400, 404, 414, 429],
  })
  @ApiOptionalQuery(
    'fromRevision',
    { type: 'integer', minimum: 0 },
    'First revision to read (default 0)',
  )
  @ApiOptionalQuery(
    'limit',
    { type: 'integer', minimum: 1, maximum: 1000 },
    'Most events in the page (default 100); a page of very large events ends sooner, after 16 MiB of their JSON: read on from `nextRevision` until it is null',
  )
  read(
    @CurrentPrincipal() principal: Principal,
    @Param('runId') runId: string,
    @Query('fromRevision') fromRevision?: string,
    @Query('limit') limit?: string,
  ) {
    return this.runLog.readEvents(
      principal.tenantId,
      runId,
      queryInt('fromRevision', fromRevision, 0, 0, Number.MAX_SAFE_INTEGER),
      queryInt('limit', limit, 100, 1, 1000),
    );
  }

  @Get('replay')
  @RequireScope('read')
  @BulkRead()
  @ApiOperation({
    summary: 'Replay a run: NDJSON, one recorded event a line, in order',
    description:
      'The hash chain is recomputed as the lines go out. When it is broken, a last line holds the audit verdict, `{ runId, count, headHash: null, verified: false, firstBrokenRevision }`, after every event. ' +
      'An event the store holds but cannot read (a damaged row) is a line in its place with `unreadable` (why), `data: null` and empty `metadata`; the replay goes on after it, and the chain breaks there.',
  })
  @ApiRoute({
    ok: {
      status: 200,
      description:
        'Every recorded event, one JSON object a line; then, only when the chain is broken, the verdict',
      ndjson: RecordedEvent,
    },
    errors: [404, 414, 429],
  })
  async replay(@CurrentPrincipal() principal: Principal, @Param('runId') runId: string) {
    await this.runLog.requireRun(principal.tenantId, runId);
    return new StreamableFile(Readable.from(this.runLog.replayLines(principal.tenantId, runId)), {
      type: 'application/x-ndjson',
    });
  }

  @Get('audit')
  @RequireScope('read')
  @BulkRead()
  @ApiOperation({
    summary:
      "Verify a run's hash chain: `{ runId, count, headHash, verified, firstBrokenRevision }`",
  })
  @ApiRoute({
    ok: { status: 200, description: 'The verdict over the whole run', type: AuditVerdict },
    errors: [404, 414, 429],
  })
  audit(@CurrentPrincipal() principal: Principal, @Param('runId') runId: string) {
    return this.runLog.audit(principal.tenantId, runId);
  }
}

/** A repeated query parameter arrives as an array: refused like any malformed value. */
export function queryInt(
  name: string,
  raw: string | string[] | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  if (raw === undefined || raw === '') return fallback;
  const value = typeof raw === 'string' && /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    const rule = `${name} must be an integer from ${min} to ${max}`;
    throw new ApiError(400, 'validation_failed', rule, [
      { field: name, rule: 'isInt', message: rule },
    ]);
  }
  return value;
}
