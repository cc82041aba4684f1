/**
 * One-use approval receipts: the decision, signed with HMAC-SHA256 and bound to the tool,
 * a digest of its input, the policy revision, the caller's context and an expiry, so it
 * cannot be replayed for another command, thread or policy (docs/architecture.md, "Why it exists").
 * Format: base64url(JSON claims) "." base64url(HMAC-SHA256(secret, first part)).
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { canonicalJson } from './canonical-json';
import { isPlainObject } from './event-catalogue';
import type { Decision } from './event-types';

export interface ReceiptClaims {
  /** The receipt's own id: consuming it appends to `receipt-<rid>`. */
  rid: string;
  tool: string;
  inputDigest: string;
  policyRevision: string;
  tenant: string;
  user: string;
  thread: string;
  run: string;
  approvalId: string;
  decision: Decision;
  /** Expiry, seconds since the epoch. */
  exp: number;
}

export type ReceiptCheck =
  | { ok: true; claims: ReceiptClaims }
  | { ok: false; reason: 'malformed' | 'signature' | 'expired' };

/** SHA-256 of the input's canonical JSON: the same input always has the same digest. */
export function inputDigest(input: unknown): string {
  return createHash('sha256').update(canonicalJson(input)).digest('hex');
}

function mac(secret: string, body: string): Buffer {
  return createHmac('sha256', secret).update(body).digest();
}

export function signReceipt(claims: ReceiptClaims, secret: string): string {
  const body = Buffer.from(canonicalJson(claims)).toString('base64url');
  return `${body}.${mac(secret, body).toString('base64url')}`;
}

const CLAIM_TYPES: Record<keyof ReceiptClaims, 'string' | 'number'> = {
  rid: 'string',
  tool: 'string',
  inputDigest: 'string',
  policyRevision: 'string',
  tenant: 'string',
  user: 'string',
  thread: 'string',
  run: 'string',
  approvalId: 'string',
  decision: 'string',
  exp: 'number',
};

/** Checks the signature first (nothing unsigned is parsed), then the expiry against `nowSeconds`. */
export function verifyReceipt(receipt: unknown, secret: string, nowSeconds: number): ReceiptCheck {
  if (typeof receipt !== 'string') return { ok: false, reason: 'malformed' };
  const parts = receipt.split('.');
  if (parts.length !== 2 || parts[0] === '' || parts[1] === '')
    return { ok: false, reason: 'malformed' };
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
    !Object.entries(CLAIM_TYPES).every(([key, type]) => typeof claims[key] === type) ||
    (claims.decision !== 'allow' && claims.decision !== 'deny')
  ) {
    return { ok: false, reason: 'malformed' };
  }
  const typed = claims as unknown as ReceiptClaims;
  if (typed.exp <= nowSeconds) return { ok: false, reason: 'expired' };
  return { ok: true, claims: typed };
}
