/**
 * The strict data schema of every catalogue type, driven through the one write-path
 * validator (validateEvent). Table-driven over EVENT_TYPES: the field table below is keyed
 * by every type and every declared field, so a type or field added without a row fails to
 * compile, and the drift test fails if the decorators declare a field the table lacks.
 */
import { getMetadataStorage } from 'class-validator';
import {
  EVENT_SCHEMAS,
  validateEvent,
  type EventDataByType,
  type Problem,
  type Validated,
  type ValidEvent,
} from './event-catalogue';
import { PATH_ID_PATTERN } from './event-data.dto';
import { EVENT_TYPES, type EventType } from './event-types';
import { EVENT_DATA_EXAMPLES, exampleEvent } from './testing/event-fixtures';

interface FieldSpec {
  required: boolean;
  /** Values the schema must refuse: a wrong JSON type first, then values breaking a rule. */
  refused: readonly unknown[];
  /** Set when any JSON is accepted, saying why; `refused` is then empty. */
  anyJson?: string;
}

type FieldTable = { [K in EventType]: { [F in keyof EventDataByType[K]]-?: FieldSpec } };

const LONG_ID = 'x'.repeat(257);
const LONG_LABEL = 'x'.repeat(1025);

const id = (): FieldSpec => ({
  required: true,
  refused: [42, null, ['id-1'], {}, '', ' \t ', LONG_ID],
});
const label = (required = true): FieldSpec => ({
  required,
  refused: [42, ...(required ? [null] : []), {}, '', '   ', LONG_LABEL],
});
const text = (required: boolean): FieldSpec => ({
  required,
  refused: [42, true, ...(required ? [null] : []), {}, ['text']],
});
const oneOf = (bogus: string): FieldSpec => ({ required: true, refused: [42, null, bogus] });

/** A valid stamp of the size gate (docs/api.md, "Size gating"). */
const STAMP = {
  originalByteLength: 2_000_000,
  limitBytes: 1_048_576,
  omittedMessageCount: 3,
  clampedParts: 1,
};
const { clampedParts: _omitted, ...STAMP_WITHOUT_CLAMPED_PARTS } = STAMP;
const TRUNCATION: FieldSpec = {
  required: false,
  refused: [
    'truncated',
    42,
    true,
    [STAMP],
    {},
    STAMP_WITHOUT_CLAMPED_PARTS,
    { ...STAMP, limitBytes: -1 },
    { ...STAMP, originalByteLength: 1.5 },
    { ...STAMP, omittedMessageCount: '3' },
    { ...STAMP, reason: 'too big' },
  ],
};

