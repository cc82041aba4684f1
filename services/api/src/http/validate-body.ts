/**
 * Validates a command's JSON body against a class-validator schema: strict whitelist, no
 * coercion. A bad body is a 400 naming each field and rule; nothing is done.
 */
import { plainToInstance, type ClassConstructor } from 'class-transformer';
import { validateSync, type ValidationError } from 'class-validator';
import { isPlainObject, type Problem } from '@runledger/domain';
import { ApiError } from './api-error';

function problemsOf(errors: ValidationError[], prefix = ''): Problem[] {
  return errors.flatMap((error) => {
    const field = `${prefix}${error.property}`;
    const own = Object.entries(error.constraints ?? {}).map(([rule, message]) => ({
      field,
      rule,
      message: rule === 'whitelistValidation' ? `${field} is not allowed` : message,
    }));
    return [...own, ...problemsOf(error.children ?? [], `${field}.`)];
  });
}

export function validateBody<T extends object>(schema: ClassConstructor<T>, body: unknown): T {
  if (!isPlainObject(body)) {
    throw new ApiError(400, 'validation_failed', 'the body must be a JSON object', [
      { field: 'body', rule: 'isObject', message: 'the body must be a JSON object' },
    ]);
  }
  const instance = plainToInstance(schema, body);
  const problems = problemsOf(
    validateSync(instance, {
      whitelist: true,
      forbidNonWhitelisted: true,
      forbidUnknownValues: true,
    }),
  );
  for (const key of Object.keys(body)) {
    // class-transformer drops keys named like Object.prototype members before validation sees them.
    if (key in Object.prototype)
      problems.push({ field: key, rule: 'whitelistValidation', message: `${key} is not allowed` });
  }
  if (problems.length > 0)
    throw new ApiError(400, 'validation_failed', 'the request is invalid', problems);
  return instance;
}
