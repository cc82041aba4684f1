import fc from 'fast-check';
import { signReceipt, type ReceiptClaims } from './receipts';
import { signStreamToken, verifyStreamToken, type StreamTokenClaims } from './stream-tokens';

const SECRET = 'stream-token-test-secret-0123456789abcdef';
const claims: StreamTokenClaims = {
  tenant: 'acme',
  key: '0123456789abcdef',
  user: 'Ana',
  kind: 'thread',
  id: 'thread-1',
  exp: 1000,
};

describe('stream tokens', () => {
  it('verifies what it signed, until it expires', () => {
    const token = signStreamToken(claims, SECRET);
    expect(verifyStreamToken(token, SECRET, 999)).toEqual({ ok: true, claims });
    expect(verifyStreamToken(token, SECRET, 1000)).toEqual({
      ok: false,
      reason: 'expired',
      claims,
    });
  });

  it('refuses a token signed with another secret', () => {
    const token = signStreamToken(claims, `${SECRET}-other`);
    expect(verifyStreamToken(token, SECRET, 0)).toEqual({ ok: false, reason: 'signature' });
  });

  it('refuses any change to the claims: another thread, run, tenant, key, user or expiry', () => {
    const [, signature] = signStreamToken(claims, SECRET).split('.');
    for (const changed of [
      { ...claims, id: 'thread-2' },
      { ...claims, kind: 'run' as const },
      { ...claims, tenant: 'other' },
      { ...claims, key: 'fedcba9876543210' },
      { ...claims, user: 'Bob' },
      { ...claims, exp: 5000 },
    ]) {
      const forged = `${Buffer.from(JSON.stringify(changed)).toString('base64url')}.${signature}`;
      expect(verifyStreamToken(forged, SECRET, 0)).toEqual({ ok: false, reason: 'signature' });
    }
  });

  it('is never accepted from an approval receipt signed with the same secret', () => {
    const receipt: ReceiptClaims = {
      rid: 'r',
      tool: 't',
      inputDigest: 'd',
      policyRevision: 'p',
      tenant: 'acme',
      user: 'u',
      thread: 'thread-1',
      run: 'run-1',
      approvalId: 'a',
      toolCallId: 'tc',
      decision: 'allow',
      exp: 1000,
    };
    expect(verifyStreamToken(signReceipt(receipt, SECRET), SECRET, 0)).toEqual({
      ok: false,
      reason: 'signature',
    });
  });

  it('answers malformed, never throws, for any string or value', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.anything()), (value) => {
        const check = verifyStreamToken(value, SECRET, 0);
        expect(check.ok).toBe(false);
      }),
    );
  });

  it('opens one run as well as one thread', () => {
    const run: StreamTokenClaims = { ...claims, kind: 'run', id: 'run-1' };
    expect(verifyStreamToken(signStreamToken(run, SECRET), SECRET, 0)).toEqual({
      ok: true,
      claims: run,
    });
  });

  it.each([
    ['no tenant', { ...claims, tenant: undefined }],
    ['a tenant that is not text', { ...claims, tenant: 7 }],
    ['another kind of stream', { ...claims, kind: 'receipt' }],
    ['no kind', { ...claims, kind: undefined }],
    ['an id that is not text', { ...claims, id: 7 }],
    ['a key that is not text', { ...claims, key: 7 }],
    ['a user that is not text', { ...claims, user: ['Ana'] }],
    ['no expiry', { ...claims, exp: undefined }],
    ['an expiry written as text', { ...claims, exp: '2000' }],
  ])('is malformed when signed with %s', (_what, signed) => {
    const token = signStreamToken(signed as unknown as StreamTokenClaims, SECRET);
    expect(verifyStreamToken(token, SECRET, 0)).toEqual({ ok: false, reason: 'malformed' });
  });

  it('still opens a token signed before an upgrade, which names no key: the key derivation does not change', () => {
    const minted =
      'eyJleHAiOjEwMDAsImlkIjoidGhyZWFkLTEiLCJraW5kIjoidGhyZWFkIiwidGVuYW50IjoiYWNtZSJ9.3hDev6ReZJlq2wZxoL_6T80KgVwdsyuJBlpIkJ0EOKk';
    const { key: _key, user: _user, ...unnamed } = claims;
    expect(verifyStreamToken(minted, SECRET, 0)).toEqual({ ok: true, claims: unnamed });
  });
});
