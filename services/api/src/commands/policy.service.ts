/**
 * The tool policy as it is now: POLICY_FILE is read at every resolution (it is small) and
 * parsed again only when its bytes changed, so a decision always meets the current policy.
 * Its revision is the SHA-256 of the file's bytes and is recorded with every decision.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Inject, Injectable } from '@nestjs/common';
import { parse } from 'yaml';
import {
  evaluatePolicy,
  parsePolicy,
  type PolicyDocument,
  type PolicyVerdict,
} from '@runledger/domain';
import { APP_CONFIG, type AppConfig } from '../config/config';

export const NO_POLICY_REVISION = 'none';

interface Loaded {
  revision: string;
  doc: PolicyDocument;
}

@Injectable()
export class PolicyService {
  private loaded: Loaded | null = null;

  constructor(@Inject(APP_CONFIG) private readonly config: AppConfig) {}

  evaluate(
    tenantId: string,
    threadId: string,
    toolName: string,
  ): PolicyVerdict & { revision: string } {
    const { doc, revision } = this.current();
    return { ...evaluatePolicy(doc, tenantId, threadId, toolName), revision };
  }

  /** Throws (naming the file) when the policy file is unreadable or invalid: no decision without it. */
  private current(): Loaded {
    const file = this.config.policyFile;
    if (file === undefined) return { revision: NO_POLICY_REVISION, doc: {} };
    const bytes = readFileSync(file);
    const revision = createHash('sha256').update(bytes).digest('hex');
    if (this.loaded?.revision === revision) return this.loaded;
    let doc: PolicyDocument;
    try {
      doc = parsePolicy(parse(bytes.toString('utf8')));
    } catch (error) {
      throw new Error(`POLICY_FILE ${file} is invalid: ${String(error)}`, { cause: error });
    }
    this.loaded = { revision, doc };
    return this.loaded;
  }
}
