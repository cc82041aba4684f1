/**
 * The catalogue as one discriminated union, and the one validator for the write path.
 */
import type { ClassConstructor } from 'class-transformer';
import { getMetadataStorage, validateSync, type ValidationError } from 'class-validator';
import {
  AppendRejectedData,
  ApprovalRequestedData,
  ApprovalResolvedData,
  MessageAddedData,
  ModelCallData,
  ModelMessage,
  RunFinishedData,
  RunStartedData,
  ToolFinishedData,
  ToolStartedData,
  TranscriptAddedData,
  TruncationStamp,
  TurnFinishedData,
  TurnStartedData,
  TurnSteeredData,
} from './event-data.dto';
import { EVENT_TYPES, isEventType, type EventType } from './event-types';
import { runInSlices, runToEnd, type SliceClock } from './time-slices';
import { isPlainObject } from './plain-object';

export interface EventDataByType {
  'run.started': RunStartedData;
  'run.finished': RunFinishedData;
  'turn.started': TurnStartedData;
  'turn.finished': TurnFinishedData;
  'turn.steered': TurnSteeredData;
  'message.added': MessageAddedData;
  'transcript.added': TranscriptAddedData;
  'model.call': ModelCallData;
  'tool.started': ToolStartedData;
  'tool.finished': ToolFinishedData;
  'approval.requested': ApprovalRequestedData;
  'approval.resolved': ApprovalResolvedData;
  'append.rejected': AppendRejectedData;
}

/** Exhaustive by construction: a type added to EVENT_TYPES without a schema fails to compile. */
export const EVENT_SCHEMAS: { [K in EventType]: ClassConstructor<EventDataByType[K]> } = {
  'run.started': RunStartedData,
  'run.finished': RunFinishedData,
  'turn.started': TurnStartedData,
  'turn.finished': TurnFinishedData,
  'turn.steered': TurnSteeredData,
  'message.added': MessageAddedData,
  'transcript.added': TranscriptAddedData,
  'model.call': ModelCallData,
  'tool.started': ToolStartedData,
  'tool.finished': ToolFinishedData,
  'approval.requested': ApprovalRequestedData,
  'approval.resolved': ApprovalResolvedData,
  'append.rejected': AppendRejectedData,
};

export type EventOf<K extends EventType> = {
  id: string;
  type: K;
  data: EventDataByType[K];
  metadata: Record<string, unknown>;
};

/** A validated event ready to be recorded. */
export type RunEvent = { [K in EventType]: EventOf<K> }[EventType];

export interface Problem {
  /** Index of the event in the batch, when the problem belongs to one event. */
  index?: number;
  field: string;
  rule: string;
  message: string;
}

export type Validated<T> = { ok: true; value: T } | { ok: false; problems: Problem[] };

const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const ENVELOPE_FIELDS = new Set(['id', 'type', 'data', 'metadata']);

export { isPlainObject };

/**
 * Tool arguments that are not an object (null, arrays, numbers, unparsable strings) are kept
 * under `{ raw }` rather than passed on as an input the typed surface could never produce.
 */
export function normalizeToolInput(input: unknown): Record<string, unknown> {
  return isPlainObject(input) ? input : { raw: input };
}

function normalizeData(type: EventType, data: Record<string, unknown>): Record<string, unknown> {
  if ((type === 'tool.started' || type === 'approval.requested') && 'input' in data) {
    return { ...data, input: normalizeToolInput(data.input) };
  }
  return data;
}

/**
 * class-transformer skips keys naming Object.prototype members (`constructor`, `toString`…),
 * so the whitelist never sees them, while the plain data is what gets stored.
 */
function prototypeKeys(value: unknown, field: string, index: number | undefined): Problem[] {
  if (!isPlainObject(value)) return [];
  return Object.keys(value)
    .filter((key) => key in Object.prototype)
    .map((key) => ({
      index,
      field: `${field}.${key}`,
      rule: 'whitelistValidation',
      message: `${field}.${key} is not allowed`,
    }));
}