const FIELDS: FieldTable = {
  'run.started': {
    truncation: TRUNCATION,
    threadId: {
      required: true,
      refused: [42, null, ['t'], '', '-thread', 'thread/1', 'thread 1', 'x'.repeat(129)],
    },
    agent: label(),
    source: oneOf('email'),
    title: { required: false, refused: [42, ['t'], LONG_LABEL] },
    goal: text(false),
  },
  'run.finished': {
    truncation: TRUNCATION,
    status: oneOf('done'),
    reason: text(false),
    errorText: text(false),
  },
  'turn.started': {
    truncation: TRUNCATION,
    turnId: id(),
    source: oneOf('TYPED'),
  },
  'turn.finished': {
    truncation: TRUNCATION,
    turnId: id(),
    status: oneOf('completed '),
  },
  'turn.steered': {
    truncation: TRUNCATION,
    turnId: id(),
    instruction: { required: true, refused: [42, null, {}, '', ' \n '] },
  },
  'message.added': {
    truncation: TRUNCATION,
    messageId: id(),
    role: oneOf('tool'),
    text: text(true),
  },
  'transcript.added': {
    truncation: TRUNCATION,
    utteranceId: id(),
    role: oneOf('system'),
    text: { required: true, refused: [42, null, {}, '', '   ', '\n\t'] },
  },
  'model.call': {
    truncation: TRUNCATION,
    callId: id(),
    model: label(),
    messages: {
      required: true,
      refused: [
        'hello',
        null,
        { role: 'user', content: 'hello' },
        [1],
        [null],
        [{ role: 'robot', content: 'hello' }],
        [{ role: 'user' }],
        [{ role: 'user', content: 42 }],
        [{ role: 'user', content: 'hello', name: 42 }],
        [{ role: 'user', content: 'hello', toolCallId: 42 }],
      ],
    },
    tools: { required: false, refused: [{}, 'lookup', [1], [null], [['lookup']]] },
  },
  'tool.started': {
    truncation: TRUNCATION,
    toolCallId: id(),
    toolName: label(),
    input: { required: true, refused: [], anyJson: 'non-objects are kept as { raw }' },
  },
  'tool.finished': {
    truncation: TRUNCATION,
    toolCallId: id(),
    toolName: label(false),
    output: { required: false, refused: [], anyJson: 'a tool may return any JSON' },
    failed: { required: true, refused: ['true', 1, null] },
    errorText: { required: false, refused: [42, {}, ''] },
  },
  'approval.requested': {
    truncation: TRUNCATION,
    approvalId: id(),
    toolCallId: id(),
    toolName: label(),
    input: { required: true, refused: [], anyJson: 'non-objects are kept as { raw }' },
    question: text(false),
    options: { required: false, refused: ['allow', [1], Array(65).fill('allow')] },
  },
  'approval.resolved': {
    truncation: TRUNCATION,
    approvalId: id(),
    decision: oneOf('maybe'),
    receipt: { required: true, refused: [42, null, {}, '', ' \n '] },
    receiptDigest: { required: false, refused: [42, 'not-a-digest', 'A'.repeat(64)] },
    decidedBy: text(false),
    downgraded: { required: false, refused: ['false', 0] },
    policyRevision: text(false),
  },
  'append.rejected': {
    truncation: TRUNCATION,
    reason: { required: true, refused: [42, null, {}, '', ' \n '] },
    declaredBytes: { required: true, refused: ['5', true, null, 1.5, -1] },
    limitBytes: { required: false, refused: ['5', true, 1.5, -1] },
    count: { required: false, refused: ['5', true, 1.5, 0, 1] },
  },
};

type Row = [type: EventType, field: string, spec: FieldSpec];
const ROWS: Row[] = EVENT_TYPES.flatMap((type) =>
  Object.entries(FIELDS[type] as Record<string, FieldSpec>).map(([field, spec]): Row => [
    type,
    field,
    spec,
  ]),
);
const REQUIRED = ROWS.filter(([, , spec]) => spec.required);
const OPTIONAL = ROWS.filter(([, , spec]) => !spec.required);
const REFUSED = ROWS.flatMap(([type, field, spec]) =>
  spec.refused.map((value): [EventType, string, unknown] => [type, field, value]),
);
const STRICT_REQUIRED = REQUIRED.filter(([, , spec]) => spec.anyJson === undefined);

/** The fields class-validator knows for a schema: every decorated property. */
function declaredFields(type: EventType): string[] {
  const metadata = getMetadataStorage().getTargetValidationMetadatas(
    EVENT_SCHEMAS[type],
    '',
    true,
    false,
  );
  return [...new Set(metadata.map((m) => m.propertyName))].sort();
}

function withData(type: EventType, change: (data: Record<string, unknown>) => void) {
  const event = exampleEvent(type);
  const data = event.data as unknown as Record<string, unknown>;
  change(data);
  return { type, data };
}

function problemsOf(result: Validated<ValidEvent>): Problem[] {
  if (result.ok) throw new Error(`expected problems, the event passed: ${JSON.stringify(result)}`);
  return result.problems;
}

/** True when a problem is about `field` or something nested in it. */
const about = (field: string) => (problem: Problem) =>
  problem.field === field || problem.field.startsWith(`${field}.`);

