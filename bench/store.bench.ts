/**
 * Appends through the EventStore API (`SqliteEventStore.append`, batches of 100 events)
 * against raw better-sqlite3 inserts of the same rows. Target: the store sequentially
 * appending batches of 100 reaches ≥ 0.75× the raw inserts' events/s, synchronous=FULL.
 *
 * Why the baseline is fair: it writes the same rows (stream, revision, id, type, data JSON,
 * metadata JSON, recorded_at) into a table with the same columns, the same UNIQUE
 * constraints and the same AUTOINCREMENT key, in a file with the same pragmas (WAL,
 * synchronous=FULL), one transaction — one fsync — per batch of 100, serializing the same
 * event objects with JSON.stringify. It skips only what the store adds on purpose: the
 * idempotency lookup of every id, the stream-head read, the expected-revision check, the
 * promise and the group-commit turn. Every contender writes its own fresh file in a temp
 * directory; they take turns in short rounds and each ratio is taken within a round, so
 * the drift of a shared disk cancels out.
 *
 * Also measured, not targets: 8 appenders on 8 streams at once (group commit coalesces
 * their appends into one transaction per event-loop turn), and the store against raw
 * inserts with synchronous=NORMAL, which leaves mostly the CPU cost.
 */
import Database, { type Database as Db } from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  SqliteEventStore,
  type EventToAppend,
  type SqliteSynchronous,
} from '@runledger/event-store';
import { count, median, ms, range, ratio } from './lib/format';
import { codeRevision, describeMachine } from './lib/machine';
import type { Bench, Section } from './lib/section';

const BATCH = 100;
const CONCURRENT_APPENDERS = 8;
const WARMUP_MS = 300;
const ROUNDS = 10;
const ROUND_MS = 250;
const TARGET_RATIO = 0.75;

/** The store's schema (libs/event-store/src/sqlite.migrations.ts), restated for raw SQL. */
const SCHEMA = `
  CREATE TABLE IF NOT EXISTS events (
    position    INTEGER PRIMARY KEY AUTOINCREMENT,
    stream      TEXT    NOT NULL,
    revision    INTEGER NOT NULL,
    id_scope    TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    data        TEXT    NOT NULL,
    metadata    TEXT    NOT NULL,
    recorded_at TEXT    NOT NULL,
    UNIQUE (stream, revision),
    UNIQUE (id_scope, id)
  );
`;

const TEXT = 'The agent looked up the order and found it had shipped on Tuesday. '.repeat(3);
const PREV_HASH = 'a'.repeat(64);
const HASH = 'b'.repeat(64);

/** A batch shaped like what the service writes: message data plus the sealed metadata. */
/**
 * A UUIDv7-style id: 48 bits of milliseconds first, so ids made one after another sort
 * together and land in the same index pages, unlike random (v4) ids.
 */
function timeOrderedId(): string {
  const hex = randomUUID().replace(/-/g, '');
  const time = Date.now().toString(16).padStart(12, '0');
  const variant = ((parseInt(hex[16], 16) & 0x3) | 0x8).toString(16);
  return `${time.slice(0, 8)}-${time.slice(8)}-7${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20)}`;
}

type IdKind = 'random' | 'time-ordered';

function makeBatch(stream: string, ids: IdKind = 'random'): EventToAppend[] {
  return Array.from({ length: BATCH }, (_, i) => ({
    id: ids === 'random' ? randomUUID() : timeOrderedId(),
    type: 'message.added',
    data: { messageId: `m-${i}`, role: 'assistant', text: TEXT },
    metadata: {
      tenantId: 'bench',
      runId: stream,
      threadId: 'thread-1',
      prevHash: PREV_HASH,
      hash: HASH,
    },
  }));
}

interface Round {
  events: number;
  seconds: number;
}

/** One contender: its own file, kept open across rounds. */
interface Variant {
  label: string;
  writers: number;
  runFor(milliseconds: number): Promise<Round>;
  /** Rows in the file, to check that every acknowledged event was written. */
  close(): Promise<number>;
}

