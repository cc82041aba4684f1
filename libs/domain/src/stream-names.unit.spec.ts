import fc from 'fast-check';
import {
  eventIdScope,
  parseStreamName,
  receiptStream,
  runStream,
  tenantStreamPrefix,
} from './stream-names';

const ids = fc.stringMatching(/^[A-Za-z0-9%._:-]{1,20}$/);

describe('stream names', () => {
  it('name a run within its tenant, readable as run-<tenant>-<runId>', () => {
    expect(runStream('acme', 'r1')).toBe('run-acme-r1');
    expect(receiptStream('acme', 'rid-1')).toBe('receipt-acme-rid-1');
  });

  it('escape dashes in the tenant, so tenant a-b run c and tenant a run b-c differ', () => {
    expect(runStream('a-b', 'c')).not.toBe(runStream('a', 'b-c'));
    expect(parseStreamName(runStream('a-b', 'c'))).toEqual({
      kind: 'run',
      tenantId: 'a-b',
      id: 'c',
    });
    expect(parseStreamName(runStream('a', 'b-c'))).toEqual({
      kind: 'run',
      tenantId: 'a',
      id: 'b-c',
    });
  });

  it('read back exactly what they were made of, for any tenant and id', () => {
    fc.assert(
      fc.property(
        ids,
        ids,
        fc.constantFrom('run' as const, 'receipt' as const),
        (tenant, id, kind) => {
          const stream = kind === 'run' ? runStream(tenant, id) : receiptStream(tenant, id);
          expect(parseStreamName(stream)).toEqual({ kind, tenantId: tenant, id });
        },
      ),
    );
  });

  it('never give two (tenant, run) pairs one name', () => {
    fc.assert(
      fc.property(ids, ids, ids, ids, (t1, r1, t2, r2) => {
        fc.pre(t1 !== t2 || r1 !== r2);
        expect(runStream(t1, r1)).not.toBe(runStream(t2, r2));
      }),
    );
  });

  it("give a tenant's streams a prefix no other tenant's stream starts with", () => {
    fc.assert(
      fc.property(ids, ids, ids, (t1, t2, run) => {
        fc.pre(t1 !== t2);
        expect(runStream(t2, run).startsWith(tenantStreamPrefix('run', t1))).toBe(false);
        expect(runStream(t1, run).startsWith(tenantStreamPrefix('run', t1))).toBe(true);
      }),
    );
  });

  it('scope event ids by tenant: runs and receipts of one tenant share a scope', () => {
    expect(eventIdScope(runStream('a', 'r1'))).toBe(eventIdScope(runStream('a', 'r2')));
    expect(eventIdScope(runStream('a', 'r1'))).toBe(eventIdScope(receiptStream('a', 'x')));
    expect(eventIdScope(runStream('a', 'r1'))).not.toBe(eventIdScope(runStream('b', 'r1')));
  });

  it('answer null for names no tenant-scoped kind produces', () => {
    expect(parseStreamName('mirror-parked')).toBeNull();
    expect(parseStreamName('run-')).toBeNull();
    expect(parseStreamName('run-acme')).toBeNull();
    expect(parseStreamName('run-acme-')).toBeNull();
    // No tenant is empty: a name with nothing before its dash is no run of any tenant.
    expect(parseStreamName('run--r1')).toBeNull();
    expect(eventIdScope('other')).toBe('');
  });
});
