/**
 * The acting user of a request, the one reading of who acts: for rate budgets, for who
 * decided an approval, for whom a receipt is. A key that is a user acts as that user. Only a
 * trusted gateway key (scope `act-as`) may name the user, in `X-Runledger-User` as
 * percent-encoded UTF-8 (`%C5%81ukasz`) or in `X-Runledger-User*` as RFC 8187
 * (`UTF-8''%C5%81ukasz`); any other key naming a user is refused 403, so a client cannot
 * pick who it is. A call naming no user acts as the key's own user, or as the key itself.
 */
import { decodeUser, USER_NAME_RULE } from '../config/config';
import { ApiError } from '../http/api-error';
import type { Actor, Principal } from './principal';

export const USER_HEADER = 'x-runledger-user';
export const USER_HEADER_EXTENDED = 'x-runledger-user*';

/**
 * `headers`: every header's values as sent (node's `headersDistinct`), so a header sent twice
 * is seen twice rather than joined into one name with a comma.
 */
export function actorOf(
  principal: Principal,
  headers: Record<string, string[] | undefined>,
): Actor {
  const sent = [...(headers[USER_HEADER] ?? []), ...(headers[USER_HEADER_EXTENDED] ?? [])];
  // A blank header names no one, like an absent one: the key acts as itself. A key that may
  // not name users is refused before anything else about the header is looked at.
  if (sent.some((value) => value.trim() !== '')) {
    if (!principal.scopes.has('act-as')) {
      throw new ApiError(
        403,
        'forbidden',
        'this API key may not name the acting user: X-Runledger-User needs a gateway key with the act-as scope',
      );
    }
    const plain = single(headers[USER_HEADER], 'X-Runledger-User')?.trim() || undefined;
    const extended =
      single(headers[USER_HEADER_EXTENDED], 'X-Runledger-User*')?.trim() || undefined;
    if (plain !== undefined && extended !== undefined) {
      throw invalid('X-Runledger-User', 'send X-Runledger-User or X-Runledger-User*, not both');
    }
    const name = plain !== undefined ? decodeUser(plain) : decodeExtended(extended!);
    if (name === null) {
      const field = plain !== undefined ? 'X-Runledger-User' : 'X-Runledger-User*';
      const rule =
        plain !== undefined
          ? `X-Runledger-User must be ${USER_NAME_RULE}`
          : `X-Runledger-User* must be RFC 8187 UTF-8''<${USER_NAME_RULE}>`;
      throw invalid(field, rule);
    }
    return { kind: 'user', name };
  }
  if (principal.user !== undefined) return { kind: 'user', name: principal.user };
  return { kind: 'service', name: `key:${principal.keyId}` };
}

/** RFC 8187 ext-value with the UTF-8 charset: `UTF-8'<language>'<percent-encoded>`. */
function decodeExtended(value: string): string | null {
  const match = /^utf-8'[A-Za-z0-9-]*'(.+)$/i.exec(value);
  return match ? decodeUser(match[1]) : null;
}

/** A repeated header names two users: refused rather than joined into one name. */
function single(values: string[] | undefined, field: string): string | undefined {
  if (values !== undefined && values.length > 1) throw invalid(field, `${field} may be sent once`);
  return values?.[0];
}

function invalid(field: string, rule: string): ApiError {
  return new ApiError(400, 'validation_failed', rule, [{ field, rule: 'isUser', message: rule }]);
}
