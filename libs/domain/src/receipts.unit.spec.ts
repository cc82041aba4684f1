import { createHmac } from 'node:crypto';
import {
  consumeRefusal,
  inputDigest,
  receiptDigest,
  signReceipt,
  verifyReceipt,
  type ConsumeAttempt,
  type ConsumeContext,
  type ReceiptClaims,
} from './receipts';

const SECRET = 'a-secret-of-at-least-thirty-two-characters';
const claims: ReceiptClaims = {
  rid: '0192e3a0-0000-7000-8000-000000000001',
  tool: 'deploy',
  toolCallId: 'tc-1',
  inputDigest: inputDigest({ env: 'prod', replicas: 2 }),
  policyRevision: 'c0ffee',
  tenant: 'acme',
  user: 'u:ana',
  thread: 'thread-1',
  run: 'run-1',
  approvalId: 'ap-1',
  decision: 'allow',
  exp: 2_000,
};

describe('receipts', () => {
  it('verify what they sign, before their expiry', () => {
    expect(verifyReceipt(signReceipt(claims, SECRET), SECRET, 1_999)).toEqual({ ok: true, claims });
  });

  it('expire at their expiry, still telling their claims', () => {
    expect(verifyReceipt(signReceipt(claims, SECRET), SECRET, 2_000)).toEqual({
      ok: false,
      reason: 'expired',
      claims,
    });
  });

  it('refuse a receipt signed with another secret or with altered claims', () => {
    const receipt = signReceipt(claims, SECRET);
    expect(verifyReceipt(receipt, `${SECRET}!`, 0)).toEqual({ ok: false, reason: 'signature' });
    const [, signature] = receipt.split('.');
    const altered = Buffer.from(JSON.stringify({ ...claims, tool: 'destroy' })).toString(
      'base64url',
    );
    expect(verifyReceipt(`${altered}.${signature}`, SECRET, 0)).toEqual({
      ok: false,
      reason: 'signature',
    });
  });

  it.each([42, null, '', 'no-dot', 'a.b.c', '.sig', 'body.'])(
    'refuse a malformed receipt %j',
    (receipt) => {
      expect(verifyReceipt(receipt, SECRET, 0)).toEqual({ ok: false, reason: 'malformed' });
    },
  );

  it('refuse a signature of the wrong length as a bad signature, not a crash', () => {
    const [body] = signReceipt(claims, SECRET).split('.');
    expect(verifyReceipt(`${body}.c2hvcnQ`, SECRET, 0)).toEqual({ ok: false, reason: 'signature' });
  });

  describe('signed with the right secret but not a receipt', () => {
    /** What a holder of the secret could sign: the checks after the signature still apply. */
    const signed = (body: string): string => {
      const part = Buffer.from(body).toString('base64url');
      return `${part}.${createHmac('sha256', SECRET).update(part).digest('base64url')}`;
    };
    const { exp: _exp, ...withoutExpiry } = claims;

    it.each([
      ['text that is not JSON', 'not json'],
      ['a JSON array', JSON.stringify([claims])],
      ['JSON null', 'null'],
      ['claims without an expiry', JSON.stringify(withoutExpiry)],
      ['an expiry written as text', JSON.stringify({ ...claims, exp: '2000' })],
      ['a tool that is not a string', JSON.stringify({ ...claims, tool: 7 })],
      ['a decision other than allow or deny', JSON.stringify({ ...claims, decision: 'maybe' })],
    ])('are malformed: %s', (_label, body) => {
      expect(verifyReceipt(signed(body), SECRET, 0)).toEqual({ ok: false, reason: 'malformed' });
    });

    it('carry a deny decision like an allow', () => {
      const deny = { ...claims, decision: 'deny' as const };
      expect(verifyReceipt(signed(JSON.stringify(deny)), SECRET, 0)).toEqual({
        ok: true,
        claims: deny,
      });
    });
  });

  it('bind the input by its canonical digest: key order does not matter, values do', () => {
    expect(inputDigest({ replicas: 2, env: 'prod' })).toBe(claims.inputDigest);
    expect(inputDigest({ env: 'prod', replicas: 3 })).not.toBe(claims.inputDigest);
  });
});

