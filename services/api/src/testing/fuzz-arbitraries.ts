/**
 * Hostile-input generators for the HTTP fuzz suite (fuzz.int.spec.ts). Bodies are built as
 * JSON *texts* from a small tree, not with JSON.stringify, so they can carry what a serializer
 * never writes but an attacker does: `__proto__` keys, duplicate keys, `1e400`, `-0`, lone
 * surrogates, numbers past 2^53. Ids and header values come with the encodings that reach the
 * router unharmed (percent-escapes, traversal, NUL) and those that must not (bad escapes).
 */
import fc from 'fast-check';
import { EVENT_TYPES } from '@runledger/domain';
import { EVENT_DATA_EXAMPLES } from '../../../../libs/domain/src/testing/event-fixtures';
import { KEYS } from './test-app';

/** A JSON fragment written verbatim (a number JSON.stringify cannot spell, a broken token). */
export class Raw {
  constructor(readonly text: string) {}
}

/** An object as its entries: order kept, duplicates and `__proto__` allowed. */
export class Obj {
  constructor(readonly entries: [string, Tree][]) {}
}

export type Tree = null | boolean | number | string | Raw | Obj | Tree[];

export function jsonText(tree: Tree): string {
  if (tree instanceof Raw) return tree.text;
  if (tree instanceof Obj) {
    return `{${tree.entries.map(([k, v]) => `${JSON.stringify(k)}:${jsonText(v)}`).join(',')}}`;
  }
  if (Array.isArray(tree)) return `[${tree.map(jsonText).join(',')}]`;
  // JSON.stringify escapes lone surrogates (\ud800), so they arrive as such after parsing.
  return JSON.stringify(tree);
}

/** A plain JSON value (a fixture) as a tree, ready to be mutated. */
export function toTree(value: unknown): Tree {
  if (Array.isArray(value)) return value.map(toTree);
  if (value !== null && typeof value === 'object') {
    return new Obj(Object.entries(value).map(([k, v]) => [k, toTree(v)]));
  }
  return value as Tree;
}

/** Keys that name Object.prototype's members or reach it. */
export const PROTOTYPE_KEYS = [
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'valueOf',
  'hasOwnProperty',
  '__defineGetter__',
  'isPrototypeOf',
] as const;

const SPECIAL_STRINGS = [
  '',
  ' ',
  '\t\n',
  '\u0000',
  'a\u0000b',
  '\ud800',
  '\udfff',
  'a\ud83db',
  '\ufeff',
  '\u202eevil',
  '\u0085',
  'ünïcødé',
  '0b7c9a4e-0b1e-4c53-9d1e-2f3a4b5c6d7e',
  '0B7C9A4E-0B1E-4C53-9D1E-2F3A4B5C6D7E',
  '\u{1F600}',
  '../../etc/passwd',
  '..%2F..',
  '%00',
  'NaN',
  'Infinity',
  '-0',
  '1e308',
  'null',
  'true',
  '{"a":1}',
  '<script>',
  "' OR 1=1 --",
  'allow ',
  'ALLOW',
  'run.started ',
  'RUN.STARTED',
  ...PROTOTYPE_KEYS,
];

export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(...SPECIAL_STRINGS), weight: 4 },
  { arbitrary: fc.string({ maxLength: 20 }), weight: 2 },
  { arbitrary: fc.string({ unit: 'grapheme', maxLength: 12 }), weight: 2 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 12 }), weight: 1 },
  {
    arbitrary: fc
      .tuple(fc.constantFrom('x', 'é', '\u{1F600}', '\ud800'), fc.integer({ min: 257, max: 5000 }))
      .map(([c, n]) => c.repeat(n)),
    weight: 1,
  },
);

/** Numbers as they are written on the wire, including those JSON.parse turns into others. */
export const hostileNumber: fc.Arbitrary<Tree> = fc.oneof(
  fc.constantFrom(
    ...[
      '1e308',
      '1e309',
      '-1e309',
      '-0',
      '0.0',
      '9007199254740993',
      '-9007199254740993',
      '123456789012345678901234567890',
      '1e-400',
      '0.5',
      '-1',
      '1E2',
    ].map((text) => new Raw(text)),
  ),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, 1, 2 ** 53 - 1, Number.MAX_VALUE, Number.MIN_VALUE),
);

export const hostileKey: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(...PROTOTYPE_KEYS), weight: 2 },
  {
    arbitrary: fc.constantFrom(
      'type',
      'data',
      'id',
      'metadata',
      'events',
      'expectedRevision',
      'truncation',
      'tenantId',
      'runId',
      'threadId',
      'hash',
      'prevHash',
      'input',
      'raw',
      'decision',
      'receipt',
    ),
    weight: 2,
  },
  { arbitrary: hostileString, weight: 1 },
);

