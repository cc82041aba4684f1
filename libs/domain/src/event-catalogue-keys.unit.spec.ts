/**
 * Keys JSON carries but a class-based validator reads specially (`constructor`, `toString`),
 * ids that only contain a UUID, and the types only the server writes.
 */
import { MAX_SCHEMA_FIELDS, validateEvent, type Problem } from './event-catalogue';
import { SERVER_ONLY_TYPES } from './event-types';
import { exampleEvent } from './testing/event-fixtures';

const UUID = '0b7c6c1e-3f0a-4d8e-9a51-2f4c9f0e7d21';

function problemsOf(input: unknown): Problem[] {
  const result = validateEvent(input, 1);
  return result.ok ? [] : result.problems;
}

describe('validateEvent: keys named after Object.prototype members', () => {
  it('refuses one in data, naming the field and the rule', () => {
    const example = exampleEvent('message.added');
    const data = JSON.parse(`{"constructor": 1, "role": "user"}`) as Record<string, unknown>;
    expect(problemsOf({ ...example, data: { ...example.data, ...data } })).toEqual([
      {
        index: 1,
        field: 'data.constructor',
        rule: 'whitelistValidation',
        message: 'data.constructor is not allowed',
      },
    ]);
  });

  it('refuses one in the truncation stamp, naming the stamp', () => {
    const example = exampleEvent('message.added');
    const truncation = JSON.parse('{"toString": 1}') as unknown;
    expect(problemsOf({ ...example, data: { ...example.data, truncation } })).toEqual([
      expect.objectContaining({
        field: 'data.truncation.toString',
        rule: 'whitelistValidation',
        message: 'data.truncation.toString is not allowed',
      }),
    ]);
  });
});

describe('validateEvent: data with up to MAX_SCHEMA_FIELDS keys', () => {
  it('names its unknown keys beside every broken rule of its declared fields', () => {
    const example = exampleEvent('turn.started');
    const data: Record<string, unknown> = { ...example.data, turnId: 5 };
    for (let i = 0; Object.keys(data).length < MAX_SCHEMA_FIELDS; i += 1) data[`extra${i}`] = i;
    const problems = problemsOf({ ...example, data });
    expect(problems.map((p) => p.field)).toContain('data.turnId');
    expect(problems.map((p) => p.field)).toContain('data.extra0');
  });
});

describe('validateEvent: the id', () => {
  it('refuses a UUID after other text', () => {
    expect(problemsOf({ ...exampleEvent('turn.started'), id: `evt-${UUID}` })).toEqual([
      { index: 1, field: 'id', rule: 'isUuid', message: 'id must be a UUID' },
    ]);
  });
});

describe('SERVER_ONLY_TYPES', () => {
  it('are the steer, the resolution and the rejection: what only server commands write', () => {
    expect([...SERVER_ONLY_TYPES].sort()).toEqual([
      'append.rejected',
      'approval.resolved',
      'turn.steered',
    ]);
  });
});
