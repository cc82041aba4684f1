/**
 * Builds the Fastify-based Nest application, ready to listen. Tests use it directly
 * (supertest against the real app); main.ts adds the process concerns.
 */
import { type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { Metrics } from '@runledger/observability';
import { AppModule } from './app.module';
import { API_KEY_SCHEME, STREAM_TOKEN_SCHEME } from './openapi/api-route.decorator';
import type { ApiKey, AppConfig } from './config/config';

export async function createApp(
  config: AppConfig,
  keys: readonly ApiKey[],
  logger: LoggerService | false = false,
): Promise<NestFastifyApplication> {
  const adapter = new FastifyAdapter({
    bodyLimit: config.bodyMaxBytes,
    // A JSON key like __proto__ or constructor.prototype is refused, never merged.
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // Path ids may be 128 characters (PATH_ID_PATTERN); Fastify's default cap is 100.
    routerOptions: { maxParamLength: 256 },
  });
  const app = await NestFactory.create<NestFastifyApplication>(
    AppModule.create(config, keys),
    adapter,
    {
      logger,
      bufferLogs: false,
    },
  );
  if (config.corsOrigins) {
    // Browsers on the listed origins may call the API; EventSource streams use ?token=, so
    // no credentials (cookies) are ever needed or allowed.
    app.enableCors({
      origin: config.corsOrigins,
      methods: ['GET', 'POST'],
      allowedHeaders: ['Authorization', 'Content-Type', 'Last-Event-ID', 'X-Runledger-User'],
      exposedHeaders: ['Retry-After'],
      credentials: false,
      maxAge: 600,
    });
  }
  const fastify = app.getHttpAdapter().getInstance();
  const metrics = app.get(Metrics);
  fastify.addHook('onResponse', (request, reply, done) => {
    metrics.httpDuration.observe(
      {
        method: request.method,
        route: request.routeOptions.url ?? 'unmatched',
        status: String(reply.statusCode),
      },
      reply.elapsedTime / 1000,
    );
    done();
  });
  const document = SwaggerModule.createDocument(
    app,
    new DocumentBuilder()
      .setTitle('runledger')
      .setDescription(
        'The durable, auditable record of AI agent runs. Authenticate with `Authorization: Bearer <key>`.',
      )
      .setVersion('1')
      .addBearerAuth(
        {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'opaque',
          description: 'An opaque API key from RUNLEDGER_API_KEYS: `Authorization: Bearer <key>`',
        },
        API_KEY_SCHEME,
      )
      .addApiKey(
        {
          type: 'apiKey',
          in: 'query',
          name: 'token',
          description: 'A stream token from POST /v1/stream-tokens, on that stream only',
        },
        STREAM_TOKEN_SCHEME,
      )
      .build(),
  );
  SwaggerModule.setup('docs', app, document);
  await app.init();
  await fastify.ready();
  return app;
}