const leaf: fc.Arbitrary<Tree> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  hostileNumber,
  hostileString,
);

/** Any JSON value, a few levels deep; deep nesting has its own generator (deepJson). */
export const hostileTree: fc.Arbitrary<Tree> = fc.letrec<{ tree: Tree }>((tie) => ({
  tree: fc.oneof(
    { depthSize: 'small', maxDepth: 4 },
    leaf,
    fc.array(tie('tree'), { maxLength: 4 }),
    fc
      .array(fc.tuple(hostileKey, tie('tree')), { maxLength: 4 })
      .map((entries) => new Obj(entries)),
  ),
})).tree;

/** `depth` levels of nested objects or arrays around `inner`, as text. */
export function deepJson(depth: number, kind: 'object' | 'array', inner = '1'): string {
  return kind === 'object'
    ? `${'{"a":'.repeat(depth)}${inner}${'}'.repeat(depth)}`
    : `${'['.repeat(depth)}${inner}${']'.repeat(depth)}`;
}

/** One edit of a tree: replace a node, drop or add a key, duplicate a key, wrap a node. */
export interface Mutation {
  at: number;
  op: 'replace' | 'delete' | 'add' | 'duplicate' | 'wrap' | 'stringify';
  key: string;
  value: Tree;
}

export const mutation: fc.Arbitrary<Mutation> = fc.record({
  at: fc.nat(),
  op: fc.constantFrom('replace', 'delete', 'add', 'duplicate', 'wrap', 'stringify'),
  key: hostileKey,
  value: hostileTree,
});

/** Applies `m` to the `m.at`-th container of `tree` (modulo their number), as a copy. */
export function mutate(tree: Tree, m: Mutation): Tree {
  const containers: (Obj | Tree[])[] = [];
  const collect = (node: Tree) => {
    if (node instanceof Obj) {
      containers.push(node);
      node.entries.forEach(([, v]) => collect(v));
    } else if (Array.isArray(node)) {
      containers.push(node);
      node.forEach(collect);
    }
  };
  collect(tree);
  if (containers.length === 0) return m.value;
  const target = containers[m.at % containers.length];
  const edit = (node: Tree): Tree => {
    if (node !== target) {
      if (node instanceof Obj) return new Obj(node.entries.map(([k, v]) => [k, edit(v)]));
      if (Array.isArray(node)) return node.map(edit);
      return node;
    }
    const items: [string, Tree][] =
      node instanceof Obj ? node.entries : (node as Tree[]).map((v, i) => [String(i), v]);
    const i = items.length === 0 ? -1 : m.at % items.length;
    const changed = (entries: [string, Tree][]): Tree =>
      node instanceof Obj ? new Obj(entries) : entries.map(([, v]) => v);
    switch (m.op) {
      case 'replace':
        return i < 0 ? m.value : changed(items.map(([k, v], j) => [k, j === i ? m.value : v]));
      case 'delete':
        return changed(items.filter((_, j) => j !== i));
      case 'add':
        return changed([...items, [m.key, m.value]]);
      case 'duplicate':
        return i < 0 ? changed([[m.key, m.value]]) : changed([...items, [items[i][0], m.value]]);
      case 'wrap':
        return i < 0 ? [node] : changed(items.map(([k, v], j) => [k, j === i ? [v] : v]));
      case 'stringify':
        return i < 0
          ? jsonText(node)
          : changed(items.map(([k, v], j) => [k, j === i ? jsonText(v) : v]));
    }
  };
  return edit(tree);
}

/**
 * A path segment as sent on the wire (already percent-encoded where it should be): traversal,
 * NUL, bad escapes, overlong and unicode ids, prototype names, and well-formed unknown ids.
 */
export const hostileSegment: fc.Arbitrary<string> = fc.oneof(
  {
    arbitrary: fc.constantFrom(
      '..',
      '.',
      '..%2F..',
      '..%2f..%2fhealth%2flive',
      '%2e%2e',
      '%2e%2e%2f%2e%2e',
      '..%5C..',
      '%00',
      'run%00',
      'a%00b',
      '%0d%0aX-Injected:%201',
      '%',
      '%zz',
      '%E0%A4%A',
      '%ED%A0%80',
      '%C0%AE%C0%AE',
      '%FF',
      '%20run',
      'run%20',
      'run%2Fx',
      'run%3Fx=1',
      'run%23x',
      '%E2%80%AE',
      '%F0%9F%98%80',
      'a'.repeat(129),
      'a'.repeat(4000),
      '-run',
      '.run',
      '_run',
      ...PROTOTYPE_KEYS.map(encodeURIComponent),
      '9007199254740993',
      '1e308',
      '-0',
      'NaN',
    ),
    weight: 4,
  },
  { arbitrary: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,20}$/), weight: 2 },
  {
    arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 16 }).map(encodeURIComponent),
    weight: 2,
  },
);