function openDb(file: string, synchronous: SqliteSynchronous): Db {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${synchronous}`);
  db.exec(SCHEMA);
  return db;
}

function countRows(file: string): number {
  const db = new Database(file, { readonly: true });
  const { rows } = db.prepare('SELECT COUNT(*) AS rows FROM events').get() as { rows: number };
  db.close();
  return rows;
}

function rawVariant(file: string, synchronous: SqliteSynchronous, ids: IdKind = 'random'): Variant {
  const db = openDb(file, synchronous);
  const insert = db.prepare(
    'INSERT INTO events (stream, revision, id_scope, id, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
  );
  const writeBatch = db.transaction((stream: string, first: number, events: EventToAppend[]) => {
    const recordedAt = new Date().toISOString();
    events.forEach((event, i) => {
      insert.run(
        stream,
        first + i,
        '',
        event.id,
        event.type,
        JSON.stringify(event.data),
        JSON.stringify(event.metadata),
        recordedAt,
      );
    });
  });
  const stream = 'run-raw';
  let revision = 0;
  return {
    label: `raw better-sqlite3, 1 transaction per batch, synchronous=${synchronous}${ids === 'random' ? '' : `, ${ids} ids`}`,
    writers: 1,
    async runFor(milliseconds) {
      const start = performance.now();
      let events = 0;
      while (performance.now() - start < milliseconds) {
        writeBatch(stream, revision, makeBatch(stream, ids));
        revision += BATCH;
        events += BATCH;
      }
      return { events, seconds: (performance.now() - start) / 1000 };
    },
    async close() {
      db.close();
      return countRows(file);
    },
  };
}

function storeVariant(file: string, synchronous: SqliteSynchronous, writers: number): Variant {
  const store = new SqliteEventStore({ file, synchronous });
  const streams = Array.from({ length: writers }, (_, i) => `run-store-${writers}-${i}`);
  return {
    label:
      writers === 1
        ? `SqliteEventStore.append, sequential, synchronous=${synchronous}`
        : `SqliteEventStore.append, ${writers} concurrent appenders, synchronous=${synchronous}`,
    writers,
    async runFor(milliseconds) {
      const start = performance.now();
      let events = 0;
      await Promise.all(
        streams.map(async (stream) => {
          while (performance.now() - start < milliseconds) {
            await store.append(stream, makeBatch(stream));
            events += BATCH;
          }
        }),
      );
      return { events, seconds: (performance.now() - start) / 1000 };
    },
    async close() {
      await store.close();
      return countRows(file);
    },
  };
}

interface Measured {
  variant: Variant;
  /** The contender this one is compared with, round by round. */
  baseline: number;
  rates: number[];
  events: number;
  rows: number;
}

async function run(): Promise<Section> {
  const dir = mkdtempSync(join(tmpdir(), 'runledger-bench-store-'));
  const file = (name: string) => join(dir, `${name}.db`);
  const measured: Measured[] = [
    { variant: rawVariant(file('raw'), 'FULL'), baseline: 0 },
    { variant: storeVariant(file('store-1'), 'FULL', 1), baseline: 0 },
    {
      variant: storeVariant(file('store-n'), 'FULL', CONCURRENT_APPENDERS),
      baseline: 0,
    },
    { variant: rawVariant(file('raw-normal'), 'NORMAL'), baseline: 3 },
    { variant: storeVariant(file('store-normal'), 'NORMAL', 1), baseline: 3 },
    { variant: rawVariant(file('raw-ordered'), 'FULL', 'time-ordered'), baseline: 0 },
  ].map((entry) => ({ ...entry, rates: [], events: 0, rows: 0 }));
  try {
    for (const entry of measured) entry.events += (await entry.variant.runFor(WARMUP_MS)).events;
    // Short rounds, each contender in turn and in a rotating order: the disk of a shared host
    // drifts by several times within seconds, and a drift then lands on every contender alike.
    for (let round = 0; round < ROUNDS; round += 1) {
      for (let k = 0; k < measured.length; k += 1) {
        const entry = measured[(round + k) % measured.length];
        const result = await entry.variant.runFor(ROUND_MS);
        entry.rates.push(result.events / result.seconds);
        entry.events += result.events;
      }
      process.stdout.write(`round ${round + 1}/${ROUNDS}\r`);
    }
  } finally {
    for (const entry of measured) entry.rows = await entry.variant.close();
    rmSync(dir, { recursive: true, force: true });
  }
  for (const entry of measured) {
    if (entry.rows !== entry.events)
      throw new Error(
        `${entry.variant.label}: ${entry.events} events acknowledged, ${entry.rows} rows`,
      );
  }

  /** Median over rounds of the contender's rate over its baseline's in the same round. */
  const ratioOf = (entry: Measured) =>
    median(entry.rates.map((rate, i) => rate / measured[entry.baseline].rates[i]));
  const rows = measured.map((entry) => {
    const rate = median(entry.rates);
    const perBatchMs = (1000 * BATCH * entry.variant.writers) / rate;
    return [
      entry.variant.label,
      count(rate),
      range(entry.rates),
      ms(perBatchMs),
      entry.baseline === measured.indexOf(entry) ? 'baseline' : ratio(ratioOf(entry)),
    ];
  });
  const [raw, sequential, concurrent, rawNormal, storeNormal, rawOrdered] = measured;
  const sequentialRatio = ratioOf(sequential);
  const perBatch = (entry: Measured) => (1000 * BATCH) / median(entry.rates);
  return {
    name: 'store',
    title: 'Store appends: SqliteEventStore vs raw better-sqlite3 (batches of 100)',
    measuredAt: new Date().toISOString(),
    machine: describeMachine(),
    revision: codeRevision(),
    method: [
      `Each contender appends batches of ${BATCH} events (message.added data of ~${TEXT.length} characters of text, sealed metadata with two 64-character hashes, a random UUID id each) to its own fresh SQLite file in a temp directory, in WAL mode. After a ${WARMUP_MS} ms warm-up each, the contenders take turns for ${ROUNDS} rounds of ${ROUND_MS} ms, in a rotating order. Events/s is the median round (and the range of all rounds); "vs baseline" is the median over rounds of the contender's rate divided by its baseline's rate in the same round, which cancels most of the drift of a shared disk.`,
      "Baseline: raw better-sqlite3 with the store's exact schema (same columns, AUTOINCREMENT key, UNIQUE (id_scope, id), UNIQUE (stream, revision)) and pragmas, one prepared INSERT per event and one transaction per batch, serializing data and metadata with JSON.stringify like the store. It does not look up ids for idempotency, read the stream head or check an expected revision: that is the store's overhead being measured.",
      `Measured: \`SqliteEventStore.append(stream, ${BATCH} events)\` with synchronous=FULL, each append awaited before the next (one transaction and one fsync per batch, like the baseline); then ${CONCURRENT_APPENDERS} appenders on ${CONCURRENT_APPENDERS} streams at once, each awaiting its own appends, which group commit coalesces into shared transactions. The synchronous=NORMAL pair (in WAL mode: no fsync at commit, only at checkpoints) shows mostly the CPU cost; it is for reading the result, not a target.`,
    ],
    table: {
      columns: [
        'Contender',
        'Events/s (median)',
        'Events/s (rounds)',
        'Time per batch',
        'vs baseline',
      ],
      rows,
    },
    targets: [
      {
        subject: `store append, sequential batches of ${BATCH}, vs raw better-sqlite3 (synchronous=FULL)`,
        target: `≥ ${TARGET_RATIO}× baseline events/s`,
        measured: `${ratio(sequentialRatio, 3)} (${count(median(sequential.rates))} vs ${count(median(raw.rates))} events/s)`,
        met: sequentialRatio >= TARGET_RATIO,
      },
    ],
    notes: [
      `With ${CONCURRENT_APPENDERS} concurrent appenders the store reaches ${ratio(ratioOf(concurrent))} of the baseline's events/s: group commit shares one transaction and one fsync among the appends of an event-loop turn.`,
      `Without fsync at commit (synchronous=NORMAL) the store does ${ratio(ratioOf(storeNormal))} of raw inserts: its own work per append (an idempotency lookup of every id, the head read, the promise and the group-commit turn) costs about ${ms(perBatch(storeNormal) - perBatch(rawNormal))} per batch of ${BATCH}.`,
      `The baseline takes ${ms(perBatch(raw))} per batch with synchronous=FULL and ${ms(perBatch(rawNormal))} with NORMAL: ${perBatch(raw) > perBatch(rawNormal) ? `waiting for fsync is about ${Math.round((100 * (perBatch(raw) - perBatch(rawNormal))) / perBatch(raw))}% of a durable batch on this disk` : 'fsync costs nothing measurable on this disk at this batch size'}. The same raw inserts with time-ordered (UUIDv7-style) ids run at ${ratio(ratioOf(rawOrdered))} the baseline's rate: with random ids, most of a commit is SQLite writing the id-index pages that 100 scattered keys dirty.`,
      'Time per batch is the mean wall time of one append seen by one writer (for the concurrent variant, while sharing commits with the others).',
    ],
  };
}

export const storeBench: Bench = { name: 'store', order: 10, run };
