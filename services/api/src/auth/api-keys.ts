/**
 * The key table the guard consults. Keys are compared by their SHA-256, so a lookup takes
 * the same path whatever the presented key shares with a real one.
 */
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SCOPES, type ApiKey } from '../config/config';
import type { Principal } from './principal';

export const DEV_TENANT = 'dev';
export const DEV_KEY_FILE = 'dev-api-key';

export class ApiKeyTable {
  private readonly byDigest = new Map<string, Principal>();

  constructor(keys: readonly ApiKey[]) {
    for (const { key, tenantId, scopes } of keys)
      this.byDigest.set(digest(key), { tenantId, scopes });
  }

  resolve(presented: string): Principal | undefined {
    return this.byDigest.get(digest(presented));
  }
}

function digest(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/**
 * With no RUNLEDGER_API_KEYS, a development key for tenant `dev` with every scope, kept in
 * DATA_DIR (mode 0600) so it survives restarts.
 */
export function provisionDevKey(dataDir: string): { key: ApiKey; file: string; created: boolean } {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, DEV_KEY_FILE);
  const created = !existsSync(file);
  if (created) writeFileSync(file, `${randomBytes(24).toString('base64url')}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  const key = readFileSync(file, 'utf8').trim();
  return { key: { key, tenantId: DEV_TENANT, scopes: new Set(SCOPES) }, file, created };
}
