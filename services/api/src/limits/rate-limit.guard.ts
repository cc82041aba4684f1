/**
 * Spends the caller's budgets on the routes marked @RateLimited (the client surface);
 * refuses with 429 and Retry-After when a budget is spent. Runs after the AccessGuard
 * (registered after it), so a call refused 401/403 spends nothing. Budgets are keyed on the
 * tenant and the acting user the AccessGuard resolved (a key's own user, or the one a
 * trusted gateway names), not on a session, so a new session does not arrive with a fresh
 * budget; a key acting as itself spends the service budgets (RATE_LIMIT_SERVICE_*).
 */
import {
  Inject,
  Injectable,
  type CanActivate,
  type ExecutionContext,
  type Provider,
} from '@nestjs/common';
import { APP_GUARD, Reflector } from '@nestjs/core';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Actor } from '../auth/principal';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';
import { RATE_LIMIT_KEY, type RateLimitRule } from './rate-limit.decorators';
import { SlidingWindowLimiter } from './rate-limits';

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Gives back what the rate limit counted for this call: for a limit checked later that
     * refuses it (the stream caps), so that only calls that are done count.
     */
    refundRateLimit?: () => void;
  }
}

/** The limiter's clock: monotonic milliseconds. A provider so tests can move time. */
@Injectable()
export class RateLimitClock {
  now(): number {
    return performance.now();
  }
}

/** Who spends the budget: the tenant and the acting user (a name, or `key:<key id>`). */
export function budgetKey(tenantId: string, actor: Actor): string {
  return JSON.stringify([tenantId, actor.name]);
}

/** One limiter per kind of caller: users and keys acting as themselves have budgets of their own. */
export class RateLimiters {
  constructor(
    readonly user: SlidingWindowLimiter,
    readonly service: SlidingWindowLimiter,
  ) {}
}

@Injectable()
export class RateLimitGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly limiters: RateLimiters,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {}

  canActivate(context: ExecutionContext): boolean {
    const rule = this.reflector.getAllAndOverride<RateLimitRule | undefined>(RATE_LIMIT_KEY, [
      context.getHandler(),
      context.getClass(),
    ]);
    if (rule === undefined) return true;
    const request = context.switchToHttp().getRequest<FastifyRequest>();
    const cost = typeof rule === 'function' ? rule(request) : rule;
    if (cost === null) return true;
    const { principal, actor } = request;
    if (!principal || !actor)
      throw new Error('a rate-limited route must require a scope (AccessGuard)');

    const limiter = this.limiters[actor.kind];
    const user = budgetKey(principal.tenantId, actor);
    const decision = limiter.take(user, cost);
    if (decision.allowed) {
      request.refundRateLimit = () => limiter.refund(user, cost, decision.at);
      return true;
    }
    const retryAfterSeconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
    context.switchToHttp().getResponse<FastifyReply>().header('Retry-After', retryAfterSeconds);
    const window = `${this.config.rateLimit.windowMs / 1000} s`;
    const what =
      decision.budget === 'costly'
        ? `${decision.limit} costly calls (steer, resolve, answer, prompt, a user's turn.started)`
        : `${decision.limit} calls`;
    throw new ApiError(
      429,
      'rate_limited',
      `rate limit reached: ${what} per ${window} for this user; nothing was done, retry in ${retryAfterSeconds} s`,
      { limit: decision.budget, retryAfterSeconds },
    );
  }
}

/** The limiter and the guard, in this order after the AccessGuard in AppModule's providers. */
export const RATE_LIMIT_PROVIDERS: Provider[] = [
  RateLimitClock,
  {
    provide: RateLimiters,
    inject: [APP_CONFIG, RateLimitClock],
    useFactory: ({ rateLimit }: AppConfig, clock: RateLimitClock) =>
      new RateLimiters(
        new SlidingWindowLimiter(rateLimit, () => clock.now()),
        new SlidingWindowLimiter({ windowMs: rateLimit.windowMs, ...rateLimit.service }, () =>
          clock.now(),
        ),
      ),
  },
  { provide: APP_GUARD, useClass: RateLimitGuard },
];
