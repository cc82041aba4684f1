/**
 * Generates docs/events.md, the consumer's catalogue of run events, from the strict schemas
 * the write path validates with (libs/domain's DTO classes), their example data and the
 * catalogue's constants: nothing in it is written by hand, so it cannot drift.
 * `npm run events:docs` rewrites the file; `npm run events:check` (pretest) fails when the
 * committed file is not what the schemas say now.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { getMetadataStorage } from 'class-validator';
import type { ValidationMetadata } from 'class-validator/types/metadata/ValidationMetadata';
import {
  ACTIVE_TURN_STAMP,
  EVENT_SCHEMAS,
  EVENT_TYPES,
  ModelMessage,
  NOT_BLANK_PATTERN,
  PATH_ID_PATTERN,
  SERVER_ONLY_TYPES,
  TruncationStamp,
  type EventType,
} from '@runledger/domain';
import { EVENT_DATA_EXAMPLES } from '../libs/domain/src/testing/event-fixtures';

const OUTPUT = join(__dirname, '..', 'docs', 'events.md');

/** What each type records and when it is written; the schema says the rest. */
const PURPOSE: { [K in EventType]: string } = {
  'run.started':
    'The first event of a run: names its thread (sent only here; the server stamps it on every later event). A second `run.started` is a 409.',
  'run.finished':
    'The last event of a run; later appends answer 409. Tool parts still running end as `output-error` ("the run ended first").',
  'turn.started': 'A turn begins. At most one turn is active per run.',
  'turn.finished': 'The active turn ends.',
  'turn.steered':
    'An instruction delivered into the active turn. Written only by `POST /v1/runs/{runId}/steer`, which checks `expectedTurnId` first.',
  'message.added': 'A typed chat message.',
  'transcript.added': 'A spoken turn (voice). The text must not be blank.',
  'model.call':
    'The context of a model call, recorded before the call is dispatched. Size-gated and fail-closed: an oversize call is recorded reduced and the append answers 413 with `dispatch: "refused"`.',
  'tool.started':
    'A tool call begins: creates the tool part as running. Input that is not a JSON object is kept as `{ "raw": <value> }`.',
  'tool.finished':
    'The same tool call ends: moves its part to `output-available`, or `output-error` when `failed`. A finish with no start records the call beside its output.',
  'approval.requested': 'A tool call waits for a person: the thread becomes `blocked`.',
  'approval.resolved':
    'The decision on an approval. Written only by `POST /v1/runs/{runId}/approvals/{approvalId}/resolve`, with the policy re-evaluated at that moment. The bearer receipt goes to the resolver only: the log keeps its id and digest.',
  'append.rejected':
    'Audit marker the server writes when a request body was too large to read (over `BODY_MAX_BYTES`).',
};

type Rule = Pick<ValidationMetadata, 'type' | 'name' | 'constraints' | 'each' | 'constraintCls'>;

interface Field {
  name: string;
  required: boolean;
  type: string;
  rules: string[];
}

const storage = getMetadataStorage();

function metadataOf(target: new () => object): ValidationMetadata[] {
  return storage.getTargetValidationMetadatas(target, '', true, false);
}

/** A custom constraint (`@Validate(SomeConstraint)`) is named on its class's metadata. */
function customName(rule: Rule): string | undefined {
  if (rule.type !== 'customValidation') return undefined;
  return storage.getTargetValidatorConstraints(rule.constraintCls)[0]?.name;
}

/** class-validator's type for @IsOptional and @ValidateIf. */
const CONDITIONAL = 'conditionalValidation';

/** One property's decorators, in words a consumer of the JSON reads. */
function describeField(name: string, rules: Rule[]): Field {
  const named = (n: string) => rules.find((r) => r.name === n || customName(r) === n);
  const conditional = rules.some((r) => r.type === CONDITIONAL);
  let type = 'any JSON value';
  if (named('isString')) type = 'string';
  if (named('isInt')) type = 'integer';
  if (named('isBoolean')) type = 'boolean';
  if (named('isObject')) type = 'object';
  if (named('isIn')) {
    type = (named('isIn')!.constraints[0] as readonly string[])
      .map((v) => `\`${v}\``)
      .join(' \\| ');
  }
  if (named('isArray')) type = named('isObject')?.each ? 'array of objects' : 'array';
  if (named('isArray') && named('isString')?.each) type = 'array of strings';
  if (rules.some((r) => r.type === 'nestedValidation')) {
    type =
      name === 'messages'
        ? 'array of [messages](#model-messages)'
        : '[truncation stamp](#truncation)';
  }
  if (named('isMessageContent')) type = 'string, or array of parts (objects with a string `type`)';
  const described: string[] = [];
  if (
    named('isNotEmpty') ||
    rules.some((r) => r.name === 'matches' && r.constraints[0] === NOT_BLANK_PATTERN)
  ) {
    described.push('not blank');
  }
  if (named('isWellFormed')) described.push('no lone surrogate');
  const maxLength = named('maxLength');
  if (maxLength) described.push(`at most ${String(maxLength.constraints[0])} characters`);
  const min = named('min');
  if (min) described.push(`≥ ${String(min.constraints[0])}`);
  const maxItems = named('arrayMaxSize');
  if (maxItems) described.push(`at most ${String(maxItems.constraints[0])} items`);
  const pattern = rules.find((r) => r.name === 'matches' && r.constraints[0] !== NOT_BLANK_PATTERN);
  if (pattern) described.push(`matches \`${String(pattern.constraints[0])}\``);
  if (conditional && named('isString') && !rules.some((r) => r.name === 'isOptional')) {
    described.push('required when `failed` is true');
  }
  const optional = rules.some(
    (r) => r.type === CONDITIONAL && (r.name === 'isOptional' || r.name === undefined),
  );
  // `@Allow()` alone: any value, or none.
  const allowedOnly = rules.every((r) => r.type === 'whitelistValidation');
  return { name, required: !optional && !conditional && !allowedOnly, type, rules: described };
}

