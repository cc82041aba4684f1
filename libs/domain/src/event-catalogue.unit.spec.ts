/**
 * The write-path validator's envelope rules (id, type, metadata, nothing else) and the
 * normalization of tool input. The per-type data schemas are in event-data.dto.unit.spec.ts.
 */
import {
  isPlainObject,
  jsonValueProblems,
  MAX_JSON_DEPTH,
  normalizeToolInput,
  validateEvent,
  validateEventInSlices,
  type Problem,
  type Validated,
  type ValidEvent,
} from './event-catalogue';
import { EVENT_TYPES, isEventType } from './event-types';
import { exampleEvent } from './testing/event-fixtures';
import { SliceClock } from './time-slices';

const UUID = '0b7c6c1e-3f0a-4d8e-9a51-2f4c9f0e7d21';

function problemsOf(result: Validated<ValidEvent>): Problem[] {
  if (result.ok) throw new Error(`expected problems, the event passed: ${JSON.stringify(result)}`);
  return result.problems;
}

describe('validateEvent: the envelope', () => {
  it('accepts id, type, data and metadata, and keeps them as sent', () => {
    // Given an event with every envelope field
    const event = { id: UUID, ...exampleEvent('message.added'), metadata: { traceId: 't-1' } };

    // When it is validated
    const result = validateEvent(event);

    // Then it passes unchanged
    expect(result).toEqual({ ok: true, value: event });
  });

  it('leaves a missing id unset (the server assigns one) and defaults metadata to {}', () => {
    const result = validateEvent(exampleEvent('message.added'));

    expect(result.ok && result.value).toEqual({ ...exampleEvent('message.added'), metadata: {} });
    expect(result.ok && 'id' in result.value).toBe(false);
  });

  it('reads an id in capitals as the same UUID, written lowercase', () => {
    const result = validateEvent({ id: UUID.toUpperCase(), ...exampleEvent('turn.started') });

    expect(result.ok && result.value.id).toBe(UUID);
  });

  it.each(['A0B7C6C1-3F0A-4D8E-9A51-2F4C9F0E7D21', UUID])('accepts the UUID %s', (id) => {
    expect(validateEvent({ id, ...exampleEvent('turn.started') }).ok).toBe(true);
  });

  it.each([
    ['a short string', 'evt-1'],
    ['a UUID without dashes', '0b7c6c1e3f0a4d8e9a512f4c9f0e7d21'],
    ['a UUID with a suffix', `${UUID}x`],
    ['a UUID in braces', `{${UUID}}`],
    ['an empty string', ''],
    ['a number', 42],
    ['null', null],
    ['a UUID in an array', [UUID]],
  ])('refuses an id that is %s, with rule isUuid', (_name, id) => {
    const problems = problemsOf(validateEvent({ id, ...exampleEvent('turn.started') }, 2));

    expect(problems).toEqual([
      { index: 2, field: 'id', rule: 'isUuid', message: 'id must be a UUID' },
    ]);
  });

  it.each([
    ['an array', []],
    ['a string', 'meta'],
    ['a number', 1],
    ['null', null],
  ])('refuses metadata that is %s, with rule isObject', (_name, metadata) => {
    const problems = problemsOf(validateEvent({ ...exampleEvent('turn.started'), metadata }));

    expect(problems).toEqual([
      {
        index: undefined,
        field: 'metadata',
        rule: 'isObject',
        message: 'metadata must be an object',
      },
    ]);
  });

  it.each(['revision', 'position', 'recordedAt', 'streamId', 'Type'])(
    'refuses the extra envelope field %s with rule whitelistValidation',
    (field) => {
      const problems = problemsOf(
        validateEvent({ ...exampleEvent('turn.started'), [field]: 1 }, 0),
      );

      expect(problems).toEqual([
        { index: 0, field, rule: 'whitelistValidation', message: `${field} is not allowed` },
      ]);
    },
  );

  it('reports every envelope problem of an event at once', () => {
    const event = { ...exampleEvent('turn.started'), id: 'nope', metadata: [], extra: true };

    const fields = problemsOf(validateEvent(event)).map((p) => p.field);

    expect(fields.sort()).toEqual(['extra', 'id', 'metadata']);
  });

  it.each([
    ['null', null],
    ['an array', [exampleEvent('turn.started')]],
    ['a string', 'turn.started'],
  ])('refuses an event that is %s', (_name, event) => {
    expect(problemsOf(validateEvent(event, 5))).toEqual([
      { index: 5, field: 'event', rule: 'isObject', message: 'event must be an object' },
    ]);
  });

  it.each([
    ['an unknown name', 'run.paused'],
    ['a differently cased name', 'Run.Started'],
    ['a class-like name', 'RunStarted'],
    ['missing', undefined],
    ['not a string', 7],
  ])('refuses a type that is %s, with rule isEventType', (_name, type) => {
    const problems = problemsOf(validateEvent({ type, data: {} }, 1));

    expect(problems).toEqual([
      {
        index: 1,
        field: 'type',
        rule: 'isEventType',
        message: `type must be one of: ${EVENT_TYPES.join(', ')}`,
      },
    ]);
  });

  it.each([
    ['missing', undefined],
    ['null', null],
    ['an array', []],
    ['a string', '{}'],
  ])('refuses data that is %s', (_name, data) => {
    expect(problemsOf(validateEvent({ type: 'turn.started', data }))).toEqual([
      { index: undefined, field: 'data', rule: 'isObject', message: 'data must be an object' },
    ]);
  });
});

