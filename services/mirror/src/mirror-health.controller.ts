/** The standalone mirror's probes and metrics scrape: public, they carry no tenant's data. */
import { Controller, Get, Header, HttpCode, Inject, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { MirrorService } from '@runledger/mirror';
import { Metrics } from '@runledger/observability';
import { Public } from '../../api/src/auth/access.decorators';

@Controller()
export class MirrorHealthController {
  constructor(
    @Inject(EVENT_STORE) private readonly store: EventStore,
    private readonly mirror: MirrorService,
    private readonly metrics: Metrics,
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
    const mirror = this.mirror.problem() ?? 'ok';
    const ready = store === 'ok' && mirror === 'ok';
    if (!ready) void reply.status(503);
    return {
      status: ready ? 'ready' : 'not_ready',
      checks: { store, mirror },
      mirrorPosition: this.mirror.position(),
    };
  }

  @Get('metrics')
  @Public()
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  render() {
    return this.metrics.render();
  }
}
