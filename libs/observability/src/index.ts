export * from './metrics';
export * from './observability.module';