/** Unknown keys of the schema-shaped objects of an event's data, when one holds too many. */
function excessKeyProblemsOf(
  type: EventType,
  data: Record<string, unknown>,
  index: number | undefined,
): Problem[] {
  const problems = excessKeyProblems(
    EVENT_SCHEMAS[type] as ClassConstructor<object>,
    data,
    'data',
    index,
  );
  if (type === 'model.call' && Array.isArray(data.messages)) {
    data.messages.forEach((m: unknown, i) => {
      if (!isPlainObject(m)) return;
      for (const problem of excessKeyProblems(ModelMessage, m, `data.messages.${i}`, index)) {
        problems.push(problem);
      }
    });
  }
  return problems;
}

/** The schema-shaped objects of an event's data: the data itself, its stamp, model messages. */
function schemaKeyProblems(data: Record<string, unknown>, index: number | undefined): Problem[] {
  const problems = prototypeKeys(data, 'data', index);
  problems.push(...prototypeKeys(data.truncation, 'data.truncation', index));
  if (Array.isArray(data.messages)) {
    data.messages.forEach((m, i) =>
      problems.push(...prototypeKeys(m, `data.messages.${i}`, index)),
    );
  }
  return problems;
}

/**
 * No schema declares this many fields: an object with more has unknown keys. They are named
 * without class-validator, whose cost grows with every key (thousands of unknown keys held
 * the event loop for hundreds of milliseconds there); the request is refused all the same.
 */
export const MAX_SCHEMA_FIELDS = 32;

const declaredFieldsCache = new Map<ClassConstructor<object>, ReadonlySet<string>>();

function declaredFields(schema: ClassConstructor<object>): ReadonlySet<string> {
  let fields = declaredFieldsCache.get(schema);
  if (!fields) {
    const metadata = getMetadataStorage().getTargetValidationMetadatas(schema, '', true, false);
    fields = new Set(metadata.map((m) => m.propertyName));
    declaredFieldsCache.set(schema, fields);
  }
  return fields;
}

/**
 * When `value` holds more than MAX_SCHEMA_FIELDS keys, its keys `schema` does not declare,
 * each as the whitelist would name it; otherwise none (class-validator decides).
 */
export function excessKeyProblems(
  schema: ClassConstructor<object>,
  value: Record<string, unknown>,
  field: string,
  index?: number,
): Problem[] {
  const keys = Object.keys(value);
  if (keys.length <= MAX_SCHEMA_FIELDS) return [];
  const declared = declaredFields(schema);
  return keys
    .filter((key) => !declared.has(key))
    .map((key) => ({
      index,
      field: `${field}.${key}`,
      rule: 'whitelistValidation',
      message: `${field}.${key} is not allowed`,
    }));
}

export const MAX_JSON_DEPTH = 64;

/**
 * What JSON.parse accepts but the log must not record: numbers it read as Infinity (`1e309`),
 * and nesting deeper than MAX_JSON_DEPTH (which would overflow the stack of every recursive
 * step after it: validation, canonical JSON, hashing). Reports the first problem found.
 */
export function jsonValueProblems(value: unknown, field: string, index?: number): Problem[] {
  const notFinite = (path: string): Problem[] => [
    { index, field: path, rule: 'isFinite', message: `${path} must be a finite number` },
  ];
  if (typeof value === 'number' && !Number.isFinite(value)) return notFinite(field);
  if (value === null || typeof value !== 'object') return [];
  // Paths are spelt only for a problem: a value of a million numbers is walked without
  // building a million strings, and only containers take a place on the stack.
  const stack: Place[] = [{ value, parent: null, key: field, depth: 0 }];
  while (stack.length > 0) {
    const place = stack.pop()!;
    if (place.depth >= MAX_JSON_DEPTH) {
      const path = pathOf(place);
      const message = `${path} is nested deeper than ${MAX_JSON_DEPTH} levels`;
      return [{ index, field: path, rule: 'maxDepth', message }];
    }
    const entries: Iterable<[string | number, unknown]> = Array.isArray(place.value)
      ? place.value.entries()
      : Object.entries(place.value as Record<string, unknown>);
    for (const [key, item] of entries) {
      if (typeof item === 'number' && !Number.isFinite(item)) {
        return notFinite(`${pathOf(place)}.${key}`);
      }
      if (item !== null && typeof item === 'object') {
        stack.push({ value: item, parent: place, key, depth: place.depth + 1 });
      }
    }
  }
  return [];
}

