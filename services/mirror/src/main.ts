/**
 * Starts the mirror alone (`npm run start:mirror`): log → Kafka, with its probes, metrics
 * and parked-event routes on MIRROR_PORT. Same configuration as the api; KAFKA_BROKERS is
 * required here. Use it when the api runs without KAFKA_BROKERS (replicas of the api, one
 * mirror), so that exactly one process publishes.
 */
import type { AddressInfo } from 'node:net';
import { NestFactory } from '@nestjs/core';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { provisionDevKey } from '../../api/src/auth/api-keys';
import { exitOnSetting, jsonLogger, loadConfigOrExit } from '../../api/src/config/process-config';
import { guardHttp, httpAdapter, OWN_BODY_PARSER } from '../../api/src/http/http-server';
import { mirrorSettingsOf } from '../../api/src/mirror/mirror.imports';
import { MirrorAppModule } from './mirror-app.module';

async function main(): Promise<void> {
  const config = loadConfigOrExit('runledger-mirror');
  const settings = mirrorSettingsOf(config);
  if (!settings) {
    console.error(
      'runledger-mirror: KAFKA_BROKERS is unset: set it to the brokers to publish to (host:port,host:port)',
    );
    process.exit(1);
  }
  const logger = jsonLogger('runledger-mirror', config);
  const keys = config.apiKeys ?? [provisionDevKey(config.dataDir).key];
  const app = await NestFactory.create<NestFastifyApplication>(
    MirrorAppModule.create(config, settings, keys),
    httpAdapter(config),
    { logger, ...OWN_BODY_PARSER },
  );
  guardHttp(app, config);
  app.enableShutdownHooks();
  try {
    await app.listen(config.mirror.port, config.host);
  } catch (error) {
    exitOnSetting(
      'runledger-mirror',
      `HOST=${config.host} MIRROR_PORT=${config.mirror.port}`,
      error,
    );
  }
  const { port } = app.getHttpServer().address() as AddressInfo;
  console.log(
    `runledger-mirror publishing to ${settings.brokers.join(',')} topic ${settings.topic} (${settings.format}), notifications to topic ${config.mirror.notificationsTopic}; probes, metrics and /v1/admin/mirror on http://${config.host}:${port}`,
  );
}

main().catch((error: unknown) => {
  console.error('runledger-mirror failed to start:', error);
  process.exit(1);
});