describe('validateEvent: what each problem says', () => {
  it.each([
    ['run.started', 'agent'],
    ['run.started', 'threadId'],
    ['tool.started', 'toolCallId'],
  ] as const)(
    'names a required field of %s left out, or null, once as required: %s',
    (type, field) => {
      const required = [
        {
          index: 0,
          field: `data.${field}`,
          rule: 'isDefined',
          message: `data.${field} is required`,
        },
      ];
      const { [field]: _left, ...data }: Record<string, unknown> = { ...exampleEvent(type).data };
      expect(problemsOf(validateEvent({ type, data }, 0))).toEqual(required);
      expect(problemsOf(validateEvent({ type, data: { ...data, [field]: null } }, 0))).toEqual(
        required,
      );
    },
  );

  it('keeps the words of the one rule of a required field left out', () => {
    const { failed: _failed, ...data } = exampleEvent('tool.finished').data;
    const problems = problemsOf(validateEvent({ type: 'tool.finished', data }, 0));

    expect(problems).toEqual([
      {
        index: 0,
        field: 'data.failed',
        rule: 'isBoolean',
        message: 'failed must be a boolean value',
      },
    ]);
  });

  it('names a value of the wrong type by each rule it fails', () => {
    const data = { ...(exampleEvent('run.started').data as object), agent: 5 };
    const problems = problemsOf(validateEvent({ type: 'run.started', data }, 0));

    expect(problems.map((p) => p.rule).sort()).toEqual(['isString', 'matches', 'maxLength']);
    expect(problems.every((p) => p.field === 'data.agent')).toBe(true);
  });

  it('says once what two rules say alike: a failed call must give its errorText', () => {
    const data = { toolCallId: 'tc1', failed: true };
    const problems = problemsOf(validateEvent({ type: 'tool.finished', data }, 0));

    expect(problems).toEqual([
      {
        index: 0,
        field: 'data.errorText',
        rule: expect.any(String),
        message: 'errorText is required when failed is true',
      },
    ]);
  });
});

describe('isEventType', () => {
  it.each(EVENT_TYPES)('knows %s', (type) => {
    expect(isEventType(type)).toBe(true);
  });

  it.each(['', 'run', 'run.started ', 'toString', null, 1])('does not know %j', (value) => {
    expect(isEventType(value)).toBe(false);
  });
});

describe('tool input normalization', () => {
  const NON_OBJECTS: [string, unknown][] = [
    ['null', null],
    ['an empty array', []],
    ['an array', [1, 'two']],
    ['a number', 42],
    ['zero', 0],
    ['a string', 'ls -la'],
    ['a JSON-looking string', '{"path":"/"}'],
    ['a boolean', false],
  ];

  describe.each(['tool.started', 'approval.requested'] as const)('%s', (type) => {
    it.each(NON_OBJECTS)('stores an input that is %s as { raw }', (_name, input) => {
      // Given a tool call whose arguments are not an object
      const event = exampleEvent(type);
      (event.data as { input: unknown }).input = input;

      // When it is validated
      const result = validateEvent(event);

      // Then it passes, with the arguments kept under raw
      expect(result).toMatchObject({ ok: true, value: { data: { input: { raw: input } } } });
    });

    it('keeps an object input as it is, without wrapping it', () => {
      const event = exampleEvent(type);
      const input = { raw: 'already an object', nested: { list: [1] } };
      event.data.input = input;

      const result = validateEvent(event);

      expect(result.ok && result.value.data).toEqual({ ...event.data, input });
    });

    it('still requires the input', () => {
      const data: Record<string, unknown> = { ...exampleEvent(type).data };
      delete data.input;

      const problems = problemsOf(validateEvent({ type, data }));

      expect(problems.map((p) => p.field)).toEqual(['data.input']);
    });
  });

  it('does not wrap the input of other types', () => {
    const event = { type: 'tool.finished', data: { toolCallId: 't', failed: false, input: 'x' } };

    expect(problemsOf(validateEvent(event))).toEqual([
      expect.objectContaining({ field: 'data.input', rule: 'whitelistValidation' }),
    ]);
  });

  it('does not change the caller’s event', () => {
    const event = exampleEvent('tool.started');
    (event.data as { input: unknown }).input = [1];

    validateEvent(event);

    expect(event.data.input).toEqual([1]);
  });

  it.each(NON_OBJECTS)('normalizeToolInput wraps %s', (_name, input) => {
    expect(normalizeToolInput(input)).toEqual({ raw: input });
  });

  it('normalizeToolInput returns an object as the same object', () => {
    const input = { a: 1 };

    expect(normalizeToolInput(input)).toBe(input);
  });
});

