/**
 * The one place that names streams. Every stream lives inside its tenant: run streams are
 * `run-<tenant>-<runId>`, consumed receipts `receipt-<tenant>-<receiptId>`. The tenant part is
 * escaped so that it never holds a '-' ('%' → '%25', '-' → '%2D'): the first '-' after the
 * kind's prefix ends the tenant, and the id after it may contain anything, so a name reads
 * back one way only. The event-id scope of a stream is its tenant part, which makes event
 * ids unique per tenant and never across tenants.
 */
export const RUN_STREAM_PREFIX = 'run-';
export const RECEIPT_STREAM_PREFIX = 'receipt-';

export type StreamKind = 'run' | 'receipt';

const PREFIXES: Record<StreamKind, string> = {
  run: RUN_STREAM_PREFIX,
  receipt: RECEIPT_STREAM_PREFIX,
};

export function escapeTenant(tenantId: string): string {
  return tenantId.replace(/%/g, '%25').replace(/-/g, '%2D');
}

function unescapeTenant(escaped: string): string {
  return escaped.replace(/%2D/gi, '-').replace(/%25/g, '%');
}

/** The prefix every stream of `kind` in the tenant starts with, and no other tenant's does. */
export function tenantStreamPrefix(kind: StreamKind, tenantId: string): string {
  return `${PREFIXES[kind]}${escapeTenant(tenantId)}-`;
}

export function runStream(tenantId: string, runId: string): string {
  return `${tenantStreamPrefix('run', tenantId)}${runId}`;
}

export function receiptStream(tenantId: string, receiptId: string): string {
  return `${tenantStreamPrefix('receipt', tenantId)}${receiptId}`;
}

export interface StreamName {
  kind: StreamKind;
  tenantId: string;
  id: string;
}

/** Reads a stream name back; null for a name no function here produces. */
export function parseStreamName(stream: string): StreamName | null {
  for (const kind of Object.keys(PREFIXES) as StreamKind[]) {
    const prefix = PREFIXES[kind];
    if (!stream.startsWith(prefix)) continue;
    const rest = stream.slice(prefix.length);
    const dash = rest.indexOf('-');
    if (dash <= 0 || dash === rest.length - 1) return null;
    return { kind, tenantId: unescapeTenant(rest.slice(0, dash)), id: rest.slice(dash + 1) };
  }
  return null;
}

/**
 * The scope inside which an event id is unique: the stream's tenant. Names that name no
 * tenant share one scope, the empty one.
 */
export function eventIdScope(stream: string): string {
  return parseStreamName(stream)?.tenantId ?? '';
}
