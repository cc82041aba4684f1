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
 * The append route is the agent runtime's own log and is not limited (its run.started
 * included). A batch a user starts a turn with, through a gateway or with a user's key, is
 * the client surface starting real work: costly.
 */
export const costlyIfUserStartsTurn = (request: FastifyRequest): CallCost | null => {
  const body: unknown = request.body;
  if (request.actor?.kind !== 'user') return null;
  if (!isPlainObject(body) || !Array.isArray(body.events)) return null;
  return body.events.some((event) => isPlainObject(event) && event.type === 'turn.started')
    ? 'costly'
    : null;
};
