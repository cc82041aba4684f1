/**
 * Tool policy, layered default → tenant → thread, evaluated when an approval is resolved
 * (docs/architecture.md, "Why it exists"). Each layer may allow and deny tool names by glob. A deny in
 * any layer wins, and a layer's allow list bounds every layer below it: a child layer can
 * narrow what its parent allows, never broaden it.
 */
import picomatch from 'picomatch';
import { isPlainObject } from './event-catalogue';

export interface PolicyLayer {
  allow?: string[];
  deny?: string[];
}

export interface PolicyDocument {
  default?: PolicyLayer;
  tenants?: Record<string, PolicyLayer & { threads?: Record<string, PolicyLayer> }>;
}

export type PolicyVerdict = { allowed: true } | { allowed: false; rule: string };

export class PolicyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PolicyError';
  }
}

const LAYER_KEYS = new Set(['allow', 'deny']);

function parseLayer(value: unknown, where: string, extra: readonly string[] = []): PolicyLayer {
  if (!isPlainObject(value)) throw new PolicyError(`${where} must be an object`);
  for (const key of Object.keys(value)) {
    if (!LAYER_KEYS.has(key) && !extra.includes(key))
      throw new PolicyError(`${where}.${key} is not allowed`);
  }
  const layer: PolicyLayer = {};
  for (const key of ['allow', 'deny'] as const) {
    const globs = value[key];
    if (globs === undefined) continue;
    if (!Array.isArray(globs) || !globs.every((g) => typeof g === 'string' && g !== '')) {
      throw new PolicyError(`${where}.${key} must be a list of tool-name globs`);
    }
    layer[key] = globs as string[];
  }
  return layer;
}

/** Validates a parsed policy file; throws PolicyError naming the offending path. */
export function parsePolicy(value: unknown): PolicyDocument {
  if (value === null || value === undefined) return {};
  if (!isPlainObject(value)) throw new PolicyError('the policy must be an object');
  for (const key of Object.keys(value)) {
    if (key !== 'default' && key !== 'tenants')
      throw new PolicyError(`${key} is not allowed at the top level`);
  }
  const doc: PolicyDocument = {};
  if (value.default !== undefined) doc.default = parseLayer(value.default, 'default');
  if (value.tenants !== undefined) {
    if (!isPlainObject(value.tenants)) throw new PolicyError('tenants must be an object');
    doc.tenants = {};
    for (const [tenantId, raw] of Object.entries(value.tenants)) {
      const layer = parseLayer(raw, `tenants.${tenantId}`, ['threads']);
      const threads = (raw as { threads?: unknown }).threads;
      const tenant: PolicyLayer & { threads?: Record<string, PolicyLayer> } = layer;
      if (threads !== undefined) {
        if (!isPlainObject(threads))
          throw new PolicyError(`tenants.${tenantId}.threads must be an object`);
        tenant.threads = Object.fromEntries(
          Object.entries(threads).map(([threadId, t]) => [
            threadId,
            parseLayer(t, `tenants.${tenantId}.threads.${threadId}`),
          ]),
        );
      }
      doc.tenants[tenantId] = tenant;
    }
  }
  return doc;
}

function matches(globs: readonly string[], toolName: string): boolean {
  return globs.some((glob) => picomatch.isMatch(toolName, glob, { dot: true }));
}

/** Whether `toolName` may run for this tenant and thread under the policy as it is now. */
export function evaluatePolicy(
  doc: PolicyDocument,
  tenantId: string,
  threadId: string,
  toolName: string,
): PolicyVerdict {
  const tenant = doc.tenants?.[tenantId];
  const layers: [string, PolicyLayer | undefined][] = [
    ['default', doc.default],
    [`tenants.${tenantId}`, tenant],
    [`tenants.${tenantId}.threads.${threadId}`, tenant?.threads?.[threadId]],
  ];
  for (const [name, layer] of layers) {
    if (layer?.deny && matches(layer.deny, toolName))
      return { allowed: false, rule: `${name}.deny` };
  }
  for (const [name, layer] of layers) {
    if (layer?.allow && !matches(layer.allow, toolName)) {
      return { allowed: false, rule: `${name}.allow does not include it` };
    }
  }
  return { allowed: true };
}
