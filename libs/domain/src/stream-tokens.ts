/**
 * Short-lived stream tokens: a browser's `EventSource` cannot send an Authorization header,
 * so a key holder asks for a token scoped to one run or one thread of its tenant and the
 * browser passes it as `?token=` on that stream only. Format: base64url(JSON claims) "."
 * base64url(HMAC-SHA256(key, first part)), the key derived from the server secret for this
 * purpose alone, so a stream token is never a receipt and a receipt never a stream token.
 */
import { createHmac } from 'node:crypto';
import { openToken, signToken, type SignedTokenCheck } from './signed-token';

export interface StreamTokenClaims {
  tenant: string;
  /**
   * Who minted it: the key's id, and the acting user when it was one. The stream is opened as
   * them, so it spends their rate budget and holds a slot of their key, as with the key itself.
   * Absent from a token minted before tokens named them, which still opens until it expires.
   */
  key?: string;
  user?: string;
  /** What the token opens: one run's stream, or one thread's. */
  kind: 'run' | 'thread';
  id: string;
  /** Expiry, seconds since the epoch. */
  exp: number;
}

export type StreamTokenCheck = SignedTokenCheck<StreamTokenClaims>;

function tokenKey(secret: string): Buffer {
  return createHmac('sha256', secret).update('runledger stream token v1').digest();
}

export function signStreamToken(claims: StreamTokenClaims, secret: string): string {
  return signToken(claims, tokenKey(secret));
}

/** Checks the signature first (nothing unsigned is parsed), then the expiry against `nowSeconds`. */
export function verifyStreamToken(
  token: unknown,
  secret: string,
  nowSeconds: number,
): StreamTokenCheck {
  return openToken<StreamTokenClaims>(
    token,
    tokenKey(secret),
    nowSeconds,
    (claims) =>
      typeof claims.tenant === 'string' &&
      (claims.key === undefined || typeof claims.key === 'string') &&
      (claims.user === undefined || typeof claims.user === 'string') &&
      (claims.kind === 'run' || claims.kind === 'thread') &&
      typeof claims.id === 'string',
  );
}