describe('consuming a receipt', () => {
  const token = signReceipt(claims, SECRET);
  const attempt: ConsumeAttempt = {
    toolName: 'deploy',
    inputDigest: claims.inputDigest,
    user: 'u:ana',
    receipt: token,
  };
  const run: ConsumeContext = {
    threadId: 'thread-1',
    finished: false,
    approval: {
      toolCallId: 'tc-1',
      resolvedReceipt: claims.rid,
      resolvedDigest: receiptDigest(token),
    },
    latestApprovalId: 'ap-1',
  };

  it('is allowed for its tool, call, input and user while the run goes on and the policy allows', () => {
    expect(consumeRefusal(claims, attempt, run, true)).toBeNull();
    expect(consumeRefusal(claims, { ...attempt, toolCallId: 'tc-1' }, run, true)).toBeNull();
  });

  it('is allowed for another user of the tenant: the runtime consumes what a person decided', () => {
    expect(
      consumeRefusal(claims, { ...attempt, user: 'key:0123456789abcdef' }, run, true),
    ).toBeNull();
  });

  it.each<[string, Partial<ConsumeAttempt>, Partial<ConsumeContext>, boolean, string]>([
    ['another tool', { toolName: 'destroy' }, {}, true, 'tool_mismatch'],
    ['another tool call', { toolCallId: 'tc-2' }, {}, true, 'tool_call_mismatch'],
    ['another input', { inputDigest: inputDigest({ env: 'dev' }) }, {}, true, 'input_mismatch'],
    ['a run that finished or was stopped', {}, { finished: true }, true, 'run_finished'],
    ['an approval asked again for the call', {}, { latestApprovalId: 'ap-2' }, true, 'superseded'],
    [
      'an approval resolved with another receipt',
      {},
      { approval: { toolCallId: 'tc-1', resolvedReceipt: 'other' } },
      true,
      'superseded',
    ],
    ['an approval not in the run', {}, { approval: undefined }, true, 'superseded'],
    [
      'an approval whose recorded digest is of another token',
      {},
      {
        approval: {
          toolCallId: 'tc-1',
          resolvedReceipt: claims.rid,
          resolvedDigest: receiptDigest('another token'),
        },
      },
      true,
      'superseded',
    ],
    [
      'an approval of another tool call',
      {},
      { approval: { toolCallId: 'tc-9', resolvedReceipt: claims.rid } },
      true,
      'superseded',
    ],
    ['a run of another thread', {}, { threadId: 'thread-9' }, true, 'superseded'],
    [
      'a tool call that finished since',
      {},
      { approval: { toolCallId: 'tc-1', resolvedReceipt: claims.rid, toolFinished: true } },
      true,
      'tool_finished',
    ],
    ['a policy that no longer allows the tool', {}, {}, false, 'policy_forbids'],
  ])('is refused for %s', (_, tried, now, policyAllows, reason) => {
    expect(consumeRefusal(claims, { ...attempt, ...tried }, { ...run, ...now }, policyAllows)).toBe(
      reason,
    );
  });

  it('keeps of a receipt its SHA-256 digest in hex, never the token', () => {
    expect(receiptDigest(token)).toMatch(/^[0-9a-f]{64}$/);
    expect(receiptDigest(token)).not.toBe(receiptDigest(`${token}x`));
  });

  it('is refused for a deny', () => {
    expect(consumeRefusal({ ...claims, decision: 'deny' }, attempt, run, true)).toBe('denied');
  });

  it('recognises a resolution recorded before the log kept ids: the token itself', () => {
    const legacy = { ...run, approval: { toolCallId: 'tc-1', resolvedReceipt: token } };
    expect(consumeRefusal(claims, attempt, legacy, true)).toBeNull();
  });
});
