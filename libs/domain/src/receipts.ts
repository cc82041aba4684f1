/**
 * One-use approval receipts: the decision, signed with HMAC-SHA256 and bound to the tenant,
 * run, thread, tool call, tool, a digest of its input, the policy revision, the user and an
 * expiry. Consuming one re-checks what it is bound to against the run and the policy as they
 * are now (`consumeRefusal`), so it cannot be replayed for another command, thread, user or
 * policy. Format: base64url(JSON claims) "." base64url(HMAC-SHA256(secret, first part)).
 * The bearer receipt goes to the resolver only; the log keeps its id and `receiptDigest`.
 */
import { canonicalJson, sha256Hex } from './canonical-json';
import type { Decision } from './event-types';
import { openToken, signToken, type SignedTokenCheck } from './signed-token';

export interface ReceiptClaims {
  /** The receipt's own id: consuming it appends to the tenant's `receipt-<tenant>-<rid>`. */
  rid: string;
  tool: string;
  toolCallId: string;
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

export type ReceiptCheck = SignedTokenCheck<ReceiptClaims>;

/** SHA-256 of the input's canonical JSON: the same input always has the same digest. */
export function inputDigest(input: unknown): string {
  return sha256Hex(canonicalJson(input));
}

/** What the log keeps of a receipt instead of the bearer token: SHA-256 of the token. */
export function receiptDigest(receipt: string): string {
  return sha256Hex(receipt);
}

export function signReceipt(claims: ReceiptClaims, secret: string): string {
  return signToken(claims, secret);
}

const CLAIM_TYPES: Record<keyof ReceiptClaims, 'string' | 'number'> = {
  rid: 'string',
  tool: 'string',
  toolCallId: 'string',
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
  return openToken<ReceiptClaims>(
    receipt,
    secret,
    nowSeconds,
    (claims) =>
      Object.entries(CLAIM_TYPES).every(([key, type]) => typeof claims[key] === type) &&
      (claims.decision === 'allow' || claims.decision === 'deny'),
  );
}

/** Why a verified receipt may not be consumed now. */
export type ConsumeRefusal =
  | 'tool_mismatch'
  | 'tool_call_mismatch'
  | 'input_mismatch'
  | 'denied'
  | 'run_finished'
  | 'superseded'
  | 'tool_finished'
  | 'policy_forbids';

/** What consuming needs to know of the run now, folded from its own stream. */
export interface ConsumeContext {
  threadId: string;
  finished: boolean;
  /**
   * The approval the receipt names, as recorded: its tool call, its resolution's receipt id,
   * and whether the call has finished since (the runtime went on without it, or gave up).
   */
  approval?: {
    toolCallId: string;
    resolvedReceipt?: string;
    resolvedDigest?: string;
    toolFinished?: boolean;
  };
  /** The newest approval asked for the receipt's tool call. */
  latestApprovalId?: string;
}

export interface ConsumeAttempt {
  toolName: string;
  /** Optional: a consumer that names the call has it checked too. */
  toolCallId?: string;
  inputDigest: string;
  /** The acting user consuming, recorded as `consumedBy`: any user of the receipt's tenant. */
  user: string;
  /** The bearer token itself, so a legacy resolution that recorded it is still recognised. */
  receipt: string;
}

/**
 * Decides whether a verified receipt may be consumed now: for the tool, call and input it
 * names, while its run is still going, its approval is the newest for its call and was
 * resolved with this very receipt, its call has not finished, and the policy now allows the
 * tool. Null: consume it. The user it names is the one who decided; it is a bearer token the
 * resolver hands to the runtime, whose own key (with `append`) consumes it.
 */
export function consumeRefusal(
  claims: ReceiptClaims,
  attempt: ConsumeAttempt,
  run: ConsumeContext,
  policyAllows: boolean,
): ConsumeRefusal | null {
  if (claims.tool !== attempt.toolName) return 'tool_mismatch';
  if (attempt.toolCallId !== undefined && attempt.toolCallId !== claims.toolCallId)
    return 'tool_call_mismatch';
  if (claims.inputDigest !== attempt.inputDigest) return 'input_mismatch';
  if (claims.decision !== 'allow') return 'denied';
  if (run.finished) return 'run_finished';
  const approval = run.approval;
  const resolvedWithThis =
    approval !== undefined &&
    (approval.resolvedReceipt === claims.rid || approval.resolvedReceipt === attempt.receipt) &&
    (approval.resolvedDigest === undefined ||
      approval.resolvedDigest === receiptDigest(attempt.receipt));
  if (
    !resolvedWithThis ||
    approval.toolCallId !== claims.toolCallId ||
    run.threadId !== claims.thread ||
    run.latestApprovalId !== claims.approvalId
  )
    return 'superseded';
  if (approval.toolFinished) return 'tool_finished';
  if (!policyAllows) return 'policy_forbids';
  return null;
}
