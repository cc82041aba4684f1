import { Controller, Get, Header, HttpCode, Inject, Optional, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { MirrorService } from '@runledger/mirror';
import { Metrics } from '@runledger/observability';
import { Public } from '../auth/access.decorators';
import { ProjectionsService } from '../threads/projections.service';

/** Probes and the metrics scrape: public by design, they reveal no tenant's data. */
@ApiExcludeController()
@Controller()
export class HealthController {
  constructor(
    @Inject(EVENT_STORE) private readonly store: EventStore,
    private readonly projections: ProjectionsService,
    private readonly metrics: Metrics,
    /** Present when this process runs the Kafka mirror. */
    @Optional() private readonly mirror?: MirrorService,
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
    const projector = this.projections.problem() ?? 'ok';
    const mirror = this.mirror ? (this.mirror.problem() ?? 'ok') : 'off';
    const ready = store === 'ok' && projector === 'ok' && (mirror === 'ok' || mirror === 'off');
    if (!ready) void reply.status(503);
    return {
      status: ready ? 'ready' : 'not_ready',
      checks: { store, projector, mirror },
      projectorPosition: this.projections.position(),
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
