/**
 * The one token format behind receipts and stream tokens: base64url(canonical JSON claims)
 * "." base64url(HMAC-SHA256(key, first part)). Opening checks the signature before anything
 * is parsed, then the claims' shape, then the expiry.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { canonicalJson } from './canonical-json';
import { isPlainObject } from './event-catalogue';

/**
 * An expired token's claims are still told (their signature holds): a receipt spent before it
 * expired answers a replay as a replay.
 */
export type SignedTokenCheck<Claims> =
  | { ok: true; claims: Claims }
  | { ok: false; reason: 'malformed' | 'signature' }
  | { ok: false; reason: 'expired'; claims: Claims };

function mac(key: string | Buffer, body: string): Buffer {
  return createHmac('sha256', key).update(body).digest();
}

export function signToken(claims: object, key: string | Buffer): string {
  const body = Buffer.from(canonicalJson(claims)).toString('base64url');
  return `${body}.${mac(key, body).toString('base64url')}`;
}

/**
 * The claims of a token signed with `key`, when `isClaims` accepts their shape and their
 * `exp` (seconds since the epoch) is after `nowSeconds`.
 */
export function openToken<Claims extends { exp: number }>(
  token: unknown,
  key: string | Buffer,
  nowSeconds: number,
  isClaims: (claims: Record<string, unknown>) => boolean,
): SignedTokenCheck<Claims> {
  if (typeof token !== 'string') return { ok: false, reason: 'malformed' };
  const parts = token.split('.');
  if (parts.length !== 2 || parts[0] === '' || parts[1] === '') {
    return { ok: false, reason: 'malformed' };
  }
  const [body, signature] = parts;
  const expected = mac(key, body);
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
  if (!isPlainObject(claims) || typeof claims.exp !== 'number' || !isClaims(claims)) {
    return { ok: false, reason: 'malformed' };
  }
  const typed = claims as unknown as Claims;
  if (typed.exp <= nowSeconds) return { ok: false, reason: 'expired', claims: typed };
  return { ok: true, claims: typed };
}
