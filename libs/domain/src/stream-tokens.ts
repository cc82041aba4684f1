/**
 * Short-lived stream tokens: a browser's `EventSource` cannot send an Authorization header,
 * so a key holder asks for a token scoped to one run or one thread of its tenant and the
 * browser passes it as `?token=` on that stream only. Format: base64url(JSON claims) "."
 * base64url(HMAC-SHA256(key, first part)), the key derived from the server secret for this
 * purpose alone, so a stream token is never a receipt and a receipt never a stream token.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { canonicalJson } from './canonical-json';
import { isPlainObject } from './event-catalogue';

export interface StreamTokenClaims {
  tenant: string;
  /** What the token opens: one run's stream, or one thread's. */
  kind: 'run' | 'thread';
  id: string;
  /** Expiry, seconds since the epoch. */
  exp: number;
}

export type StreamTokenCheck =
  | { ok: true; claims: StreamTokenClaims }
  | { ok: false; reason: 'malformed' | 'signature' | 'expired' };

function tokenKey(secret: string): Buffer {
  return createHmac('sha256', secret).update('runledger stream token v1').digest();
}

function mac(secret: string, body: string): Buffer {
  return createHmac('sha256', tokenKey(secret)).update(body).digest();
}

export function signStreamToken(claims: StreamTokenClaims, secret: string): string {
  const body = Buffer.from(canonicalJson(claims)).toString('base64url');
  return `${body}.${mac(secret, body).toString('base64url')}`;
}

/** Checks the signature first (nothing unsigned is parsed), then the expiry against `nowSeconds`. */
export function verifyStreamToken(
  token: unknown,
  secret: string,
  nowSeconds: number,
): StreamTokenCheck {
  if (typeof token !== 'string') return { ok: false, reason: 'malformed' };
  const parts = token.split('.');
  if (parts.length !== 2 || parts[0] === '' || parts[1] === '') {
    return { ok: false, reason: 'malformed' };
  }
  const [body, signature] = parts;
  const expected = mac(secret, body);
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return { ok: false, reason: 'signature' };
  }
  let claims: unknown;
  try {
    claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
  } catch {
    return { ok: false, reason: 'malformed' };
  }
  if (
    !isPlainObject(claims) ||
    typeof claims.tenant !== 'string' ||
    (claims.kind !== 'run' && claims.kind !== 'thread') ||
    typeof claims.id !== 'string' ||
    typeof claims.exp !== 'number'
  ) {
    return { ok: false, reason: 'malformed' };
  }
  const typed = claims as unknown as StreamTokenClaims;
  if (typed.exp <= nowSeconds) return { ok: false, reason: 'expired' };
  return { ok: true, claims: typed };
}
