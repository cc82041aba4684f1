/** @runledger/client: a typed client for runledger's HTTP API. */
export * from './client';
export * from './errors';
export type { components, paths } from './openapi';
