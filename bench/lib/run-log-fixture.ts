/**
 * Writes a large, realistic run log straight into a SqliteEventStore file: the store builds
 * the file (so the schema is exactly its own), then one prepared INSERT in large
 * transactions fills it, far faster than appending through the store's API.
 *
 * The log looks like what the service records: `run-<tenant>-<id>` streams, each opened by
 * run.started and closed by run.finished, made of turns (turn.started, the user's message
 * or transcript, a small model.call, tool.started/tool.finished pairs — some failed —,
 * sometimes an approval.requested/approval.resolved before a tool, a second model.call,
 * the assistant's answer, turn.finished). Every event carries the server's stamp
 * {tenantId, runId, threadId, prevHash, hash}; the hashes are random hex of the real length
 * and chain by prevHash (the projector does not verify them). A fixed number of runs are in
 * flight at once and their events interleave in the log, as concurrent agents' appends do;
 * each thread gets its runs one after another. Optionally one big run of exactly
 * `bigRun.events` events, in a thread of its own, is spread evenly over the whole log.
 *
 * Content is drawn from a seeded PRNG, so the same spec gives the same log (ids and
 * hashes aside).
 */
import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { eventIdScope, runStream } from '@runledger/domain';
import { SqliteEventStore } from '@runledger/event-store';

export interface RunLogSpec {
  file: string;
  /** Events in the log, all told. */
  events: number;
  /** Runs in flight at once, their events interleaved. */
  concurrentRuns: number;
  /** Runs per thread, one after another. */
  runsPerThread: number;
  /** Turns per background run: min and max, inclusive. */
  turns: [number, number];
  tenantId: string;
  /** One run of exactly this many events, in a thread of its own, spread over the log. */
  bigRun?: { threadId: string; events: number };
  seed: number;
}

export interface RunLog {
  file: string;
  events: number;
  /** Position of the last event. */
  head: number;
  threads: number;
  runs: number;
  /** Runs still in flight when the log ends (no run.finished yet). */
  openRuns: number;
  bytes: number;
  seconds: number;
  eventsByType: Record<string, number>;
  /** Mean size of `data` and of `metadata` JSON, in bytes. */
  meanDataBytes: number;
  meanMetadataBytes: number;
  /** A thread of typical size (its runs finished), and its event count. */
  typicalThread: { threadId: string; events: number };
}

interface DraftEvent {
  type: string;
  data: Record<string, unknown>;
}

/** mulberry32: small, fast and good enough to vary the content. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  'the order refund shipped invoice customer account tool result check status payment ' +
  'deploy branch test build failed passed retry config file line error warning review ' +
  'please could you look at this again update ticket summary agent model context window ' +
  'tuesday friday morning later today tomorrow weekly report dashboard metric latency ' +
  'database index query migration rollback release notes approve deny budget limit'
).split(' ');

const TOOLS = ['lookup_order', 'search_docs', 'read_file', 'run_tests', 'http_get', 'sql_query'];
const GUARDED_TOOLS = ['issue_refund', 'deploy', 'send_email'];
const AGENTS = ['support-bot', 'coder', 'ops-assistant', 'sales-helper'];
const MODELS = ['gpt-4o-mini', 'claude-haiku', 'llama-3-8b'];
const SOURCES = ['typed', 'typed', 'typed', 'voice', 'voice', 'api', 'telegram'] as const;
const END_STATUSES = ['completed', 'completed', 'completed', 'completed', 'failed', 'cancelled'];

/** The content of one run, event by event; the stamp is added when it is written. */
class RunScript {
  private readonly queue: DraftEvent[] = [];
  private turn = 0;
  private emitted = 0;
  private finished = false;
  readonly source: (typeof SOURCES)[number];

  constructor(
    private readonly rng: () => number,
    private readonly corpus: string,
    readonly runId: string,
    readonly threadId: string,
    /** Turns to play, or exactly this many events (the big run). */
    private readonly size: { turns: number } | { events: number },
  ) {
    this.source = this.pick(SOURCES);
    this.queue.push({
      type: 'run.started',
      data: {
        threadId,
        agent: this.pick(AGENTS),
        source: this.source,
        title: this.text(4, 9),
        goal: this.text(8, 20),
      },
    });
  }

  get done(): boolean {
    return this.finished;
  }

  next(): DraftEvent {
    if (this.queue.length === 0) this.plan();
    const event = this.queue.shift() as DraftEvent;
    this.emitted += 1;
    if (event.type === 'run.finished') this.finished = true;
    return event;
  }

