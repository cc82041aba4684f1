/**
 * The standalone mirror's answers to errors: the api's JSON error shape, counted as the api
 * counts its refusals; anything not anticipated is a logged 500, never hidden.
 */
import { ArgumentsHost, Catch, Logger, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Metrics } from '@runledger/observability';
import { answerRefusal, toApiError } from '../../api/src/http/error.filter';

@Catch()
export class MirrorErrorFilter implements ExceptionFilter {
  private readonly logger = new Logger('http');

  constructor(private readonly metrics: Metrics) {}

  catch(error: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const reply = http.getResponse<FastifyReply>();
    const request = http.getRequest<FastifyRequest>();
    const apiError = toApiError(error);
    if (apiError) {
      answerRefusal(request, reply, apiError, this.metrics);
      return;
    }
    this.logger.error({
      msg: 'unexpected error',
      method: request.method,
      url: request.url,
      error: error instanceof Error ? error.stack : String(error),
    });
    void reply
      .status(500)
      .send({ error: 'internal', message: 'an unexpected error occurred; it was logged' });
  }
}
