export * from './projector';
export * from './read-model.port';
export * from './read-model.store';
export * from './projector-thread';