  private pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.rng() * items.length)];
  }

  private between(min: number, max: number): number {
    return min + Math.floor(this.rng() * (max - min + 1));
  }

  /** About `min`–`max` words of the corpus, cut at a random place. */
  private text(min: number, max: number): string {
    const length = this.between(min, max) * 7;
    const start = Math.floor(this.rng() * (this.corpus.length - length));
    return this.corpus.slice(start, start + length).trim();
  }

  private plan(): void {
    if ('turns' in this.size) {
      if (this.turn < this.size.turns) this.queue.push(...this.playTurn());
      else this.queue.push(this.finish());
      return;
    }
    // The big run: whole turns while they fit, then assistant notes, then run.finished.
    const left = this.size.events - this.emitted;
    if (left > MAX_TURN_EVENTS + 1) this.queue.push(...this.playTurn());
    else if (left > 1) this.queue.push(this.say('assistant', 'message'));
    else this.queue.push(this.finish());
  }

  private finish(): DraftEvent {
    const status = this.pick(END_STATUSES);
    return {
      type: 'run.finished',
      data:
        status === 'failed'
          ? { status, reason: 'tool error', errorText: 'the upstream API answered 503' }
          : { status },
    };
  }

  private say(role: 'user' | 'assistant', kind: 'message' | 'transcript'): DraftEvent {
    const n = this.emitted + this.queue.length;
    const text = role === 'user' ? this.text(6, 30) : this.text(15, 90);
    return kind === 'message'
      ? { type: 'message.added', data: { messageId: `msg-${this.runId}-${n}`, role, text } }
      : { type: 'transcript.added', data: { utteranceId: `utt-${this.runId}-${n}`, role, text } };
  }

  private modelCall(prompt: string): DraftEvent {
    return {
      type: 'model.call',
      data: {
        callId: `call-${this.runId}-${this.emitted + this.queue.length}`,
        model: this.pick(MODELS),
        messages: [
          { role: 'system', content: 'You are a helpful agent. Use the tools when needed.' },
          { role: 'user', content: prompt },
        ],
      },
    };
  }

  private playTurn(): DraftEvent[] {
    this.turn += 1;
    const turnId = `turn-${this.turn}`;
    const kind = this.source === 'voice' ? 'transcript' : 'message';
    const user = this.say('user', kind);
    const events: DraftEvent[] = [
      { type: 'turn.started', data: { turnId, source: this.source } },
      user,
      this.modelCall(String(user.data.text)),
    ];
    const tools = this.between(0, 3);
    for (let k = 0; k < tools; k += 1) {
      const toolCallId = `tc-${this.turn}-${k}`;
      if (this.rng() < 0.08) {
        const toolName = this.pick(GUARDED_TOOLS);
        const input = { target: this.text(1, 3), amount: this.between(1, 500) };
        const approvalId = `appr-${this.turn}-${k}`;
        const allow = this.rng() < 0.8;
        events.push(
          {
            type: 'approval.requested',
            data: {
              approvalId,
              toolCallId,
              toolName,
              input,
              question: `Run ${toolName}?`,
              options: ['allow', 'deny'],
            },
          },
          {
            type: 'approval.resolved',
            data: {
              approvalId,
              decision: allow ? 'allow' : 'deny',
              receipt: `receipt-${approvalId}`,
              decidedBy: 'ops@example.com',
              downgraded: false,
            },
          },
        );
        if (!allow) continue;
        events.push(...this.toolCall(toolCallId, toolName, input));
      } else {
        const toolName = this.pick(TOOLS);
        events.push(...this.toolCall(toolCallId, toolName, { query: this.text(2, 6) }));
      }
    }
    if (tools > 0) events.push(this.modelCall('continue'));
    events.push(this.say('assistant', kind), {
      type: 'turn.finished',
      data: { turnId, status: 'completed' },
    });
    return events;
  }

  private toolCall(toolCallId: string, toolName: string, input: object): DraftEvent[] {
    const failed = this.rng() < 0.1;
    return [
      { type: 'tool.started', data: { toolCallId, toolName, input } },
      {
        type: 'tool.finished',
        data: failed
          ? { toolCallId, toolName, failed, errorText: 'timed out after 30 s' }
          : { toolCallId, toolName, failed, output: { ok: true, result: this.text(5, 40) } },
      },
    ];
  }
}

/** turn.started, user, model.call, 3 × (approval pair + tool pair), model.call, answer, turn.finished. */
const MAX_TURN_EVENTS = 3 + 3 * 4 + 3;

/** Random hex, drawn in large blocks. */
class HexPool {
  private block = '';
  private at = 0;

  take(chars: number): string {
    if (this.at + chars > this.block.length) {
      this.block = randomBytes(1 << 20).toString('hex');
      this.at = 0;
    }
    const hex = this.block.slice(this.at, this.at + chars);
    this.at += chars;
    return hex;
  }
}

const TRANSACTION_ROWS = 50_000;
const BASE_TIME_MS = Date.UTC(2026, 0, 5, 8, 0, 0);
/** Time between two events of the log: 1,000,000 events span about 14 hours. */
const EVENT_SPACING_MS = 50;

