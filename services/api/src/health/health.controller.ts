import { Controller, Get, Header, HttpCode, Inject, Optional, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { MirrorService } from '@runledger/mirror';
import { Metrics } from '@runledger/observability';
import { Public } from '../auth/access.decorators';
import { SurfaceService } from '../surface/surface.service';
import { ProjectionsService } from '../threads/projections.service';

/**
 * Probes and the metrics scrape: public by design, they reveal no tenant's data. Serves the
 * api (store, projector, and the mirror when it runs in process) and the standalone mirror
 * (store and mirror): each check is reported only where its part runs.
 */
@ApiExcludeController()
@Controller()
export class HealthController {
  constructor(
    @Inject(EVENT_STORE) private readonly store: EventStore,
    private readonly metrics: Metrics,
    /** Present in the api, which runs the projector. */
    @Optional() private readonly projections?: ProjectionsService,
    /** Present when this process runs the Kafka mirror. */
    @Optional() private readonly mirror?: MirrorService,
    /** Notifications and bindings (the api), or the notifications published to Kafka (the mirror). */
    @Optional() private readonly surface?: SurfaceService,
  ) {}

  @Get('health/live')
  @Public()
  @HttpCode(200)
  live() {
    return { status: 'live' };
  }

  @Get('health/ready')
  @Public()
  async ready(@Res({ passthrough: true }) reply: FastifyReply) {
    const store = await this.store.ping().then(
      () => 'ok',
      (error: unknown) => `unreachable: ${String(error)}`,
    );
    const projector = this.projections ? ((await this.projections.problem()) ?? 'ok') : undefined;
    const clientSurface = this.surface ? ((await this.surface.problem()) ?? 'ok') : undefined;
    const mirror = this.mirror ? ((await this.mirror.problem()) ?? 'ok') : 'off';
    const ready =
      store === 'ok' &&
      (projector ?? 'ok') === 'ok' &&
      (clientSurface ?? 'ok') === 'ok' &&
      (mirror === 'ok' || mirror === 'off');
    if (!ready) void reply.status(503);
    return {
      status: ready ? 'ready' : 'not_ready',
      checks: {
        store,
        ...(projector === undefined ? {} : { projector }),
        ...(clientSurface === undefined ? {} : { clientSurface }),
        mirror,
      },
      ...(this.projections ? { projectorPosition: this.projections.position() } : {}),
      ...(this.mirror ? { mirrorPosition: this.mirror.position() } : {}),
    };
  }

  @Get('metrics')
  @Public()
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  render() {
    return this.metrics.render();
  }
}
