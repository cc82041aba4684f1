export * from './canonical-json';
export * from './event-catalogue';
export * from './event-data.dto';
export * from './event-types';
export * from './hash-chain';
export * from './run-rules';
export * from './size-gate';
export * from './projections';