function fieldsOf(target: new () => object): Field[] {
  const byProperty = new Map<string, Rule[]>();
  for (const rule of metadataOf(target)) {
    byProperty.set(rule.propertyName, [...(byProperty.get(rule.propertyName) ?? []), rule]);
  }
  return [...byProperty].map(([name, rules]) => describeField(name, rules));
}

function fieldTable(fields: Field[], serverOnly: ReadonlySet<string> = new Set()): string {
  const rows = fields.map((f) => {
    const notes = [...f.rules, ...(serverOnly.has(f.name) ? ['server-stamped: leave it out'] : [])];
    return `| \`${f.name}\` | ${f.required ? 'yes' : 'no'} | ${f.type} | ${notes.join('; ')} |`;
  });
  return ['| field | required | type | rules |', '| --- | --- | --- | --- |', ...rows].join('\n');
}

export function renderEventCatalogue(): string {
  const sections = EVENT_TYPES.map((type) => {
    const who = SERVER_ONLY_TYPES.has(type)
      ? '**Server-only type**: the public append path refuses it with 403.'
      : 'Appended by agent runtimes through `POST /v1/runs/{runId}/events`.';
    const example = { type, data: EVENT_DATA_EXAMPLES[type] };
    return [
      `### \`${type}\``,
      '',
      PURPOSE[type],
      '',
      who,
      '',
      fieldTable(fieldsOf(EVENT_SCHEMAS[type]), new Set(['truncation'])),
      '',
      'Example:',
      '',
      '```json',
      JSON.stringify(example, null, 2),
      '```',
    ].join('\n');
  });
  return `<!-- Generated by scripts/event-docs.ts from libs/domain's schemas: do not edit by hand.
     Run \`npm run events:docs\` after changing a schema; \`npm run events:check\` is part of npm test. -->

# Run events (catalogue v1)

Every event a run records, as the write path validates it and as consumers receive it:
over HTTP (\`GET /v1/runs/{runId}/events\`, \`/replay\`, the SSE streams), and on Kafka as
\`runledger.v1.RunEvent\` (\`proto/runledger/v1/run_event.proto\`), whose \`data\` is this JSON.

## The envelope

| field | who sets it | meaning |
| --- | --- | --- |
| \`id\` | client (or server when absent) | UUID; re-sending the same id with the same content is idempotent, with other content a 409. Unique within its tenant: dedupe by tenant and id. |
| \`type\` | client | one of the types below; an unknown type is a 400 |
| \`data\` | client | the type's fields below; unknown fields are a 400 (strict schemas) |
| \`metadata\` | client, then server | free-form JSON object; the server overwrites the keys below |
| \`revision\` | server | 0-based index of the event in its run |
| \`position\` | server | global log position: strictly increasing, the order every reader sees |
| \`recordedAt\` | server | ISO-8601 time the event was recorded |

Server-stamped \`metadata\` keys (a client's value is replaced):
\`tenantId\` (from the API key), \`runId\`, \`threadId\` (from the run's \`run.started\`),
\`${ACTIVE_TURN_STAMP}\` (the run's active turn, absent when none), and the hash chain's
\`prevHash\` and \`hash\` (SHA-256 over \`prevHash\` and the canonical JSON of id, type, data,
revision, tenant and run; \`GET /v1/runs/{runId}/audit\` and \`runledger verify\` recompute it).

## Limits

- An event's canonical JSON is at most \`EVENT_MAX_BYTES\` (default 1 MiB). A larger one is
  reduced to fit and recorded with \`data.truncation\` (below); \`model.call\` then answers 413.
- A request body is at most \`BODY_MAX_BYTES\` (default 32 MiB), a batch at most
  \`MAX_EVENTS_PER_APPEND\` events (default 1000). A batch is validated whole and appended
  atomically: one bad event rejects it with a 400 naming each problem.
- Ids are non-blank strings of at most 256 characters, with no lone surrogate (a read model's
  text column could not keep one); \`threadId\` (it appears in URLs) matches
  \`${String(PATH_ID_PATTERN)}\`. Names and labels are at most 1024 characters.
- Server-only types (\`${[...SERVER_ONLY_TYPES].join('`, `')}\`) are refused on the public append path (403).

## <a id="truncation"></a>The truncation stamp

Any event's \`data.truncation\` is **server-stamped** when the event was reduced to fit; a
reduced record can never be mistaken for a faithful one. Never send it: an append that
carries one is refused (400, rule \`serverOnly\`), so no client can make a record look reduced.

${fieldTable(fieldsOf(TruncationStamp))}

## <a id="model-messages"></a>Model messages

Each element of \`model.call\`'s \`messages\`:

${fieldTable(fieldsOf(ModelMessage))}

## Types

${sections.join('\n\n')}
`;
}

function main(argv: string[]): number {
  const text = renderEventCatalogue();
  if (argv.includes('--check')) {
    const current = readFileSync(OUTPUT, 'utf8');
    if (current !== text) {
      console.error(
        'events-check: docs/events.md is stale; run `npm run events:docs` and commit the result',
      );
      return 1;
    }
    console.log('events-check: docs/events.md is current');
    return 0;
  }
  writeFileSync(OUTPUT, text);
  console.log(`wrote ${OUTPUT}`);
  return 0;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));
