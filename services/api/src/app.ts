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
import { AccessPolicy } from './auth/access.guard';
import { authenticateRequests } from './auth/authenticate.hook';
import type { ApiKey, AppConfig } from './config/config';
import { answerClientError, guardRequestBodies } from './http/request-guards';

/** Where SwaggerModule serves the OpenAPI document and its UI: public, like the probes. */
const DOCS_PATH = 'docs';

export async function createApp(
  config: AppConfig,
  keys: readonly ApiKey[],
  logger: LoggerService | false = false,
): Promise<NestFastifyApplication> {
  const adapter = new FastifyAdapter({
    // Each route's own limit is set by its scope (guardRequestBodies); this is the ceiling.
    bodyLimit: config.bodyMaxBytes,
    // A JSON key like __proto__ or constructor.prototype is refused, never merged.
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // Path ids may be 128 characters (PATH_ID_PATTERN); Fastify's default cap is 100.
    routerOptions: { maxParamLength: 256 },
    clientErrorHandler: answerClientError,
    // A client that trickles its request, or idles on a kept-alive socket, is disconnected.
    requestTimeout: config.http.requestTimeoutMs,
    keepAliveTimeout: config.http.keepAliveTimeoutMs,
    http: {
      headersTimeout: config.http.headersTimeoutMs,
      // node:http checks those timeouts every 30 s by default: a trickle would outlive them.
      connectionsCheckingInterval: Math.min(1000, config.http.headersTimeoutMs),
    },
  });
  const app = await NestFactory.create<NestFastifyApplication>(
    AppModule.create(config, keys),
    adapter,
    {
      logger,
      bufferLogs: false,
      // The JSON parser is ours (guardRequestBodies): streamed, measured, shape-checked.
      bodyParser: false,
    },
  );
  const fastify = app.getHttpAdapter().getInstance();
  const metrics = app.get(Metrics);
  fastify.addHook('onRoute', (route) => {
    if (route.url.startsWith(`/${DOCS_PATH}`)) {
      route.config = { ...route.config, access: { public: true } };
    }
  });
  authenticateRequests(fastify, app.get(AccessPolicy), metrics);
  guardRequestBodies(fastify, config);
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
      .addBearerAuth()
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
