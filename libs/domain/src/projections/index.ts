export * from './message-text';
export * from './thread-fold';
export * from './thread-rows';
export * from './thread-state';
export * from './voice-seed';
export * from './voice-tool-result';
