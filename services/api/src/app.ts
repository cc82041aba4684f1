/**
 * Builds the Fastify-based Nest application, ready to listen. Tests use it directly
 * (supertest against the real app); main.ts adds the process concerns.
 */
import { type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { AppModule } from './app.module';
import { API_KEY_SCHEME, STREAM_TOKEN_SCHEME } from './openapi/api-route.decorator';
import type { ApiKey, AppConfig } from './config/config';
import { guardHttp, httpAdapter, OWN_BODY_PARSER } from './http/http-server';

/** Where SwaggerModule serves the OpenAPI document and its UI: public, like the probes. */
const DOCS_PATH = 'docs';

export async function createApp(
  config: AppConfig,
  keys: readonly ApiKey[],
  logger: LoggerService | false = false,
): Promise<NestFastifyApplication> {
  const app = await NestFactory.create<NestFastifyApplication>(
    AppModule.create(config, keys),
    httpAdapter(config),
    { logger, bufferLogs: false, ...OWN_BODY_PARSER },
  );
  if (config.corsOrigins) {
    // Browsers on the listed origins may call the API; EventSource streams use ?token=, so
    // no credentials (cookies) are ever needed or allowed.
    app.enableCors({
      origin: config.corsOrigins,
      methods: ['GET', 'POST'],
      allowedHeaders: ['Authorization', 'Content-Type', 'Last-Event-ID', 'X-Runledger-User'],
      exposedHeaders: ['Retry-After', 'X-Request-Id'],
      credentials: false,
      maxAge: 600,
    });
  }
  const fastify = app.getHttpAdapter().getInstance();
  fastify.addHook('onRoute', (route) => {
    if (route.url.startsWith(`/${DOCS_PATH}`)) {
      route.config = { ...route.config, access: { public: true } };
    }
  });
  guardHttp(app, config);
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
      .addGlobalParameters({
        in: 'header',
        name: 'X-Runledger-User',
        required: false,
        schema: { type: 'string', maxLength: 1024 },
        description:
          'The acting user, percent-encoded UTF-8 (`%C5%81ukasz`); RFC 8187 `X-Runledger-User*: ' +
          "UTF-8''%C5%81ukasz` is accepted instead. Only a gateway key with the `act-as` scope may " +
          "send it (any other key: 403); without it a call acts as the key's own user, or as the key.",
      })
      .build(),
  );
  SwaggerModule.setup(DOCS_PATH, app, document);
  await app.init();
  await fastify.ready();
  return app;
}
