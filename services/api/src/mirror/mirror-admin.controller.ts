/**
 * The mirror's parked events, for an admin: list them, re-drive one. Served by the api when
 * it runs the mirror (KAFKA_BROKERS set) and by `npm run start:mirror`. A tenant's admin key
 * sees its own tenant's parked events and those with no tenant stamp (which name no tenant's
 * data); another tenant's event id answers 404.
 */
import { Controller, Get, HttpCode, Optional, Param, Post, Query } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import { MirrorService, ParkedEventNotFoundError, StillParkedError } from '@runledger/mirror';
import { CurrentPrincipal, RequireScope } from '../auth/access.decorators';
import type { Principal } from '../auth/principal';
import { ApiError } from '../http/api-error';
import { queryInt } from '../runs/runs.controller';
import { ApiOptionalQuery, ApiRoute } from '../openapi/api-route.decorator';
import { ParkedPage, RedrivenEvent } from '../openapi/schemas';

@ApiTags('admin')
@Controller('v1/admin/mirror')
export class MirrorAdminController {
  constructor(@Optional() private readonly mirror?: MirrorService) {}

  @Get('parked')
  @RequireScope('admin')
  @ApiOperation({
    summary:
      'Run events the Kafka mirror parked (cannot be encoded, or refused by the broker), oldest first',
  })
  @ApiRoute({
    ok: { status: 200, description: 'Parked events, oldest first', type: ParkedPage },
    errors: [400, 403, 503],
  })
  @ApiOptionalQuery(
    'after',
    { type: 'integer', minimum: 0 },
    'The `nextAfter` of the previous page',
  )
  @ApiOptionalQuery(
    'limit',
    { type: 'integer', minimum: 1, maximum: 1000 },
    'Page size (default 100)',
  )
  list(
    @CurrentPrincipal() principal: Principal,
    @Query('after') after?: string,
    @Query('limit') limit?: string,
  ) {
    const mirror = this.running();
    const pageSize = queryInt('limit', limit, 100, 1, 1000);
    // One more than the page: a next page is offered only when there is one.
    const events = mirror.listParked(
      principal.tenantId,
      queryInt('after', after, 0, 0, Number.MAX_SAFE_INTEGER),
      pageSize + 1,
    );
    const page = events.slice(0, pageSize);
    return {
      parked: page,
      nextAfter: events.length > pageSize ? page[page.length - 1].position : null,
    };
  }

  @Post('parked/:eventId/retry')
  @HttpCode(200)
  @RequireScope('admin')
  @ApiOperation({
    summary:
      'Re-drive a parked event: publish it again, alone; 200 once the broker acknowledged, 409 `still_parked` with the reason otherwise',
  })
  @ApiRoute({
    ok: { status: 200, description: 'Published and acknowledged', type: RedrivenEvent },
    errors: [403, 404, 409, 414, 503],
  })
  async retry(@CurrentPrincipal() principal: Principal, @Param('eventId') eventId: string) {
    const mirror = this.running();
    if (!mirror.parkedEvent(eventId, principal.tenantId)) {
      throw new ApiError(404, 'parked_event_not_found', `no parked event ${eventId}`);
    }
    try {
      return { event: await mirror.retryParked(eventId, principal.tenantId) };
    } catch (error) {
      if (error instanceof ParkedEventNotFoundError) {
        throw new ApiError(404, 'parked_event_not_found', error.message);
      }
      if (error instanceof StillParkedError) {
        throw new ApiError(409, 'still_parked', error.message, undefined, {
          reason: error.reason,
          event: mirror.parkedEvent(eventId, principal.tenantId),
        });
      }
      throw new ApiError(
        503,
        'publish_failed',
        `event ${eventId} stays parked: publishing failed (${error instanceof Error ? error.message : String(error)}); retry later`,
      );
    }
  }

  private running(): MirrorService {
    if (!this.mirror) {
      throw new ApiError(
        503,
        'mirror_off',
        'this process does not run the Kafka mirror (KAFKA_BROKERS is unset); ask the mirror service',
      );
    }
    return this.mirror;
  }
}