/** Content types a client may send, right and wrong. */
export const contentType: fc.Arbitrary<string | undefined> = fc.constantFrom(
  'application/json',
  'application/json; charset=utf-8',
  'APPLICATION/JSON',
  'application/json;charset=UTF-8',
  'application/json; charset=utf-16',
  'application/json; charset=latin1',
  'application/json; foo=bar',
  'application/json ; charset=utf-8',
  'application/jsonx',
  'application/vnd.api+json',
  'application/x-ndjson',
  'text/json',
  'text/plain',
  'text/plain; charset=utf-8',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=xyz',
  'application/octet-stream',
  '*/*',
  'json',
  ';',
  '',
  undefined,
);

/**
 * X-Runledger-User values Node's client will send (tab, printable ASCII, Latin-1 incl. C1),
 * percent-encoded UTF-8 names and broken encodings.
 */
export const userHeader: fc.Arbitrary<string | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.constantFrom(
    'alice',
    '   ',
    'a\tb',
    '\tleading-tab',
    'ops@example.com',
    'x'.repeat(128),
    'x'.repeat(129),
    'x'.repeat(8000),
    'a\u0085b',
    'a\u009fb',
    'caf\u00e9',
    '\u00ff\u00fe',
    '__proto__',
    'k:fake-key-id',
    'u:alice',
    'key:0123456789abcdef',
    encodeURIComponent('Łukasz'),
    encodeURIComponent('Дмитрий'),
    encodeURIComponent('田中'),
    encodeURIComponent(' 田中 '),
    '%E7%94',
    '%zz',
    '%00',
    '%7F',
    '%C2%85',
    encodeURIComponent('田'.repeat(128)),
    encodeURIComponent('田'.repeat(129)),
    encodeURIComponent('\u202enimda'),
    encodeURIComponent('a\u200bna'),
    encodeURIComponent('👩\u200d💻'),
    encodeURIComponent('ana\u2028'),
  ),
  fc.string({ maxLength: 40 }).map(encodeURIComponent),
  fc.string({ maxLength: 40 }),
);

/** A query value as the client means it (encodeLoose puts it on the wire). */
export const queryValue: fc.Arbitrary<string | undefined> = fc.oneof(
  { arbitrary: fc.constant(undefined), weight: 3 },
  {
    arbitrary: fc.constantFrom(
      '',
      '0',
      '1',
      '20',
      '100',
      '101',
      '1000',
      '1001',
      '-1',
      '-0',
      '+1',
      '1.0',
      '1e3',
      '0x10',
      ' 1',
      '1 ',
      '01',
      '9007199254740991',
      '9007199254740992',
      '99999999999999999999',
      'NaN',
      'Infinity',
      'null',
      '[]',
      '\uff11',
      '\u0661',
      '1\u0000',
      ...PROTOTYPE_KEYS,
    ),
    weight: 4,
  },
  { arbitrary: fc.nat({ max: 2000 }).map(String), weight: 2 },
  { arbitrary: hostileString, weight: 2 },
);

/** encodeURIComponent, except that a lone surrogate goes out as its three WTF-8 bytes. */
export function encodeLoose(value: string): string {
  try {
    return encodeURIComponent(value);
  } catch {
    return Array.from(value)
      .map((ch) => {
        const code = ch.charCodeAt(0);
        if (ch.length > 1 || code < 0xd800 || code > 0xdfff) return encodeURIComponent(ch);
        return [0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)]
          .map((b) => `%${b.toString(16).toUpperCase()}`)
          .join('');
      })
      .join('');
  }
}