describe('isPlainObject', () => {
  it.each([{}, { a: 1 }, Object.create(null)])('is true for %j', (value) => {
    expect(isPlainObject(value)).toBe(true);
  });

  it.each([null, undefined, [], 'x', 1, true])('is false for %j', (value) => {
    expect(isPlainObject(value)).toBe(false);
  });
});

describe('JSON values the log must not record', () => {
  /** `levels` objects nested in each other under key `a`, the innermost holding 1. */
  const nested = (levels: number): unknown => {
    let value: unknown = 1;
    for (let i = 0; i < levels; i += 1) value = { a: value };
    return value;
  };

  it.each([
    ['a number JSON.parse read as Infinity', JSON.parse('{"n":1e309}'), 'data.n'],
    ['-Infinity', { n: -Infinity }, 'data.n'],
    ['NaN deep in an array', { list: [1, { n: NaN }] }, 'data.list.1.n'],
  ])('refuses %s, naming where it is', (_name, data, field) => {
    expect(jsonValueProblems(data, 'data', 3)).toEqual([
      { index: 3, field, rule: 'isFinite', message: `${field} must be a finite number` },
    ]);
  });

  it(`accepts objects nested ${MAX_JSON_DEPTH} deep, and refuses one more level`, () => {
    expect(jsonValueProblems(nested(MAX_JSON_DEPTH), 'data')).toEqual([]);
    const field = `data${'.a'.repeat(MAX_JSON_DEPTH)}`;
    expect(jsonValueProblems(nested(MAX_JSON_DEPTH + 1), 'data')).toEqual([
      {
        index: undefined,
        field,
        rule: 'maxDepth',
        message: `${field} is nested deeper than ${MAX_JSON_DEPTH} levels`,
      },
    ]);
  });

  it('counts arrays as levels like objects', () => {
    let value: unknown = [];
    for (let i = 0; i < MAX_JSON_DEPTH; i += 1) value = [value];
    expect(jsonValueProblems(value, 'v')).toEqual([
      expect.objectContaining({ field: `v${'.0'.repeat(MAX_JSON_DEPTH)}`, rule: 'maxDepth' }),
    ]);
  });

  it('accepts finite numbers, strings, booleans and null at any place', () => {
    expect(jsonValueProblems({ a: [0, -1.5, 'x', true, null], b: {} }, 'data')).toEqual([]);
  });

  it('names the place of the one bad number among a million, and reads a bare value as itself', () => {
    const numbers = Array.from({ length: 1_000_000 }, (_, i) => i % 10);
    numbers[999_998] = Infinity;
    expect(jsonValueProblems({ input: { a: numbers } }, 'data')).toEqual([
      expect.objectContaining({ field: 'data.input.a.999998', rule: 'isFinite' }),
    ]);
    expect(jsonValueProblems(-Infinity, 'body')).toEqual([
      {
        index: undefined,
        field: 'body',
        rule: 'isFinite',
        message: 'body must be a finite number',
      },
    ]);
    expect(jsonValueProblems('a string is not walked', 'body')).toEqual([]);
    expect(jsonValueProblems(null, 'body')).toEqual([]);
  });

  it('are refused by validateEvent in data and in metadata, beside the envelope problems', () => {
    const event = {
      ...exampleEvent('tool.started'),
      extra: 1,
      metadata: { cost: Infinity },
    };
    (event.data as { input: unknown }).input = nested(MAX_JSON_DEPTH);

    expect(problemsOf(validateEvent(event, 4))).toEqual([
      { index: 4, field: 'extra', rule: 'whitelistValidation', message: 'extra is not allowed' },
      expect.objectContaining({
        index: 4,
        field: `data.input${'.a'.repeat(MAX_JSON_DEPTH - 1)}`,
        rule: 'maxDepth',
      }),
      expect.objectContaining({ index: 4, field: 'metadata.cost', rule: 'isFinite' }),
    ]);
  });
});

