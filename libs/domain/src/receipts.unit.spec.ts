import { inputDigest, signReceipt, verifyReceipt, type ReceiptClaims } from './receipts';

const SECRET = 'a-secret-of-at-least-thirty-two-characters';
const claims: ReceiptClaims = {
  rid: '0192e3a0-0000-7000-8000-000000000001',
  tool: 'deploy',
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

  it('expire at their expiry', () => {
    expect(verifyReceipt(signReceipt(claims, SECRET), SECRET, 2_000)).toEqual({
      ok: false,
      reason: 'expired',
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

  it.each([42, '', 'no-dot', 'a.b.c', '.sig'])('refuse a malformed receipt %j', (receipt) => {
    expect(verifyReceipt(receipt, SECRET, 0)).toMatchObject({ ok: false });
  });

  it('bind the input by its canonical digest: key order does not matter, values do', () => {
    expect(inputDigest({ replicas: 2, env: 'prod' })).toBe(claims.inputDigest);
    expect(inputDigest({ env: 'prod', replicas: 3 })).not.toBe(claims.inputDigest);
  });
});