/** Authorization values: mostly tenant A's key, then other keys, near misses and noise. */
export const authorization: fc.Arbitrary<string | undefined> = fc.oneof(
  { arbitrary: fc.constant(`Bearer ${KEYS.tenantA}`), weight: 12 },
  {
    arbitrary: fc.constantFrom(
      `Bearer ${KEYS.tenantB}`,
      `Bearer ${KEYS.readerA}`,
      `Bearer ${KEYS.gatewayA}`,
      `Bearer ${KEYS.gatewayA}`,
      `bearer ${KEYS.tenantA}`,
      `Bearer   ${KEYS.tenantA}  `,
      `Bearer\t${KEYS.tenantA}`,
      `Bearer ${KEYS.tenantA}x`,
      `Bearer ${KEYS.tenantA.slice(0, -1)}`,
      `Bearer ${KEYS.tenantA.toUpperCase()}`,
      `Bearer ${KEYS.tenantA} ${KEYS.tenantA}`,
      `Basic ${Buffer.from(`user:${KEYS.tenantA}`).toString('base64')}`,
      `Token ${KEYS.tenantA}`,
      KEYS.tenantA,
      'Bearer',
      'Bearer ',
      '',
      'Bearer __proto__',
      'Bearer constructor',
      `Bearer ${'k'.repeat(8000)}`,
      'Bearer caf\u00e9\u0085',
    ),
    weight: 6,
  },
  { arbitrary: fc.string({ maxLength: 40 }).map((s) => `Bearer ${s}`), weight: 2 },
  { arbitrary: fc.constant(undefined), weight: 2 },
);

/** expectedRevision values: the four valid forms' near misses, and any number or string. */
export const expectedRevision: fc.Arbitrary<Tree> = fc.oneof(
  fc.constantFrom<Tree>(
    'any',
    'no_stream',
    'stream_exists',
    'ANY',
    ' any',
    'none',
    '',
    '0',
    '-1',
    'NaN',
    null,
    true,
    [],
    new Obj([]),
    new Obj([['__proto__', 1]]),
    -1,
    1.5,
    2 ** 53,
    new Raw('9007199254740993'),
    new Raw('1e308'),
    new Raw('1e999'),
    new Raw('-0'),
  ),
  hostileNumber,
  hostileString,
  fc.nat({ max: 20 }),
);

const withExtra = ({ extra, ...fields }: { extra?: [string, Tree] } & Record<string, unknown>) => {
  const entries = Object.entries(fields) as [string, Tree][];
  return new Obj(extra ? [...entries, extra] : entries);
};

/** An event-shaped object whose every part is hostile (any type, any data, extra fields). */
export const randomEvent: fc.Arbitrary<Tree> = fc
  .record(
    {
      type: fc.oneof(
        { arbitrary: fc.constantFrom<Tree>(...EVENT_TYPES), weight: 3 },
        { arbitrary: hostileString, weight: 1 },
        { arbitrary: hostileTree, weight: 1 },
      ),
      data: hostileTree,
      id: fc.oneof(
        hostileString,
        fc.uuid().map((u): Tree => u),
      ),
      metadata: hostileTree,
      extra: fc.tuple(fc.constantFrom(...PROTOTYPE_KEYS, 'tenantId', 'hash', 'extra'), hostileTree),
    },
    { requiredKeys: ['type'] },
  )
  .map(withExtra);

/** A catalogue example (EVENT_DATA_EXAMPLES) with one mutation in its data or its envelope. */
export const mutatedExample: fc.Arbitrary<Tree> = fc
  .tuple(fc.constantFrom(...EVENT_TYPES), mutation, fc.boolean())
  .map(([type, m, inData]) => {
    const data = toTree(structuredClone(EVENT_DATA_EXAMPLES[type]));
    if (inData) {
      return new Obj([
        ['type', type],
        ['data', mutate(data, m)],
      ]);
    }
    return mutate(
      new Obj([
        ['type', type],
        ['data', data],
      ]),
      m,
    );
  });

/** `events`: a few hostile or mutated events, none, more than the limit, or not an array. */
const eventsField: fc.Arbitrary<Tree> = fc.oneof(
  {
    arbitrary: fc.array(fc.oneof(randomEvent, mutatedExample), { minLength: 1, maxLength: 3 }),
    weight: 6,
  },
  { arbitrary: fc.constant<Tree>([]), weight: 1 },
  {
    arbitrary: fc
      .tuple(fc.integer({ min: 1001, max: 1100 }), fc.constantFrom<Tree>(new Obj([]), 1, null))
      .map(([n, item]): Tree => Array.from({ length: n }, () => item)),
    weight: 1,
  },
  { arbitrary: hostileTree, weight: 2 },
);

/** An append body: `{ expectedRevision?, events, …extra }` with hostile parts, or any value. */
export const appendEnvelope: fc.Arbitrary<Tree> = fc.oneof(
  {
    arbitrary: fc
      .record(
        {
          expectedRevision,
          events: eventsField,
          extra: fc.tuple(fc.oneof(fc.constantFrom(...PROTOTYPE_KEYS), hostileString), hostileTree),
        },
        { requiredKeys: ['events'] },
      )
      .map(withExtra),
    weight: 8,
  },
  { arbitrary: hostileTree, weight: 2 },
);
