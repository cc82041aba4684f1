import { canonicalJson, sha256Hex } from './canonical-json';

/**
 * Tamper evidence per stream: each event's hash covers the previous hash and the
 * canonical JSON of what the event says (id, type, data, revision, tenant, run).
 */
export const GENESIS_HASH = '0'.repeat(64);

export interface HashedFields {
  id: string;
  type: string;
  data: unknown;
  revision: number;
  tenantId: string;
  runId: string;
}

export function eventHash(prevHash: string, fields: HashedFields): string {
  const body = canonicalJson({
    id: fields.id,
    type: fields.type,
    data: fields.data,
    revision: fields.revision,
    tenant: fields.tenantId,
    run: fields.runId,
  });
  return sha256Hex(prevHash + body);
}

export interface ChainLink {
  id: string;
  type: string;
  data: unknown;
  revision: number;
  metadata: Record<string, unknown>;
}

export interface ChainVerdict {
  count: number;
  headHash: string | null;
  verified: boolean;
  firstBrokenRevision: number | null;
}

/** Accumulates a verdict one event at a time so a replay can verify while it streams. */
export class ChainVerifier {
  private count = 0;
  private prevHash = GENESIS_HASH;
  private headHash: string | null = null;
  private firstBroken: number | null = null;

  constructor(private readonly runId: string) {}

  add(event: ChainLink): void {
    this.count += 1;
    if (this.firstBroken !== null) return;
    const meta = event.metadata;
    const tenantId = typeof meta.tenantId === 'string' ? meta.tenantId : '';
    const expected = eventHash(this.prevHash, { ...event, tenantId, runId: this.runId });
    const linked = meta.prevHash === this.prevHash && event.revision === this.count - 1;
    if (!linked || meta.hash !== expected) {
      // Where the chain breaks, counted from the start: the event's own revision may be what was altered.
      this.firstBroken = this.count - 1;
      return;
    }
    this.prevHash = expected;
    this.headHash = expected;
  }

  verdict(): ChainVerdict {
    return {
      count: this.count,
      headHash: this.firstBroken === null ? this.headHash : null,
      verified: this.firstBroken === null,
      firstBrokenRevision: this.firstBroken,
    };
  }
}

export function verifyChain(runId: string, events: Iterable<ChainLink>): ChainVerdict {
  const verifier = new ChainVerifier(runId);
  for (const event of events) verifier.add(event);
  return verifier.verdict();
}

export interface UnsealedEvent {
  id: string;
  type: string;
  data: unknown;
  metadata: Record<string, unknown>;
}

export interface RunContext {
  tenantId: string;
  runId: string;
  threadId: string;
}

/**
 * Stamps events for the revisions they will occupy after `prev`, one at a time and each
 * linked to the one before: the server's context (overriding anything a client put under the
 * same keys) and the chain's links. A caller may give the event loop turns between events.
 */
export class ChainSealer {
  private prevHash: string;
  private revision: number;

  constructor(
    prev: { revision: number; hash: string } | null,
    private readonly context: RunContext,
  ) {
    this.prevHash = prev?.hash ?? GENESIS_HASH;
    this.revision = prev === null ? 0 : prev.revision + 1;
  }

  seal(event: UnsealedEvent): UnsealedEvent {
    const { context, prevHash, revision } = this;
    const hash = eventHash(prevHash, { ...event, revision, ...context });
    this.prevHash = hash;
    this.revision += 1;
    return { ...event, metadata: { ...event.metadata, ...context, prevHash, hash } };
  }
}

/** Stamps a whole batch for the revisions it will occupy after `prev` (see ChainSealer). */
export function sealBatch(
  prev: { revision: number; hash: string } | null,
  context: RunContext,
  events: readonly UnsealedEvent[],
): UnsealedEvent[] {
  const sealer = new ChainSealer(prev, context);
  return events.map((event) => sealer.seal(event));
}
