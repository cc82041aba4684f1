/**
 * Tamper evidence: sealBatch links a run's events, verifyChain/ChainVerifier recompute the
 * links and name the first broken revision. Example tests on a sealed run of the catalogue's
 * examples, then properties over random batches and random single mutations.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { EVENT_TYPES } from './event-types';
import {
  ChainVerifier,
  GENESIS_HASH,
  eventHash,
  sealBatch,
  verifyChain,
  type ChainLink,
  type RunContext,
  type UnsealedEvent,
} from './hash-chain';
import { EVENT_DATA_EXAMPLES } from './testing/event-fixtures';

const CONTEXT: RunContext = { tenantId: 'tenant-a', runId: 'run-1', threadId: 'thread-1' };

/** Sealed events as a store reads them back: each with the revision it was sealed for. */
function recorded(sealed: UnsealedEvent[], firstRevision = 0): ChainLink[] {
  return sealed.map((event, offset) => ({ ...event, revision: firstRevision + offset }));
}

/** One example event of every catalogue type, in catalogue order, with ids 0..12. */
function exampleBatch(): UnsealedEvent[] {
  return EVENT_TYPES.map((type, index) => ({
    id: `00000000-0000-4000-8000-${String(index).padStart(12, '0')}`,
    type,
    data: structuredClone(EVENT_DATA_EXAMPLES[type]),
    metadata: { traceId: `trace-${index}` },
  }));
}

/** Changes one character of a string: a one-byte change for ASCII text. */
function flipChar(text: string, at = 0): string {
  const code = text.charCodeAt(at);
  return text.slice(0, at) + String.fromCharCode(code ^ 1) + text.slice(at + 1);
}

/** Changes one character of the first string found in a JSON value, depth first. */
function flipFirstString(value: unknown): { changed: boolean; value: unknown } {
  if (typeof value === 'string' && value.length > 0)
    return { changed: true, value: flipChar(value) };
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i += 1) {
      const inner = flipFirstString(value[i]);
      if (inner.changed)
        return { changed: true, value: value.map((v, j) => (j === i ? inner.value : v)) };
    }
  } else if (value !== null && typeof value === 'object') {
    for (const [key, v] of Object.entries(value)) {
      const inner = flipFirstString(v);
      if (inner.changed) return { changed: true, value: { ...value, [key]: inner.value } };
    }
  }
  return { changed: false, value };
}

type Mutation = (link: ChainLink) => ChainLink;

/** Each changes exactly one thing the chain must protect, and always changes it. */
const MUTATIONS: Record<string, Mutation> = {
  'one byte of data': (link) => {
    const flipped = flipFirstString(link.data);
    return { ...link, data: flipped.changed ? flipped.value : { was: link.data } };
  },
  type: (link) => ({
    ...link,
    type: link.type === 'tool.started' ? 'tool.finished' : 'tool.started',
  }),
  id: (link) => ({ ...link, id: flipChar(link.id, link.id.length - 1) }),
  revision: (link) => ({ ...link, revision: link.revision + 1 }),
  'tenant in metadata': (link) => ({
    ...link,
    metadata: { ...link.metadata, tenantId: `${String(link.metadata.tenantId)}x` },
  }),
  'prevHash link': (link) => ({
    ...link,
    metadata: { ...link.metadata, prevHash: flipChar(String(link.metadata.prevHash)) },
  }),
  'stored hash': (link) => ({
    ...link,
    metadata: { ...link.metadata, hash: flipChar(String(link.metadata.hash)) },
  }),
};
const MUTATION_NAMES = Object.keys(MUTATIONS);

function mutateAt(links: ChainLink[], k: number, mutation: Mutation): ChainLink[] {
  return links.map((link, i) => (i === k ? mutation(link) : link));
}

