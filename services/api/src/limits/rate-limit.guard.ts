/**
 * Spends the caller's budgets on the routes marked @RateLimited; refuses with 429 and
 * Retry-After when a budget is spent. Runs after the AccessGuard (registered after it), so a
 * call refused 401/403 spends nothing. A user is the tenant plus X-Runledger-User, or, without
 * that header, the tenant plus the API key: keyed on who calls, not on a session, so a new
 * session does not arrive with a fresh budget.
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
import { actingUser, USER_HEADER } from '../auth/acting-user';
import type { Principal } from '../auth/principal';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';
import { RATE_LIMIT_KEY, type RateLimitRule } from './rate-limit.decorators';
import { SlidingWindowLimiter } from './rate-limits';

/** The limiter's clock: monotonic milliseconds. A provider so tests can move time. */
@Injectable()
export class RateLimitClock {
  now(): number {
    return performance.now();
  }
}

/** Who spends the budget: the tenant and the acting user (`u:<name>` or `k:<key id>`). */
export function budgetKey(principal: Principal, header: string | string[] | undefined): string {
  return `${principal.tenantId}:${actingUser(principal, header)}`;
}

@Injectable()
export class RateLimitGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly limiter: SlidingWindowLimiter,
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
    const principal = request.principal;
    if (!principal) throw new Error('a rate-limited route must require a scope (AccessGuard)');

    const decision = this.limiter.take(budgetKey(principal, request.headers[USER_HEADER]), cost);
    if (decision.allowed) return true;
    const retryAfterSeconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
    context.switchToHttp().getResponse<FastifyReply>().header('Retry-After', retryAfterSeconds);
    const window = `${this.config.rateLimit.windowMs / 1000} s`;
    const what =
      decision.budget === 'costly'
        ? `${decision.limit} costly calls (steer, stop, resolve, answer, consume, run.started)`
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
    provide: SlidingWindowLimiter,
    inject: [APP_CONFIG, RateLimitClock],
    useFactory: (config: AppConfig, clock: RateLimitClock) =>
      new SlidingWindowLimiter(config.rateLimit, () => clock.now()),
  },
  { provide: APP_GUARD, useClass: RateLimitGuard },
];
