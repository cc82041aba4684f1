import { ApiError } from '../http/api-error';
import type { Scope } from '../config/config';
import { actorOf } from './acting-user';
import type { Principal } from './principal';

const key = (scopes: Scope[], user?: string): Principal => ({
  tenantId: 'tenant-a',
  scopes: new Set(scopes),
  keyId: '0123456789abcdef',
  ...(user === undefined ? {} : { user }),
});
const gateway = key(['read', 'approve', 'act-as']);

/** Headers as node's `headersDistinct` gives them: every value a list. */
const sent = (headers: Record<string, string | string[]>) =>
  Object.fromEntries(
    Object.entries(headers).map(([name, value]) => [name, Array.isArray(value) ? value : [value]]),
  );

function refusal(run: () => unknown): { status: number; body: Record<string, unknown> } {
  try {
    run();
  } catch (error) {
    if (error instanceof ApiError) return { status: error.status, body: error.body() };
    throw error;
  }
  throw new Error('expected a refusal');
}

describe('actorOf', () => {
  it('is the key itself when no user is named and the key is no user', () => {
    expect(actorOf(key(['append']), {})).toEqual({ kind: 'service', name: 'key:0123456789abcdef' });
    // A blank header names no one: the key acts as itself, even one that may not name users.
    for (const principal of [gateway, key(['append'])]) {
      expect(actorOf(principal, sent({ 'x-runledger-user': '   ' }))).toEqual({
        kind: 'service',
        name: 'key:0123456789abcdef',
      });
    }
  });

  it("is the key's own user when the key is one", () => {
    expect(actorOf(key(['read', 'approve'], 'Ana Lima'), {})).toEqual({
      kind: 'user',
      name: 'Ana Lima',
    });
  });

  it.each(['Łukasz', 'Дмитрий', '田中', 'ana@example.com', '100% sure'])(
    'decodes %s from a gateway, percent-encoded or as RFC 8187',
    (name) => {
      const encoded = encodeURIComponent(name);
      expect(actorOf(gateway, sent({ 'x-runledger-user': encoded }))).toEqual({
        kind: 'user',
        name,
      });
      expect(actorOf(gateway, sent({ 'x-runledger-user*': `UTF-8''${encoded}` }))).toEqual({
        kind: 'user',
        name,
      });
      expect(actorOf(gateway, sent({ 'x-runledger-user*': `utf-8'pl'${encoded}` })).name).toBe(
        name,
      );
    },
  );

  it('refuses a key without act-as naming a user, even one that is a user: 403', () => {
    for (const principal of [key(['append', 'read']), key(['approve'], 'ana')]) {
      expect(
        refusal(() => actorOf(principal, sent({ 'x-runledger-user': 'mallory' }))),
      ).toMatchObject({
        status: 403,
        body: { error: 'forbidden' },
      });
      expect(
        refusal(() => actorOf(principal, sent({ 'x-runledger-user*': "UTF-8''mallory" }))).status,
      ).toBe(403);
      // Sent twice, it is still a name this key may not give: 403 before any 400.
      expect(
        refusal(() => actorOf(principal, sent({ 'x-runledger-user': ['mallory', 'eve'] }))).status,
      ).toBe(403);
    }
  });

  it.each([
    ['too long', { 'x-runledger-user': 'x'.repeat(129) }, 'X-Runledger-User'],
    ['a control character', { 'x-runledger-user': 'al%07ice' }, 'X-Runledger-User'],
    [
      'a right-to-left override',
      { 'x-runledger-user': encodeURIComponent('\u202enimda') },
      'X-Runledger-User',
    ],
    [
      'a bidirectional isolate',
      { 'x-runledger-user': encodeURIComponent('ana\u2067x\u2069') },
      'X-Runledger-User',
    ],
    [
      'a zero-width space',
      { 'x-runledger-user': encodeURIComponent('a\u200bna') },
      'X-Runledger-User',
    ],
    [
      'a byte-order mark',
      { 'x-runledger-user*': `UTF-8''${encodeURIComponent('an\ufeffa')}` },
      'X-Runledger-User*',
    ],
    [
      'a line separator',
      { 'x-runledger-user': encodeURIComponent('ana\u2028eve') },
      'X-Runledger-User',
    ],
    [
      'a tag character',
      { 'x-runledger-user': encodeURIComponent('ana\u{e0041}') },
      'X-Runledger-User',
    ],
    ['broken percent-encoding', { 'x-runledger-user': '%E0%A4%A' }, 'X-Runledger-User'],
    ["a key's own identity", { 'x-runledger-user': 'key:0123456789abcdef' }, 'X-Runledger-User'],
    ['no charset', { 'x-runledger-user*': 'ana' }, 'X-Runledger-User*'],
    ['another charset', { 'x-runledger-user*': "ISO-8859-1''ana" }, 'X-Runledger-User*'],
    [
      'both headers',
      { 'x-runledger-user': 'a', 'x-runledger-user*': "UTF-8''b" },
      'X-Runledger-User',
    ],
    ['a repeated header', { 'x-runledger-user': ['a', 'b'] }, 'X-Runledger-User'],
    [
      'a repeated extended header',
      { 'x-runledger-user*': ["UTF-8''a", "UTF-8''b"] },
      'X-Runledger-User*',
    ],
  ])('refuses a gateway header with %s: 400 naming the header', (_, headers, field) => {
    expect(refusal(() => actorOf(gateway, sent(headers)))).toMatchObject({
      status: 400,
      body: { error: 'validation_failed', details: [{ field }] },
    });
  });

  it('accepts the joiners that emoji and scripts spell with', () => {
    for (const name of ['👩\u200d💻 ana', 'می\u200cخواهم']) {
      expect(actorOf(gateway, sent({ 'x-runledger-user': encodeURIComponent(name) })).name).toBe(
        name,
      );
    }
  });

  it('accepts a name of exactly 128 characters', () => {
    expect(actorOf(gateway, sent({ 'x-runledger-user': '田'.repeat(128) })).name).toBe(
      '田'.repeat(128),
    );
  });
});
