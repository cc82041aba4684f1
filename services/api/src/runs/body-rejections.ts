/**
 * A request body over BODY_MAX_BYTES is refused before it is read (Fastify checks the
 * declared Content-Length first). When it was an append the caller may make, the run's
 * log still records that the attempt happened (docs/api.md, "Size gating").
 */
import { Inject, Injectable, Logger } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { Metrics } from '@runledger/observability';
import { AccessPolicy } from '../auth/access.guard';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';
import { RunLogService } from './run-log.service';

const APPEND_ROUTE = '/v1/runs/:runId/events';

@Injectable()
export class BodyRejections {
  private readonly logger = new Logger('size-gate');

  constructor(
    private readonly policy: AccessPolicy,
    private readonly runLog: RunLogService,
    private readonly metrics: Metrics,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {}

  async record(request: FastifyRequest): Promise<void> {
    const limitBytes = this.config.bodyMaxBytes;
    // A chunked body declares nothing: what was received when it was cut off is the lower bound.
    const declared = Number(request.headers['content-length']);
    const declaredBytes =
      Number.isSafeInteger(declared) && declared > limitBytes ? declared : limitBytes + 1;
    const runId = (request.params as { runId?: unknown } | undefined)?.runId;
    let marker = 'not_an_append';
    let tenantId: string | undefined;
    if (
      request.method === 'POST' &&
      request.routeOptions.url === APPEND_ROUTE &&
      typeof runId === 'string'
    ) {
      try {
        tenantId = this.policy.principalFor(request, 'append').tenantId;
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        marker = 'not_authorized';
      }
      if (tenantId !== undefined) {
        const recorded = await this.runLog.recordBodyRejected(tenantId, runId, declaredBytes);
        marker = recorded ? 'recorded' : 'no_such_run';
      }
    }
    this.metrics.bodyRejections.inc({ marker });
    this.logger.warn({
      msg: 'request body over BODY_MAX_BYTES refused unread',
      method: request.method,
      url: request.url,
      runId,
      tenantId,
      declaredBytes,
      limitBytes,
      marker,
    });
  }
}
