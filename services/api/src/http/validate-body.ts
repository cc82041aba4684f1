/**
 * Validates a command's JSON body against a class-validator schema: strict whitelist, no
 * coercion. A bad body is a 400 naming each field and rule; nothing is done.
 */
import type { ClassConstructor } from 'class-transformer';
import { validateSync, type ValidationError } from 'class-validator';
import {
  excessKeyProblems,
  isPlainObject,
  jsonValueProblems,
  shallowInstance,
  type Problem,
} from '@runledger/domain';
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
  const shape = jsonValueProblems(body, 'body');
  // Keys named like Object.prototype members are refused before an instance exists: an own
  // `constructor` would mislead the validator itself.
  for (const key of Object.keys(body)) {
    if (key in Object.prototype) {
      shape.push({ field: key, rule: 'whitelistValidation', message: `${key} is not allowed` });
    }
  }
  for (const problem of excessKeyProblems(schema, body, 'body')) shape.push(problem);
  if (shape.length > 0)
    throw new ApiError(400, 'validation_failed', 'the request is invalid', shape);
  const instance = shallowInstance(schema, body);
  const problems = problemsOf(
    validateSync(instance, {
      whitelist: true,
      forbidNonWhitelisted: true,
      forbidUnknownValues: true,
    }),
  );
  if (problems.length > 0)
    throw new ApiError(400, 'validation_failed', 'the request is invalid', problems);
  return instance;
}
