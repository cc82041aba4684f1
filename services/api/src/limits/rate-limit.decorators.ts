import { SetMetadata } from '@nestjs/common';
import { isPlainObject } from '@runledger/domain';
import type { FastifyRequest } from 'fastify';
import type { CallCost } from './rate-limits';

export const RATE_LIMIT_KEY = 'runledger:rate-limit';

/**
 * What a call to a route spends from its user's budgets: a call, a costly call, or what the
 * request says (null: not counted). Routes without it are not limited.
 */
export type RateLimitRule = CallCost | ((request: FastifyRequest) => CallCost | null);

/** Counts calls to the route (or every route of the controller) against the caller's budgets. */
export const RateLimited = (rule: RateLimitRule) => SetMetadata(RATE_LIMIT_KEY, rule);

/**
 * The append route is the agent runtime's firehose and is not limited, except a batch that
 * starts a run: that starts work, so it is costly.
 */
export const costlyIfRunStarted = (request: FastifyRequest): CallCost | null => {
  const body: unknown = request.body;
  if (!isPlainObject(body) || !Array.isArray(body.events)) return null;
  return body.events.some((event) => isPlainObject(event) && event.type === 'run.started')
    ? 'costly'
    : null;
};
