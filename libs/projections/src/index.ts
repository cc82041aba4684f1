export * from './projector';
export * from './read-model.store';
