import { Controller, Get, Header, HttpCode, Inject, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { EVENT_STORE, type EventStore } from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import { Public } from '../auth/access.decorators';

/** Probes and the metrics scrape: public by design, they reveal no tenant's data. */
@ApiExcludeController()
@Controller()
export class HealthController {
  constructor(
    @Inject(EVENT_STORE) private readonly store: EventStore,
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
    try {
      await this.store.ping();
      return { status: 'ready', checks: { store: 'ok' } };
    } catch (error) {
      void reply.status(503);
      return { status: 'not_ready', checks: { store: `unreachable: ${String(error)}` } };
    }
  }

  @Get('metrics')
  @Public()
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  render() {
    return this.metrics.render();
  }
}
