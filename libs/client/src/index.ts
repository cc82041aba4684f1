/** @runledger/client: a typed client for runledger's HTTP API, and a decoder for its Kafka topic. */
export * from './client';
export * from './errors';
export * from './run-event';
export type { components, paths } from './openapi';
