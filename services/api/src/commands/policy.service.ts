/**
 * The tool policy as it is now: POLICY_FILE is read at every resolution (it is small) and
 * parsed again only when its bytes changed, so a decision always meets the current policy.
 * Its revision is the SHA-256 of the file's bytes and is recorded with every decision.
 *
 * A file that cannot be read or parsed stops the service at start-up, naming the variable,
 * like any other bad setting (config/config.ts). One that breaks later refuses the decisions
 * that need it (503 policy_unavailable, nothing written) until it is mended: never a decision
 * without it.
 */
import { Inject, Injectable, Logger } from '@nestjs/common';
import { evaluatePolicy, type PolicyVerdict } from '@runledger/domain';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { readPolicyFile, type PolicyFile } from '../config/policy-file';
import { ApiError } from '../http/api-error';

export const NO_POLICY_REVISION = 'none';

@Injectable()
export class PolicyService {
  private loaded: PolicyFile | null = null;
  private readonly logger = new Logger('policy');

  constructor(@Inject(APP_CONFIG) private readonly config: AppConfig) {}

  evaluate(
    tenantId: string,
    threadId: string,
    toolName: string,
  ): PolicyVerdict & { revision: string } {
    const { doc, revision } = this.current(tenantId);
    return { ...evaluatePolicy(doc, tenantId, threadId, toolName), revision };
  }

  private current(tenantId: string): PolicyFile {
    const file = this.config.policyFile;
    if (file === undefined) return { revision: NO_POLICY_REVISION, doc: {} };
    const read = readPolicyFile(file, this.loaded);
    if (typeof read === 'string') {
      // The file's path and the parser's quote of it (every tenant's rules) are the operator's
      // to read, not the caller's.
      this.logger.error({
        msg: 'the tool policy cannot be read; decisions are refused until it is mended',
        tenantId,
        problem: read,
      });
      throw new ApiError(
        503,
        'policy_unavailable',
        'the tool policy cannot be read now; no decision is taken without it, and nothing was written: retry once the operator has mended it',
      );
    }
    this.loaded = read;
    return read;
  }
}
