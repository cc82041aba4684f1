/**
 * Whether this api process runs the Kafka mirror: with KAFKA_BROKERS set it imports
 * MirrorModule (the embedded default runs everything in one process); without, it imports
 * nothing and start-up says that Kafka publishing is off.
 */
import type { DynamicModule } from '@nestjs/common';
import { MirrorModule, type MirrorSettings } from '@runledger/mirror';
import type { AppConfig } from '../config/config';

/** The mirror's settings from the configuration; null when KAFKA_BROKERS is unset. */
export function mirrorSettingsOf(config: AppConfig): MirrorSettings | null {
  const { brokers, ...mirror } = config.mirror;
  if (!brokers || brokers.length === 0) return null;
  return {
    dataDir: config.dataDir,
    brokers,
    topic: mirror.topic,
    partitions: mirror.partitions,
    format: mirror.format,
    stallMs: mirror.stallMs,
    readyMaxLagMs: config.readyMaxLagMs,
    retryMaxMs: mirror.retryMaxMs,
    watchdogMs: mirror.watchdogMs,
    eventMaxBytes: config.eventMaxBytes,
  };
}

export function mirrorImports(config: AppConfig): DynamicModule[] {
  const settings = mirrorSettingsOf(config);
  return settings ? [MirrorModule.forRoot(settings)] : [];
}

/** The start-up line about the mirror. */
export function mirrorStatusLine(config: AppConfig): string {
  const settings = mirrorSettingsOf(config);
  return settings
    ? `mirror: publishing every run event to Kafka ${settings.brokers.join(',')} topic ${settings.topic} (${settings.format}), notifications to topic ${config.mirror.notificationsTopic}`
    : 'mirror: Kafka publishing is off (set KAFKA_BROKERS to publish every run event to Kafka)';
}