describe('eventHash', () => {
  const fields = {
    id: '0b7c6c1e-3f0a-4d8e-9a51-2f4c9f0e7d21',
    type: 'message.added',
    data: { text: 'héllo', n: 1 },
    revision: 0,
    tenantId: 'tenant-a',
    runId: 'run-1',
  };

  it('is SHA-256 over prevHash then the canonical JSON of id, type, data, revision, tenant, run', () => {
    // The recorded hashes must stay reproducible forever: this pins the hashed bytes.
    const body =
      '{"data":{"n":1,"text":"héllo"},"id":"0b7c6c1e-3f0a-4d8e-9a51-2f4c9f0e7d21",' +
      '"revision":0,"run":"run-1","tenant":"tenant-a","type":"message.added"}';
    const expected = createHash('sha256').update(GENESIS_HASH).update(body, 'utf8').digest('hex');

    expect(eventHash(GENESIS_HASH, fields)).toBe(expected);
  });

  it('does not depend on the key order of data', () => {
    expect(eventHash(GENESIS_HASH, { ...fields, data: { n: 1, text: 'héllo' } })).toBe(
      eventHash(GENESIS_HASH, fields),
    );
  });

  it.each([
    ['prevHash', () => eventHash('f'.repeat(64), fields)],
    ['id', () => eventHash(GENESIS_HASH, { ...fields, id: flipChar(fields.id) })],
    ['type', () => eventHash(GENESIS_HASH, { ...fields, type: 'message.added2' })],
    ['data', () => eventHash(GENESIS_HASH, { ...fields, data: { text: 'hello', n: 1 } })],
    ['revision', () => eventHash(GENESIS_HASH, { ...fields, revision: 1 })],
    ['tenant', () => eventHash(GENESIS_HASH, { ...fields, tenantId: 'tenant-b' })],
    ['run', () => eventHash(GENESIS_HASH, { ...fields, runId: 'run-2' })],
  ])('changes when %s changes', (_field, hash) => {
    expect(hash()).not.toBe(eventHash(GENESIS_HASH, fields));
  });
});

describe('sealBatch', () => {
  it('starts every run from the genesis hash: 64 zeros, as recorded logs were chained', () => {
    expect(sealBatch(null, CONTEXT, exampleBatch())[0].metadata.prevHash).toBe('0'.repeat(64));
  });

  it('links a new run from the genesis hash, one revision after another', () => {
    // Given a new run's batch
    const batch = exampleBatch();

    // When it is sealed
    const sealed = sealBatch(null, CONTEXT, batch);

    // Then each event's prevHash is the previous event's hash, starting from genesis,
    // and each hash covers the event at its revision
    expect(sealed).toHaveLength(batch.length);
    sealed.forEach((event, revision) => {
      const prevHash = revision === 0 ? GENESIS_HASH : sealed[revision - 1].metadata.hash;
      expect(event.metadata.prevHash).toBe(prevHash);
      expect(event.metadata.hash).toBe(
        eventHash(prevHash as string, { ...batch[revision], revision, ...CONTEXT }),
      );
    });
  });

  it('stamps the server context over anything the client put under the same keys', () => {
    const event: UnsealedEvent = {
      id: 'e-1',
      type: 'run.started',
      data: EVENT_DATA_EXAMPLES['run.started'],
      metadata: {
        tenantId: 'tenant-b',
        runId: 'run-x',
        threadId: 'thread-x',
        prevHash: 'forged',
        hash: 'forged',
        traceId: 'kept',
      },
    };

    const [sealed] = sealBatch(null, CONTEXT, [event]);

    expect(sealed.metadata).toEqual({
      ...CONTEXT,
      traceId: 'kept',
      prevHash: GENESIS_HASH,
      hash: eventHash(GENESIS_HASH, { ...event, revision: 0, ...CONTEXT }),
    });
  });

  it('continues a chain from the head it is given', () => {
    const head = { revision: 4, hash: 'a'.repeat(64) };
    const batch = exampleBatch().slice(0, 2);

    const sealed = sealBatch(head, CONTEXT, batch);

    expect(sealed[0].metadata.prevHash).toBe(head.hash);
    expect(sealed[0].metadata.hash).toBe(
      eventHash(head.hash, { ...batch[0], revision: 5, ...CONTEXT }),
    );
    expect(sealed[1].metadata.hash).toBe(
      eventHash(sealed[0].metadata.hash as string, { ...batch[1], revision: 6, ...CONTEXT }),
    );
  });

  it('does not change the events it is given', () => {
    const batch = exampleBatch();
    const before = structuredClone(batch);

    sealBatch(null, CONTEXT, batch);

    expect(batch).toEqual(before);
  });

  it('seals an empty batch as nothing', () => {
    expect(sealBatch(null, CONTEXT, [])).toEqual([]);
  });
});