describe('validateEvent: objects with more keys than any schema declares', () => {
  const unknown = (n: number) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`extra${i}`, i]));

  it.each(EVENT_TYPES)(
    '%s: names every unknown key of its data, the declared ones aside',
    (type) => {
      const example = exampleEvent(type);
      const problems = problemsOf(
        validateEvent({ ...example, data: { ...example.data, ...unknown(5000) } }, 3),
      );
      expect(problems).toHaveLength(5000);
      expect(problems[4999]).toEqual({
        index: 3,
        field: 'data.extra4999',
        rule: 'whitelistValidation',
        message: 'data.extra4999 is not allowed',
      });
    },
  );

  it('names the unknown keys of a model.call message the same way', () => {
    const example = exampleEvent('model.call');
    const messages = [{ role: 'user', content: 'hi', ...unknown(40) }];
    const problems = problemsOf(validateEvent({ ...example, data: { ...example.data, messages } }));
    expect(problems.map((p) => p.field)).toEqual(
      Array.from({ length: 40 }, (_, i) => `data.messages.0.extra${i}`),
    );
  });

  it('names the same unknown keys as the whitelist when there are few', () => {
    const example = exampleEvent('message.added');
    const problems = problemsOf(
      validateEvent({ ...example, data: { ...example.data, ...unknown(3) } }),
    );
    expect(problems.map((p) => [p.field, p.rule])).toEqual(
      [0, 1, 2].map((i) => [`data.extra${i}`, 'whitelistValidation']),
    );
  });
});

describe('validateEventInSlices: a model call of many messages', () => {
  const call = (messages: unknown[]) => {
    const example = exampleEvent('model.call');
    return { ...example, data: { ...example.data, messages } };
  };
  const many = Array.from({ length: 3000 }, (_, i) =>
    i % 1000 === 7
      ? { role: 'nobody', content: `m${i}` }
      : i % 1000 === 9
        ? 'not a message'
        : { role: 'user', content: `m${i}` },
  );

  it('answers what validateEvent answers, each message named by its place', async () => {
    for (const input of [call(many), call(many.filter((m) => typeof m === 'object')), call([])]) {
      expect(await validateEventInSlices(input, 2, new SliceClock())).toEqual(
        validateEvent(input, 2),
      );
    }
    expect(problemsOf(validateEvent(call(many), 2))).toEqual(
      [7, 9, 1007, 1009, 2007, 2009].map((i) =>
        i % 1000 === 7
          ? expect.objectContaining({ index: 2, field: `data.messages.${i}.role`, rule: 'isIn' })
          : {
              index: 2,
              field: `data.messages.${i}`,
              rule: 'isObject',
              message: `data.messages.${i} must be an object`,
            },
      ),
    );
  });

  it('checks messages only in a model call: elsewhere the key itself is refused, once', () => {
    const example = exampleEvent('message.added');
    const messages = [{ role: 'nobody' }, 'not a message'];
    expect(problemsOf(validateEvent({ ...example, data: { ...example.data, messages } }))).toEqual([
      expect.objectContaining({ field: 'data.messages', rule: 'whitelistValidation' }),
    ]);
  });

  it('gives the event loop turns while it validates them, not one stretch for the event', async () => {
    let turns = 0;
    const counting = setInterval(() => (turns += 1), 0);
    try {
      const messages = Array.from({ length: 30_000 }, (_, i) => ({
        role: 'user',
        content: `${i}`,
      }));
      const result = await validateEventInSlices(call(messages), 0, new SliceClock(1));
      expect(result.ok).toBe(true);
    } finally {
      clearInterval(counting);
    }
    expect(turns).toBeGreaterThan(5);
  });
});

describe('ids are well-formed Unicode', () => {
  it('refuses an id holding a lone surrogate: stored as text it would turn into another id', () => {
    for (const [type, data, field] of [
      ['message.added', { messageId: 'm\ud800', role: 'user', text: 'hi' }, 'data.messageId'],
      ['tool.started', { toolCallId: 'c\udc01', toolName: 'sh', input: {} }, 'data.toolCallId'],
    ] as const) {
      expect(problemsOf(validateEvent({ type, data }))).toEqual([
        expect.objectContaining({ field, rule: 'isWellFormed' }),
      ]);
    }
    // A pair is one character, written whole: an emoji is as good an id as any.
    expect(
      validateEvent({ type: 'message.added', data: { messageId: 'm😀', role: 'user', text: 'hi' } })
        .ok,
    ).toBe(true);
  });
});