interface Place {
  value: unknown;
  parent: Place | null;
  key: string | number;
  depth: number;
}

function pathOf(place: Place): string {
  const keys: (string | number)[] = [];
  for (let at: Place | null = place; at !== null; at = at.parent) keys.push(at.key);
  return keys.reverse().join('.');
}

/**
 * A schema instance over plain data, built by hand: own properties defined (never assigned,
 * so a `__proto__` key stays a plain key for the whitelist to refuse), and only the declared
 * nested schemas (the stamp, model messages) turned into instances. class-transformer is not
 * used: it recurses into free-form values (tool input, output) and fails on some of them.
 */
export function shallowInstance<T extends object>(
  schema: ClassConstructor<T>,
  value: Record<string, unknown>,
): T {
  const instance = Object.create(schema.prototype) as T;
  for (const key of Object.keys(value)) {
    Object.defineProperty(instance, key, {
      value: value[key],
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return instance;
}

/**
 * The event's data as a schema instance, for everything but a model call's messages, which
 * `messageProblems` validates one at a time: a call may hold tens of thousands of them.
 */
function schemaInstance(type: EventType, data: Record<string, unknown>): object {
  const instance = shallowInstance(EVENT_SCHEMAS[type] as ClassConstructor<object>, data) as Record<
    string,
    unknown
  >;
  if (isPlainObject(data.truncation))
    instance.truncation = shallowInstance(TruncationStamp, data.truncation);
  if (type === 'model.call' && Array.isArray(data.messages)) instance.messages = [];
  return instance;
}

const STRICT = { whitelist: true, forbidNonWhitelisted: true, forbidUnknownValues: true };

/** A model call's messages, each against its schema; yields after each, for a slicing driver. */
function* messageProblems(
  messages: unknown[],
  index: number | undefined,
): Generator<void, Problem[]> {
  const problems: Problem[] = [];
  for (const [i, message] of messages.entries()) {
    const field = `data.messages.${i}`;
    if (!isPlainObject(message)) {
      problems.push({ index, field, rule: 'isObject', message: `${field} must be an object` });
    } else {
      const errors = validateSync(shallowInstance(ModelMessage, message), STRICT);
      for (const problem of flatten(errors, field, index)) problems.push(problem);
    }
    yield;
  }
  return problems;
}

/**
 * A required field left out (or null) fails every rule on it: its type, not blank, its length.
 * Listed whole, a client showing the first problem told of a length; it is told the field is
 * required. The one rule of a field, or rules that all say the same (a failed call's
 * errorText, "required when failed is true"), already say what is wrong, and are kept.
 */
function constraintsOf(error: ValidationError, field: string): [string, string][] {
  const constraints = Object.entries(error.constraints ?? {});
  const missing = error.value === undefined || error.value === null;
  if (!missing || new Set(constraints.map(([, message]) => message)).size <= 1) return constraints;
  return [['isDefined', `${field} is required`]];
}

function flatten(errors: ValidationError[], prefix: string, index: number | undefined): Problem[] {
  const problems: Problem[] = [];
  for (const error of errors) {
    const field = `${prefix}.${error.property}`;
    const worded = new Set<string>();
    for (const [rule, message] of constraintsOf(error, field)) {
      const wording = rule === 'whitelistValidation' ? `${field} is not allowed` : message;
      // Two rules may say the same (a failed call's missing errorText fails both of its rules).
      if (worded.has(wording)) continue;
      worded.add(wording);
      problems.push({ index, field, rule, message: wording });
    }
    // A loop, not push(...): a spread of many thousand problems overflows the call stack.
    for (const child of flatten(error.children ?? [], field, index)) problems.push(child);
  }
  return problems;
}

/**
 * Validates one event of a batch against its strict schema. Unknown types and unexpected
 * envelope fields are problems like any other; `index` places them in the batch.
 */
/** A validated event as the client sent it: the server assigns a missing id. */
export type ValidEvent = { [K in EventType]: Omit<EventOf<K>, 'id'> & { id?: string } }[EventType];

export function validateEvent(input: unknown, index?: number): Validated<ValidEvent> {
  return runToEnd(validation(input, index));
}

/**
 * `validateEvent`, giving the event loop a turn whenever `clock`'s slice has run: between the
 * messages of a model call, so no single event holds the loop for its whole length.
 */
export function validateEventInSlices(
  input: unknown,
  index: number | undefined,
  clock: SliceClock,
): Promise<Validated<ValidEvent>> {
  return runInSlices(validation(input, index), clock);
}

function* validation(
  input: unknown,
  index: number | undefined,
): Generator<void, Validated<ValidEvent>> {
  const at = (field: string, rule: string, message: string): Problem => ({
    index,
    field,
    rule,
    message,
  });
  if (!isPlainObject(input))
    return { ok: false, problems: [at('event', 'isObject', 'event must be an object')] };
  const problems: Problem[] = [];
  for (const key of Object.keys(input)) {
    if (!ENVELOPE_FIELDS.has(key))
      problems.push(at(key, 'whitelistValidation', `${key} is not allowed`));
  }
  const { id, type, data, metadata } = input;
  if (id !== undefined && (typeof id !== 'string' || !UUID_PATTERN.test(id))) {
    problems.push(at('id', 'isUuid', 'id must be a UUID'));
  }
  if (metadata !== undefined && !isPlainObject(metadata)) {
    problems.push(at('metadata', 'isObject', 'metadata must be an object'));
  }
  if (!isEventType(type)) {
    const message = `type must be one of: ${EVENT_TYPES.join(', ')}`;
    problems.push(at('type', 'isEventType', message));
    return { ok: false, problems };
  }
  if (!isPlainObject(data)) {
    problems.push(at('data', 'isObject', 'data must be an object'));
    return { ok: false, problems };
  }
  const shapeProblems = [
    ...jsonValueProblems(data, 'data', index),
    ...jsonValueProblems(metadata ?? {}, 'metadata', index),
  ];
  if (shapeProblems.length > 0) return { ok: false, problems: [...problems, ...shapeProblems] };
  const normalized = normalizeData(type, data);
  // Before any instance exists: an own `constructor` key would mislead the validator itself.
  const keyProblems = schemaKeyProblems(normalized, index);
  for (const problem of excessKeyProblemsOf(type, normalized, index)) keyProblems.push(problem);
  if (keyProblems.length > 0) return { ok: false, problems: [...problems, ...keyProblems] };
  const instance = schemaInstance(type, normalized);
  const errors = validateSync(instance, STRICT);
  for (const problem of flatten(errors, 'data', index)) problems.push(problem);
  if (type === 'model.call' && Array.isArray(normalized.messages)) {
    for (const problem of yield* messageProblems(normalized.messages, index))
      problems.push(problem);
  }
  if (problems.length > 0) return { ok: false, problems };
  return {
    ok: true,
    value: {
      // A UUID is read in either case and written lowercase (RFC 9562): one id, one spelling,
      // so a retry in capitals is the same event, not a second one.
      ...(id === undefined ? {} : { id: (id as string).toLowerCase() }),
      type,
      data: normalized,
      metadata: (metadata as Record<string, unknown> | undefined) ?? {},
    } as unknown as ValidEvent,
  };
}