describe('verifyChain', () => {
  const links = () => recorded(sealBatch(null, CONTEXT, exampleBatch()));
  const LAST = EVENT_TYPES.length - 1;

  it('verifies a sealed run and reports its head hash', () => {
    const chain = links();

    expect(verifyChain(CONTEXT.runId, chain)).toEqual({
      count: chain.length,
      headHash: chain[LAST].metadata.hash,
      verified: true,
      firstBrokenRevision: null,
    });
  });

  it('verifies an empty run, with no head hash', () => {
    expect(verifyChain(CONTEXT.runId, [])).toEqual({
      count: 0,
      headHash: null,
      verified: true,
      firstBrokenRevision: null,
    });
  });

  it('verifies a run sealed batch after batch', () => {
    const batch = exampleBatch();
    const first = sealBatch(null, CONTEXT, batch.slice(0, 5));
    const head = { revision: 4, hash: first[4].metadata.hash as string };
    const second = sealBatch(head, CONTEXT, batch.slice(5));

    expect(verifyChain(CONTEXT.runId, recorded([...first, ...second])).verified).toBe(true);
  });

  it('breaks at revision 0 when verified as another run', () => {
    expect(verifyChain('run-2', links())).toMatchObject({
      verified: false,
      firstBrokenRevision: 0,
    });
  });

  describe.each(MUTATION_NAMES)('changing the %s of the event at revision k', (name) => {
    it.each([0, 1, 6, LAST])('breaks the chain at k = %i', (k) => {
      // Given a sealed run
      const chain = links();

      // When one event is changed after it was recorded
      const tampered = mutateAt(chain, k, MUTATIONS[name]);

      // Then verification names that event's revision, and still counts every event
      expect(verifyChain(CONTEXT.runId, tampered)).toEqual({
        count: chain.length,
        headHash: null,
        verified: false,
        firstBrokenRevision: k,
      });
    });
  });

  it.each([0, 3, LAST - 1])('names revision k when the event at k is removed (k = %i)', (k) => {
    const chain = links();
    const gapped = chain.filter((_, i) => i !== k);

    expect(verifyChain(CONTEXT.runId, gapped)).toMatchObject({
      verified: false,
      firstBrokenRevision: k,
    });
  });

  it('cannot see a cut at the tail by itself: the shorter chain verifies with an older head', () => {
    // A reader detects a cut by comparing the head hash with the one it was given.
    const chain = links();

    const verdict = verifyChain(CONTEXT.runId, chain.slice(0, LAST));

    expect(verdict).toMatchObject({ verified: true, count: LAST });
    expect(verdict.headHash).toBe(chain[LAST - 1].metadata.hash);
    expect(verdict.headHash).not.toBe(chain[LAST].metadata.hash);
  });

  it.each([0, 3, LAST - 1])('names revision k when events k and k+1 swap (k = %i)', (k) => {
    const chain = links();
    const swapped = [...chain];
    [swapped[k], swapped[k + 1]] = [swapped[k + 1], swapped[k]];

    expect(verifyChain(CONTEXT.runId, swapped)).toMatchObject({
      verified: false,
      firstBrokenRevision: k,
    });
  });

  it('breaks at the last event when its revision is changed and its hash recomputed to match', () => {
    // Nothing after it would notice the new hash: only the revision's place in the run can.
    const chain = links();
    const last = chain[LAST];
    const revision = LAST + 5;
    const prevHash = last.metadata.prevHash as string;
    const hash = eventHash(prevHash, { ...last, revision, ...CONTEXT });
    const forged = [
      ...chain.slice(0, LAST),
      { ...last, revision, metadata: { ...last.metadata, hash } },
    ];

    expect(verifyChain(CONTEXT.runId, forged)).toMatchObject({
      verified: false,
      firstBrokenRevision: LAST,
    });
  });

  it('reads a missing or non-string tenant stamp as the empty tenant', () => {
    // Sealed for tenant '', then stored without the key, or with a stamp that is not a string
    const sealed = recorded(sealBatch(null, { ...CONTEXT, tenantId: '' }, exampleBatch()));
    const unstamped = sealed.map((event, i) => {
      const { tenantId: _tenant, ...metadata } = event.metadata;
      return { ...event, metadata: i % 2 === 0 ? metadata : { ...metadata, tenantId: 7 } };
    });

    expect(verifyChain(CONTEXT.runId, unstamped)).toMatchObject({ verified: true });
    expect(
      verifyChain(
        CONTEXT.runId,
        links().map((event) => ({
          ...event,
          metadata: { ...event.metadata, tenantId: undefined },
        })),
      ),
    ).toMatchObject({ verified: false, firstBrokenRevision: 0 });
  });

  it('keeps the first break when a later event is broken too', () => {
    const chain = mutateAt(mutateAt(links(), 2, MUTATIONS.type), 7, MUTATIONS.id);

    expect(verifyChain(CONTEXT.runId, chain).firstBrokenRevision).toBe(2);
  });

  it('gives ChainVerifier, fed one event at a time, the same verdict', () => {
    const chain = mutateAt(links(), 5, MUTATIONS.type);
    const verifier = new ChainVerifier(CONTEXT.runId);

    const verdicts = chain.map((event) => {
      verifier.add(event);
      return verifier.verdict();
    });

    expect(verdicts[4]).toMatchObject({
      count: 5,
      verified: true,
      headHash: chain[4].metadata.hash,
    });
    expect(verdicts[5]).toMatchObject({ count: 6, verified: false, headHash: null });
    expect(verdicts[LAST]).toEqual(verifyChain(CONTEXT.runId, chain));
  });
});

