export * from './event-store.port';
export * from './event-store.module';
export * from './open-event-store';
export * from './sqlite.event-store';
export * from './esdb.event-store';
export * from './checkpoints';
export * from './checkpointed-processor';
export * from './position-gate';
