/**
 * The one place that decides access, for every route: bearer key → tenant and scopes,
 * checked against the scope the route declares, and the acting user (only an `act-as` key
 * may name one). Which key is calling is settled before the body is read
 * (auth/authenticate.hook.ts); which scope a route needs is decided here. Tenant ownership
 * of a run or thread is decided where the run is read, and answered 404 so a foreign id
 * reveals nothing.
 */
import { Injectable, Optional, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { FastifyRequest } from 'fastify';
import type { Scope } from '../config/config';
import { ApiError } from '../http/api-error';
import { StreamTokens } from '../streams/stream-tokens.service';
import { ACCESS_KEY, STREAM_TOKEN_KEY, type Access } from './access.decorators';
import { actorOf } from './acting-user';
import { ApiKeyTable } from './api-keys';
import type { Principal } from './principal';

@Injectable()
export class AccessPolicy {
  constructor(private readonly keys: ApiKeyTable) {}

  /** Who sends `request`, from its bearer key; otherwise the 401 to answer. Reads no body. */
  identify(request: FastifyRequest): Principal {
    // Sent twice, node keeps the first and drops the rest, and a proxy may have read another:
    // which key was meant is not guessed.
    if ((request.raw.headersDistinct.authorization?.length ?? 0) > 1) {
      throw new ApiError(401, 'unauthorized', 'send one Authorization header, not several');
    }
    const header = request.headers.authorization;
    const match = typeof header === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    if (!match) throw new ApiError(401, 'unauthorized', 'send Authorization: Bearer <api key>');
    const principal = this.keys.resolve(match[1]);
    if (!principal) throw new ApiError(401, 'unauthorized', 'the API key is not recognised');
    return principal;
  }

  /**
   * The caller of `request` if its key holds `scope`; otherwise the 401/403 to answer. The
   * key was resolved before the body was read (auth/authenticate.hook.ts); a request that
   * did not pass through that hook is identified here.
   */
  principalFor(request: FastifyRequest, scope: Scope): Principal {
    const principal = request.principal ?? this.identify(request);
    if (!principal.scopes.has(scope)) {
      throw new ApiError(403, 'forbidden', `this API key lacks the ${scope} scope`);
    }
    return principal;
  }
}

@Injectable()
export class AccessGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly policy: AccessPolicy,
    /** In the api, which serves streams; the standalone mirror serves none. */
    @Optional() private readonly streamTokens?: StreamTokens,
  ) {}

  canActivate(context: ExecutionContext): boolean {
    const access = this.reflector.getAllAndOverride<Access | undefined>(ACCESS_KEY, [
      context.getHandler(),
      context.getClass(),
    ]);
    if (access === undefined)
      throw new ApiError(403, 'forbidden', 'this route declares no access rule');
    if ('public' in access) return true;
    const request = context.switchToHttp().getRequest<FastifyRequest>();
    const principal =
      this.streamTokenPrincipal(context, request) ??
      this.policy.principalFor(request, access.scope);
    request.principal = principal;
    // Settled before the body by the authenticate hook, but for a stream token's caller.
    request.actor ??= actorOf(principal, request.raw.headersDistinct);
    return true;
  }

  /** A browser's `?token=` on a stream that accepts one, when no Authorization is sent. */
  private streamTokenPrincipal(context: ExecutionContext, request: FastifyRequest) {
    const accepts = this.reflector.get<{ kind: 'run' | 'thread'; param: string } | undefined>(
      STREAM_TOKEN_KEY,
      context.getHandler(),
    );
    const token = (request.query as Record<string, unknown> | undefined)?.token;
    if (!accepts || !this.streamTokens || request.headers.authorization !== undefined) {
      return undefined;
    }
    if (typeof token !== 'string') return undefined;
    const id = (request.params as Record<string, string>)[accepts.param];
    return this.streamTokens.principalFor(token, accepts.kind, id);
  }
}
