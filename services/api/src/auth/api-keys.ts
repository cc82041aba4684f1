/**
 * The key table the guard consults. Keys are compared by their SHA-256, so a lookup takes
 * the same path whatever the presented key shares with a real one.
 */
import { randomBytes } from 'node:crypto';
import { sha256Hex } from '@runledger/domain';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SCOPES, type ApiKey } from '../config/config';
import type { Principal } from './principal';

export const DEV_TENANT = 'dev';
export const DEV_KEY_FILE = 'dev-api-key';

export class ApiKeyTable {
  private readonly byDigest = new Map<string, Principal>();

  constructor(keys: readonly ApiKey[]) {
    for (const { key, tenantId, scopes, principal } of keys) {
      const keyDigest = digest(key);
      this.byDigest.set(keyDigest, {
        tenantId,
        scopes,
        keyId: keyDigest.slice(0, 16),
        ...(principal === undefined ? {} : { user: principal }),
      });
    }
  }

  resolve(presented: string): Principal | undefined {
    return this.byDigest.get(digest(presented));
  }
}

/** Below this many characters a key is guessable; it still works, with a warning at start-up. */
export const SHORT_KEY_LENGTH = 16;

/** The start-up warning for configured keys short enough to guess, naming their tenants. */
export function shortKeyWarning(keys: readonly ApiKey[]): string | null {
  const tenants = [
    ...new Set(keys.filter((k) => k.key.length < SHORT_KEY_LENGTH).map((k) => k.tenantId)),
  ];
  if (tenants.length === 0) return null;
  return `warning: RUNLEDGER_API_KEYS holds keys shorter than ${SHORT_KEY_LENGTH} characters (tenants ${tenants.join(', ')}): fine for a test, guessable anywhere else`;
}

function digest(key: string): string {
  return sha256Hex(key);
}

/**
 * A random secret kept in DATA_DIR (mode 0600) so it survives restarts: the development key,
 * the development receipt secret.
 */
export function provisionSecretFile(
  dataDir: string,
  name: string,
): { value: string; file: string; created: boolean } {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, name);
  const created = !existsSync(file);
  if (created) writeFileSync(file, `${randomBytes(24).toString('base64url')}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return { value: readFileSync(file, 'utf8').trim(), file, created };
}

/** With no RUNLEDGER_API_KEYS, a development key for tenant `dev` with every scope. */
export function provisionDevKey(dataDir: string): { key: ApiKey; file: string; created: boolean } {
  const { value, file, created } = provisionSecretFile(dataDir, DEV_KEY_FILE);
  return { key: { key: value, tenantId: DEV_TENANT, scopes: new Set(SCOPES) }, file, created };
}
