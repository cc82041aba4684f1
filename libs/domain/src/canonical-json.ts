import canonicalize from 'canonicalize';

/**
 * Canonical JSON (RFC 8785 / JCS: sorted keys, no whitespace). Every size measurement and
 * every hash uses this one form so that the same event always has the same bytes.
 */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError('value has no JSON representation');
  return text;
}

export function canonicalByteLength(value: unknown): number {
  return Buffer.byteLength(canonicalJson(value), 'utf8');
}