describe('hash chain properties', () => {
  const contextArb = fc.record({
    tenantId: fc.string({ minLength: 1 }),
    runId: fc.string({ minLength: 1 }),
    threadId: fc.string({ minLength: 1 }),
  });
  const eventArb = fc.record({
    id: fc.uuid(),
    type: fc.constantFrom(...EVENT_TYPES),
    data: fc.jsonValue(),
    metadata: fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 3 }),
  });
  const batchArb = fc.array(eventArb, { minLength: 1, maxLength: 12 });

  it('a sealed batch verifies, with the last hash as its head', () => {
    fc.assert(
      fc.property(contextArb, batchArb, (context, batch) => {
        const chain = recorded(sealBatch(null, context, batch));

        expect(verifyChain(context.runId, chain)).toEqual({
          count: batch.length,
          headHash: chain[chain.length - 1].metadata.hash,
          verified: true,
          firstBrokenRevision: null,
        });
      }),
    );
  });

  it('sealing in two batches equals sealing in one', () => {
    fc.assert(
      fc.property(contextArb, batchArb, fc.nat(), (context, batch, cut) => {
        const split = cut % (batch.length + 1);
        const first = sealBatch(null, context, batch.slice(0, split));
        const head =
          split === 0
            ? null
            : { revision: split - 1, hash: first[split - 1].metadata.hash as string };
        const second = sealBatch(head, context, batch.slice(split));

        expect([...first, ...second]).toEqual(sealBatch(null, context, batch));
      }),
    );
  });

  it.each(MUTATION_NAMES)(
    'changing the %s of any one event reports exactly its revision',
    (name) => {
      fc.assert(
        fc.property(contextArb, batchArb, fc.nat(), (context, batch, at) => {
          const k = at % batch.length;
          const chain = recorded(sealBatch(null, context, batch));

          const verdict = verifyChain(context.runId, mutateAt(chain, k, MUTATIONS[name]));

          expect(verdict).toMatchObject({ verified: false, firstBrokenRevision: k });
        }),
      );
    },
  );
});
