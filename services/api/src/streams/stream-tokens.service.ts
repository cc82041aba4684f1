/**
 * Stream tokens for browsers: `EventSource` cannot send an Authorization header, so a key
 * holder mints a short-lived token for one run's or one thread's stream of its tenant, and
 * the browser opens that stream with `?token=`. Signed with the server secret receipts use
 * (RECEIPT_SECRET, or the one kept in DATA_DIR), through a key derived for this purpose.
 */
import { Inject, Injectable } from '@nestjs/common';
import { signStreamToken, verifyStreamToken, type StreamTokenClaims } from '@runledger/domain';
import { provisionSecretFile } from '../auth/api-keys';
import type { Actor, Principal } from '../auth/principal';
import { RECEIPT_SECRET_FILE } from '../commands/commands.service';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';
import { RunLogService } from '../runs/run-log.service';
import { ThreadsService } from '../threads/threads.service';

export interface MintedStreamToken {
  token: string;
  kind: 'run' | 'thread';
  id: string;
  expiresAt: string;
  /** The stream to open with it, relative to the API's base URL. */
  streamUrl: string;
}

@Injectable()
export class StreamTokens {
  private readonly secret: string;

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly runLog: RunLogService,
    private readonly threads: ThreadsService,
  ) {
    this.secret =
      config.receiptSecret ?? provisionSecretFile(config.dataDir, RECEIPT_SECRET_FILE).value;
  }

  /**
   * A token for the run or thread `body` names, once the caller's tenant is known to own it.
   * It carries who minted it (`actor`, through `principal`'s key), whom the stream then counts as.
   */
  async mint(principal: Principal, actor: Actor, body: unknown): Promise<MintedStreamToken> {
    const { kind, id } = target(body);
    if (kind === 'run') await this.runLog.requireRun(principal.tenantId, id);
    else await this.threads.require(principal.tenantId, id);
    const exp = Math.floor(Date.now() / 1000) + this.config.streamTokenTtlSeconds;
    const token = signStreamToken(
      {
        tenant: principal.tenantId,
        key: principal.keyId,
        ...(actor.kind === 'user' ? { user: actor.name } : {}),
        kind,
        id,
        exp,
      },
      this.secret,
    );
    const path = kind === 'run' ? `/v1/runs/${id}/stream` : `/v1/threads/${id}/stream`;
    return {
      token,
      kind,
      id,
      expiresAt: new Date(exp * 1000).toISOString(),
      streamUrl: `${path}?token=${encodeURIComponent(token)}`,
    };
  }

  /**
   * The principal a `?token=` stands for on the stream of `kind` `id`: read access to that
   * stream alone, as the key (and user) that minted it. A bad, expired or other stream's token
   * is a 401 naming which.
   */
  principalFor(token: string, kind: 'run' | 'thread', id: string): Principal {
    const check = verifyStreamToken(token, this.secret, Math.floor(Date.now() / 1000));
    if (!check.ok) {
      throw new ApiError(401, 'unauthorized', `the stream token is refused: ${check.reason}`);
    }
    const claims: StreamTokenClaims = check.claims;
    if (claims.kind !== kind || claims.id !== id) {
      throw new ApiError(
        401,
        'unauthorized',
        `the stream token opens the ${claims.kind} ${claims.id}'s stream, not this one`,
      );
    }
    return {
      tenantId: claims.tenant,
      scopes: new Set(['read']),
      // A token minted before tokens named their key (an upgrade ago, within its lifetime).
      keyId: claims.key ?? 'stream-token',
      ...(claims.user === undefined ? {} : { user: claims.user }),
    };
  }
}

function target(body: unknown): { kind: 'run' | 'thread'; id: string } {
  const rule = 'the body must be { "runId": "<id>" } or { "threadId": "<id>" }, exactly one';
  const fields =
    body !== null && typeof body === 'object' && !Array.isArray(body)
      ? (body as Record<string, unknown>)
      : {};
  const keys = Object.keys(fields);
  const [key] = keys;
  const value = fields[key];
  if (keys.length !== 1 || (key !== 'runId' && key !== 'threadId') || typeof value !== 'string') {
    throw new ApiError(400, 'validation_failed', rule, [
      { field: keys.length === 1 ? key : 'body', rule: 'streamTarget', message: rule },
    ]);
  }
  return { kind: key === 'runId' ? 'run' : 'thread', id: value };
}