export async function writeRunLog(spec: RunLogSpec): Promise<RunLog> {
  const began = performance.now();
  // The store creates the file with its own schema and pragmas (WAL), then steps aside.
  await new SqliteEventStore({ file: spec.file, synchronous: 'NORMAL' }).close();
  const db = new Database(spec.file);
  db.pragma('journal_mode = WAL');
  // A fixture, rebuilt on every bench run: no need to survive a power cut while writing it.
  db.pragma('synchronous = OFF');
  db.pragma('cache_size = -262144');
  const insert = db.prepare<[string, number, string, string, string, string, string, string]>(
    'INSERT INTO events (stream, revision, id_scope, id, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
  );

  const rng = prng(spec.seed);
  const corpus = Array.from({ length: 20_000 }, () => WORDS[Math.floor(rng() * WORDS.length)]).join(
    ' ',
  );
  const hex = new HexPool();
  const chains = new Map<RunScript, { revision: number; hash: string }>();
  const threadEvents = new Map<string, number>();
  const eventsByType: Record<string, number> = {};
  let dataBytes = 0;
  let metadataBytes = 0;
  let runs = 0;
  let threads = 0;

  /** The thread's remaining runs, started one after another in the same pool slot. */
  const runsLeft = new Map<string, number>();
  const newThread = (): RunScript => {
    threads += 1;
    const threadId = `thread-${String(threads).padStart(5, '0')}`;
    runsLeft.set(threadId, spec.runsPerThread);
    return nextRun(threadId);
  };
  const nextRun = (threadId: string): RunScript => {
    runs += 1;
    runsLeft.set(threadId, (runsLeft.get(threadId) ?? 1) - 1);
    const turns = spec.turns[0] + Math.floor(rng() * (spec.turns[1] - spec.turns[0] + 1));
    return new RunScript(rng, corpus, `r${String(runs).padStart(6, '0')}`, threadId, { turns });
  };
  const pool = Array.from({ length: spec.concurrentRuns }, newThread);
  let big: RunScript | null = null;
  let bigStride = 0;
  if (spec.bigRun) {
    runs += 1;
    threads += 1;
    big = new RunScript(rng, corpus, 'r-big', spec.bigRun.threadId, {
      events: spec.bigRun.events,
    });
    bigStride = Math.floor(spec.events / spec.bigRun.events);
  }

  let position = 0;
  const write = db.transaction((rows: number) => {
    for (let i = 0; i < rows; i += 1) {
      position += 1;
      let script: RunScript;
      let slot = -1;
      // The big run takes every bigStride-th place, starting half a stride in.
      if (big && !big.done && (position - 1) % bigStride === bigStride >> 1) {
        script = big;
      } else {
        slot = Math.floor(rng() * pool.length);
        script = pool[slot];
      }
      const event = script.next();
      const chain = chains.get(script) ?? { revision: -1, hash: '0'.repeat(64) };
      const hash = hex.take(64);
      const revision = chain.revision + 1;
      const data = JSON.stringify(event.data);
      const metadata = JSON.stringify({
        tenantId: spec.tenantId,
        runId: script.runId,
        threadId: script.threadId,
        prevHash: chain.hash,
        hash,
      });
      const time = new Date(BASE_TIME_MS + position * EVENT_SPACING_MS).toISOString();
      const id = uuidV7Like(BASE_TIME_MS + position * EVENT_SPACING_MS, position, hex);
      const stream = runStream(spec.tenantId, script.runId);
      insert.run(stream, revision, eventIdScope(stream), id, event.type, data, metadata, time);
      dataBytes += data.length;
      metadataBytes += metadata.length;
      eventsByType[event.type] = (eventsByType[event.type] ?? 0) + 1;
      threadEvents.set(script.threadId, (threadEvents.get(script.threadId) ?? 0) + 1);
      if (script.done) {
        chains.delete(script);
        if (slot >= 0) {
          const left = runsLeft.get(script.threadId) ?? 0;
          pool[slot] = left > 0 ? nextRun(script.threadId) : newThread();
        }
      } else {
        chains.set(script, { revision, hash });
      }
    }
  });
  while (position < spec.events) write(Math.min(TRANSACTION_ROWS, spec.events - position));
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();

  // Threads started at the very end may hold a few events only: name a complete one.
  const complete = [...threadEvents.entries()].filter(
    ([threadId]) => threadId !== spec.bigRun?.threadId && runsLeft.get(threadId) === 0,
  );
  const sizes = complete.map(([, n]) => n).sort((a, b) => a - b);
  const medianSize = sizes[Math.floor(sizes.length / 2)];
  const typical = complete.find(([, n]) => n === medianSize) ?? complete[0];
  const started = eventsByType['run.started'] ?? 0;
  return {
    file: spec.file,
    events: position,
    head: position,
    threads: threadEvents.size,
    runs: started,
    openRuns: started - (eventsByType['run.finished'] ?? 0),
    bytes: statSync(spec.file).size,
    seconds: (performance.now() - began) / 1000,
    eventsByType,
    meanDataBytes: dataBytes / position,
    meanMetadataBytes: metadataBytes / position,
    typicalThread: { threadId: typical[0], events: typical[1] },
  };
}

/** Time first, like the service's UUIDv7 ids, so the id index is written in order. */
function uuidV7Like(timeMs: number, counter: number, hex: HexPool): string {
  const time = timeMs.toString(16).padStart(12, '0');
  const count = counter.toString(16).padStart(8, '0');
  return `${time.slice(0, 8)}-${time.slice(8)}-7${count.slice(0, 3)}-8${count.slice(3, 6)}-${count.slice(6, 8)}${hex.take(10)}`;
}