describe('event data schemas', () => {
  describe('drift: every catalogue type has a schema, an example and a field table', () => {
    it.each(EVENT_TYPES)('%s', (type) => {
      expect(EVENT_SCHEMAS[type]).toEqual(expect.any(Function));
      expect(EVENT_DATA_EXAMPLES[type]).toEqual(expect.any(Object));
      expect(Object.keys(FIELDS[type] ?? {}).sort()).toEqual(declaredFields(type));
    });
  });

  describe('the valid example passes', () => {
    it.each(EVENT_TYPES)('%s', (type) => {
      // Given the example data of the type
      const event = exampleEvent(type);

      // When it is validated
      const result = validateEvent(event);

      // Then it passes, and is kept as sent
      expect(result).toEqual({ ok: true, value: { ...event, metadata: {} } });
    });
  });

  describe('a missing required field fails, naming that field', () => {
    it.each(REQUIRED)('%s without %s', (type, field) => {
      const problems = problemsOf(validateEvent(withData(type, (data) => delete data[field])));

      expect(problems.length).toBeGreaterThan(0);
      expect(problems.filter((p) => !about(`data.${field}`)(p))).toEqual([]);
    });
  });

  describe('a required field set to null fails, naming that field', () => {
    it.each(STRICT_REQUIRED)('%s with %s: null', (type, field) => {
      const problems = problemsOf(validateEvent(withData(type, (data) => (data[field] = null))));

      expect(problems.length).toBeGreaterThan(0);
      expect(problems.filter((p) => !about(`data.${field}`)(p))).toEqual([]);
    });
  });

  describe('an optional field may be left out', () => {
    it.each(OPTIONAL)('%s without %s', (type, field) => {
      const result = validateEvent(withData(type, (data) => delete data[field]));

      expect(result.ok).toBe(true);
    });
  });

  describe('a wrong type or a broken rule fails, naming the field', () => {
    it.each(REFUSED)('%s with %s: %j', (type, field, value) => {
      const problems = problemsOf(validateEvent(withData(type, (data) => (data[field] = value))));

      expect(problems.length).toBeGreaterThan(0);
      expect(problems.filter((p) => !about(`data.${field}`)(p))).toEqual([]);
    });
  });

  describe('an extra field fails with whitelistValidation, naming it', () => {
    it.each(EVENT_TYPES)('%s', (type) => {
      const problems = problemsOf(
        validateEvent(
          withData(type, (data) => (data.unexpected = 'x')),
          3,
        ),
      );

      expect(problems).toEqual([
        {
          index: 3,
          field: 'data.unexpected',
          rule: 'whitelistValidation',
          message: 'data.unexpected is not allowed',
        },
      ]);
    });
  });

  /**
   * class-transformer skips keys naming Object.prototype members when it builds the
   * instance, so the whitelist never sees them, while the plain data is what gets stored.
   * `constructor` and `toString` pass Fastify's JSON parser, so this reaches the log.
   */
  describe('an extra field named like an Object.prototype member is refused too', () => {
    const NAMES = ['constructor', 'toString', 'valueOf', 'hasOwnProperty', '__proto__'];

    it.each(EVENT_TYPES)('%s', (type) => {
      const event = withData(type, (data) => {
        for (const name of NAMES)
          Object.defineProperty(data, name, { value: 1, enumerable: true, writable: true });
      });

      const problems = problemsOf(validateEvent(event));

      for (const name of NAMES) {
        expect(problems).toContainEqual(
          expect.objectContaining({ field: `data.${name}`, rule: 'whitelistValidation' }),
        );
      }
    });

    it('inside a model.call message', () => {
      const event = withData('model.call', (data) => {
        data.messages = [JSON.parse('{"role":"user","content":"hi","constructor":1}')];
      });

      const problems = problemsOf(validateEvent(event));

      expect(problems).toContainEqual(
        expect.objectContaining({
          field: 'data.messages.0.constructor',
          rule: 'whitelistValidation',
        }),
      );
    });
  });
});

