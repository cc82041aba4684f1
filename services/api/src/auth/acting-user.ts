/**
 * The acting user of a request: the client's `X-Runledger-User` when it names one, else the
 * API key itself. The one reading of that header, for rate budgets and for who decided.
 */
import { ApiError } from '../http/api-error';
import type { Principal } from './principal';

export const USER_HEADER = 'x-runledger-user';
export const USER_HEADER_MAX = 128;

/** C0 and C1 controls and DEL; Node's parser already refuses most of them, not a tab. */
function hasControlCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i += 1) {
    const code = text.charCodeAt(i);
    if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) return true;
  }
  return false;
}

/** `u:<name>` from the header, or `k:<key id>`: the prefixes keep the two from colliding. */
export function actingUser(principal: Principal, header: string | string[] | undefined): string {
  const raw = Array.isArray(header) ? header.join(', ') : header;
  const user = raw?.trim() ?? '';
  if (user === '') return `k:${principal.keyId}`;
  if (user.length > USER_HEADER_MAX || hasControlCharacter(user)) {
    const rule = `X-Runledger-User must be at most ${USER_HEADER_MAX} printable characters`;
    throw new ApiError(400, 'validation_failed', rule, [
      { field: 'X-Runledger-User', rule: 'isPrintable', message: rule },
    ]);
  }
  return `u:${user}`;
}
