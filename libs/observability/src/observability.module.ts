/**
 * Provides the one Metrics instance to every module of an app (global), so feature modules
 * of their own (the mirror's) count into the same registry the app's /metrics renders.
 */
import { Global, Module } from '@nestjs/common';
import { Metrics } from './metrics';

@Global()
@Module({ providers: [Metrics], exports: [Metrics] })
export class ObservabilityModule {}