describe('specific rules', () => {
  describe('the truncation stamp', () => {
    it.each(EVENT_TYPES)('is accepted on %s, and kept', (type) => {
      // Given an event the size gate reduced and stamped
      const event = withData(type, (data) => (data.truncation = { ...STAMP }));

      // When it is validated
      const result = validateEvent(event);

      // Then it passes the same strict schema, stamp included
      expect(result).toMatchObject({ ok: true, value: { data: { truncation: STAMP } } });
    });

    it('names the stamp field at fault', () => {
      const event = withData(
        'model.call',
        (data) => (data.truncation = { ...STAMP, limitBytes: -1 }),
      );

      expect(problemsOf(validateEvent(event))).toEqual([
        expect.objectContaining({ field: 'data.truncation.limitBytes', rule: 'min' }),
      ]);
    });
  });

  describe('transcript.added', () => {
    it.each(['', ' ', '\n\t ', '\u00a0', '\u200b', '\u2060\u180e', '\ufeff \u200d'])(
      'refuses blank text %j',
      (blank) => {
        const problems = problemsOf(
          validateEvent(withData('transcript.added', (data) => (data.text = blank))),
        );

        expect(problems).toEqual([
          expect.objectContaining({ field: 'data.text', message: 'text must not be blank' }),
        ]);
      },
    );

    it('accepts an emoji joined by zero-width joiners, which shows', () => {
      const result = validateEvent(
        withData('transcript.added', (data) => (data.text = '\u{1F469}\u200d\u{1F4BB}')),
      );

      expect(result.ok).toBe(true);
    });

    it('accepts text with spaces around words', () => {
      const result = validateEvent(withData('transcript.added', (data) => (data.text = ' ok ')));

      expect(result.ok).toBe(true);
    });
  });

  describe('tool.finished', () => {
    it('refuses failed=true without errorText, naming errorText', () => {
      // Given a failed tool call that does not say why
      const event = withData('tool.finished', (data) => {
        data.failed = true;
        delete data.errorText;
      });

      // When it is validated
      const problems = problemsOf(validateEvent(event));

      // Then errorText is reported as required
      expect(problems.length).toBeGreaterThan(0);
      expect(problems.every(about('data.errorText'))).toBe(true);
      expect(problems[0].message).toBe('errorText is required when failed is true');
    });

    it.each(['', ' \t '])('refuses failed=true with a blank errorText %j', (blank) => {
      const event = withData('tool.finished', (data) => {
        data.failed = true;
        data.errorText = blank;
      });

      expect(problemsOf(validateEvent(event)).every(about('data.errorText'))).toBe(true);
    });

    it('accepts errorText: null on a call that did not fail, as any optional field sent null', () => {
      const event = withData('tool.finished', (data) => {
        data.failed = false;
        data.errorText = null;
      });

      expect(validateEvent(event).ok).toBe(true);
    });

    it('refuses failed=true with a number for errorText, saying it must be a string', () => {
      const event = withData('tool.finished', (data) => {
        data.failed = true;
        data.errorText = 5;
      });

      const messages = problemsOf(validateEvent(event)).map((p) => p.message);
      expect(messages).toContain('errorText must be a string');
      expect(messages).not.toContain('errorText is required when failed is true');
    });

    it('refuses failed=true with errorText: null, as required', () => {
      const event = withData('tool.finished', (data) => {
        data.failed = true;
        data.errorText = null;
      });

      expect(problemsOf(validateEvent(event))[0].message).toBe(
        'errorText is required when failed is true',
      );
    });

    it.each([
      [' ', 'errorText must not be blank'],
      [5, 'errorText must be a string'],
    ])(
      'refuses errorText %j on a call that did not fail, saying what is wrong, not that it is missing',
      (errorText, message) => {
        const event = withData('tool.finished', (data) => {
          data.failed = false;
          data.errorText = errorText;
        });

        const problems = problemsOf(validateEvent(event));
        expect(problems.every(about('data.errorText'))).toBe(true);
        expect(problems.map((p) => p.message)).toContain(message);
        expect(problems.map((p) => p.message)).not.toContain(
          'errorText is required when failed is true',
        );
      },
    );

    it('accepts failed=true with errorText', () => {
      const event = withData('tool.finished', (data) => {
        data.failed = true;
        data.errorText = 'timeout after 30s';
      });

      expect(validateEvent(event).ok).toBe(true);
    });

    it('accepts failed=false without errorText', () => {
      const event = withData('tool.finished', (data) => {
        data.failed = false;
        delete data.errorText;
      });

      expect(validateEvent(event).ok).toBe(true);
    });

    it.each([null, 0, 'done', [1, 2], { rows: [] }, true])(
      'accepts any JSON output: %j',
      (output) => {
        const result = validateEvent(withData('tool.finished', (data) => (data.output = output)));

        expect(result).toMatchObject({ ok: true, value: { data: { output } } });
      },
    );
  });

  describe('model.call message content', () => {
    const withContent = (content: unknown) =>
      validateEvent(
        withData('model.call', (data) => (data.messages = [{ role: 'user', content }])),
      );

    it.each([
      ['a string', 'hello'],
      ['an empty string', ''],
      ['no parts', []],
      [
        'text parts with text',
        [
          { type: 'text', text: 'hi' },
          { type: 'text', text: '' },
        ],
      ],
      ['non-text parts without text', [{ type: 'image_url', image_url: { url: 'u' } }]],
      ['non-text parts with any fields', [{ type: 'input_audio', data: 'AAA', text: 42 }]],
    ])('accepts %s', (_name, content) => {
      expect(withContent(content).ok).toBe(true);
    });

    it.each([
      ['a number', 42],
      ['null', null],
      ['an object', { type: 'text', text: 'hi' }],
      ['a text part without text', [{ type: 'text' }]],
      ['a text part with a non-string text', [{ type: 'text', text: 42 }]],
      ['a part without type', [{ text: 'hi' }]],
      ['a part with a non-string type', [{ type: 1 }]],
      ['a null part', [null]],
      ['a string part', ['hi']],
      ['an array part', [[{ type: 'text', text: 'hi' }]]],
    ])('refuses %s, naming the message content', (_name, content) => {
      const problems = problemsOf(withContent(content));

      expect(problems).toEqual([
        expect.objectContaining({ field: 'data.messages.0.content', rule: 'isMessageContent' }),
      ]);
    });

    it('names the message at fault by its index', () => {
      const event = withData('model.call', (data) => {
        data.messages = [
          { role: 'user', content: 'fine' },
          { role: 'user', content: [{ type: 'text' }] },
        ];
      });

      expect(problemsOf(validateEvent(event)).map((p) => p.field)).toEqual([
        'data.messages.1.content',
      ]);
    });

    it('refuses an extra field in a message, naming it', () => {
      const event = withData('model.call', (data) => {
        data.messages = [{ role: 'user', content: 'hi', cache: true }];
      });

      expect(problemsOf(validateEvent(event))).toEqual([
        expect.objectContaining({ field: 'data.messages.0.cache', rule: 'whitelistValidation' }),
      ]);
    });
  });
});

describe('the wording of a refusal', () => {
  it('says which pattern a threadId must match', () => {
    const problems = problemsOf(
      validateEvent(withData('run.started', (data) => (data.threadId = 'thread/1'))),
    );

    expect(problems).toEqual([
      {
        index: undefined,
        field: 'data.threadId',
        rule: 'matches',
        message: `threadId must match ${String(PATH_ID_PATTERN)}`,
      },
    ]);
  });

  it('says what a message content may be', () => {
    const problems = problemsOf(
      validateEvent(
        withData('model.call', (data) => (data.messages = [{ role: 'user', content: 1 }])),
      ),
    );

    expect(problems).toEqual([
      {
        index: undefined,
        field: 'data.messages.0.content',
        rule: 'isMessageContent',
        message:
          'content must be a string or an array of parts, each an object with a string type (text parts with a string text)',
      },
    ]);
  });
});
