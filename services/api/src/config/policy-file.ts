/**
 * The tool policy file (POLICY_FILE), read and parsed, or why it cannot be, naming the file:
 * checked with the rest of the configuration at start-up, and read again at every decision
 * (commands/policy.service.ts).
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { parsePolicy, type PolicyDocument } from '@runledger/domain';

export interface PolicyFile {
  /** SHA-256 of the file's bytes: recorded with every decision. */
  revision: string;
  doc: PolicyDocument;
}

/** `known`: the last reading, answered again without parsing while the bytes are the same. */
export function readPolicyFile(file: string, known?: PolicyFile | null): PolicyFile | string {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch (error) {
    return `POLICY_FILE ${file} cannot be read: ${errorText(error)}`;
  }
  const revision = createHash('sha256').update(bytes).digest('hex');
  if (known?.revision === revision) return known;
  try {
    return { revision, doc: parsePolicy(parse(bytes.toString('utf8'))) };
  } catch (error) {
    return `POLICY_FILE ${file} is invalid: ${errorText(error)}`;
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
