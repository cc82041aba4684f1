/**
 * The standalone mirror's answers to errors: the api's JSON error shape; anything not
 * anticipated is a logged 500, never hidden.
 */
import { ArgumentsHost, Catch, Logger, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { toApiError } from '../../api/src/http/error.filter';

@Catch()
export class MirrorErrorFilter implements ExceptionFilter {
  private readonly logger = new Logger('http');

  catch(error: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const reply = http.getResponse<FastifyReply>();
    const apiError = toApiError(error);
    if (apiError) {
      void reply.status(apiError.status).send(apiError.body());
      return;
    }
    const request = http.getRequest<FastifyRequest>();
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
