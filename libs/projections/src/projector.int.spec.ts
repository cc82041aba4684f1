import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  applyToRows,
  applyToThread,
  emptyThread,
  FINISHED_RUNS_KEPT,
  receiptStream,
  runStream,
  sealBatch,
  type ThreadState,
} from '@runledger/domain';
import { SqliteEventStore } from '@runledger/event-store';
import { TENANT, THREAD, ThreadLog } from '../../domain/src/projections/testing/thread-events';
import { Projector } from './projector';
import { ReadModelStore } from './read-model.store';

const dir = mkdtempSync(join(tmpdir(), 'runledger-projector-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const context = { tenantId: 'acme', runId: 'r1', threadId: 'thread-1' };
let revision = -1;
let hash = '';

async function append(log: SqliteEventStore, events: { type: string; data: object }[]) {
  const sealed = sealBatch(
    revision < 0 ? null : { revision, hash },
    context,
    events.map((e, i) => ({
      id: `00000000-0000-7000-8000-${String(revision + 1 + i).padStart(12, '0')}`,
      metadata: {},
      ...e,
    })),
  );
  const result = await log.append(runStream(context.tenantId, 'r1'), sealed);
  revision = result.lastRevision;
  hash = sealed[sealed.length - 1].metadata.hash as string;
  return result.position;
}

const say = (n: number) => ({
  type: 'message.added',
  data: { messageId: `m${n}`, role: 'user', text: `m${n}` },
});

describe('the projector', () => {
  it('reaches the head of a log whose length is a multiple of its yield interval, then follows live', async () => {
    const log = new SqliteEventStore({ file: join(dir, 'events.db'), synchronous: 'NORMAL' });
    const readModels = new ReadModelStore(join(dir, 'read-models.db'));
    await append(log, [
      { type: 'run.started', data: { threadId: 'thread-1', agent: 'a', source: 'api' } },
    ]);
    let head = 0;
    for (let batch = 0; batch < 4; batch += 1) {
      head = await append(
        log,
        Array.from({ length: batch === 3 ? 499 : 500 }, (_, i) => say(batch * 500 + i)),
      );
    }
    const failures: unknown[] = [];
    const projector = new Projector(log, readModels, {
      committed: () => undefined,
      failed: (e) => failures.push(e),
    });
    projector.start();
    await projector.waitFor(head, 10_000);
    const live = await append(log, [say(9999)]);
    await projector.waitFor(live, 5_000);
    await projector.stop();
    const state = readModels.thread('acme', 'thread-1') as ThreadState;
    expect(state.messages).toHaveLength(2000);
    expect(state.position).toBe(live);
    expect(readModels.checkpoint()).toBe(live);
    expect(failures).toEqual([]);

    readModels.clear();
    const rebuild = new Projector(log, readModels, {
      committed: () => undefined,
      failed: (e) => failures.push(e),
    });
    rebuild.start();
    await rebuild.waitFor(live, 10_000);
    await rebuild.stop();
    expect(readModels.thread('acme', 'thread-1')).toEqual(state);
    readModels.close();
    await log.close();
  }, 30_000);

  it("hands the voice seed each message's text parts only, never its tools' outputs", async () => {
    const log = new SqliteEventStore({ file: join(dir, 'spoken.db'), synchronous: 'NORMAL' });
    const readModels = new ReadModelStore(join(dir, 'spoken-read-models.db'));
    revision = -1;
    const output = 'o'.repeat(100_000);
    const head = await append(log, [
      { type: 'run.started', data: { threadId: 'thread-1', agent: 'a', source: 'api' } },
      { type: 'message.added', data: { messageId: 'q', role: 'user', text: 'what failed?' } },
      { type: 'message.added', data: { messageId: 'a', role: 'assistant', text: 'checking' } },
      ...['c1', 'c2'].flatMap((toolCallId) => [
        { type: 'tool.started', data: { toolCallId, toolName: 'read', input: {} } },
        { type: 'tool.finished', data: { toolCallId, output, failed: false } },
      ]),
    ]);
    const projector = new Projector(log, readModels, {
      committed: () => undefined,
      failed: () => undefined,
    });
    projector.start();
    await projector.waitFor(head, 5_000);
    await projector.stop();
    // The tools are grouped into the assistant's message, which the seed reads.
    const whole = readModels.thread('acme', 'thread-1') as ThreadState;
    expect(whole.messages[1].parts.map((part) => part.type)).toEqual([
      'text',
      'tool-read',
      'tool-read',
    ]);
    expect([...readModels.messagesWithTextNewestFirst('acme', 'thread-1')]).toEqual([
      {
        id: 'a',
        role: 'assistant',
        parts: [{ type: 'text', text: 'checking' }],
        metadata: whole.messages[1].metadata,
      },
      {
        id: 'q',
        role: 'user',
        parts: [{ type: 'text', text: 'what failed?' }],
        metadata: whole.messages[0].metadata,
      },
    ]);
    readModels.close();
    await log.close();
  });

  it('counts as past a position when only events of other streams (receipts) follow its last run event', async () => {
    const log = new SqliteEventStore({ file: join(dir, 'others.db'), synchronous: 'NORMAL' });
    const readModels = new ReadModelStore(join(dir, 'others-read-models.db'));
    revision = -1;
    const runHead = await append(log, [
      { type: 'run.started', data: { threadId: 'thread-1', agent: 'a', source: 'api' } },
      say(1),
    ]);
    const receipt = await log.append(receiptStream(context.tenantId, '1'), [
      {
        id: '00000000-0000-7000-9000-000000000001',
        type: 'receipt.consumed',
        data: {},
        metadata: {},
      },
    ]);
    const failures: unknown[] = [];
    const projector = new Projector(log, readModels, {
      committed: () => undefined,
      failed: (e) => failures.push(e),
    });
    projector.start();
    try {
      await projector.waitFor(receipt.position, 2_000);
      expect(projector.current()).toBe(runHead);
      // A position not yet written is still ahead, whatever the log's other streams hold.
      await expect(projector.waitFor(receipt.position + 1, 100)).rejects.toMatchObject({
        name: 'PositionNotReachedError',
        position: runHead,
      });
      expect(failures).toEqual([]);
    } finally {
      await projector.stop();
      readModels.close();
      await log.close();
    }
  });
});

describe('the threads the writer keeps between commits', () => {
  it('are what was committed: a batch that is never committed leaves no trace in them', () => {
    const readModels = new ReadModelStore(join(dir, 'kept-read-models.db'));
    const log = new ThreadLog();
    try {
      const first = readModels.openThread(TENANT, THREAD);
      applyToRows(first, log.runStarted('r1'));
      applyToRows(first, log.toolStarted('r1', 'call-1', 'lookup_order', { id: 1 }));
      readModels.commit([first], 2);
      const committed = readModels.head(TENANT, THREAD)!.header;

      // The next batch folds and then fails before its commit.
      const failed = readModels.openThread(TENANT, THREAD);
      applyToRows(failed, log.toolFinished('r1', 'call-1'));
      applyToRows(failed, log.message('r1', 'm1', 'assistant', 'done'));

      const retried = readModels.openThread(TENANT, THREAD);
      expect(retried).not.toBe(failed);
      expect(retried.header).toEqual(committed);
      expect(retried.messageAt('m1')).toBeUndefined();
      expect(retried.part(retried.tool('r1', 'call-1')!)).toMatchObject({
        state: 'input-available',
      });
    } finally {
      readModels.close();
    }
  });
});

describe('what the writer keeps between commits, in bytes', () => {
  it('counts the memory a kept part takes parsed, not its JSON: an input of many empty objects is ~20× its text', () => {
    const readModels = new ReadModelStore(join(dir, 'kept-bytes-read-models.db'), {
      writerCacheBytes: 4 * 1024 * 1024,
    });
    try {
      // An open tool call whose input is 40,000 `{}`: 120 KB of JSON, ~2.5 MB once parsed.
      const input = { x: Array.from({ length: 40_000 }, () => ({})) };
      const opened = (threadId: string) => {
        const log = new ThreadLog(TENANT, threadId);
        const rows = readModels.openThread(TENANT, threadId);
        applyToRows(rows, log.runStarted('r1'));
        applyToRows(rows, log.toolStarted('r1', 'call-1', 'lookup_order', input));
        readModels.commit([rows], 2);
        return rows;
      };
      const first = opened('kept-a');
      expect(readModels.openThread(TENANT, 'kept-a')).toBe(first);
      readModels.commit([first], 2);
      const second = opened('kept-b');
      // Two of them are more than the 4 MiB budget: the least recently used one was let go.
      expect(readModels.openThread(TENANT, 'kept-b')).toBe(second);
      expect(readModels.openThread(TENANT, 'kept-a')).not.toBe(first);
    } finally {
      readModels.close();
    }
  });
});

describe('a thread of many runs in the store', () => {
  it(`keeps the newest ${FINISHED_RUNS_KEPT} finished runs, as the pure fold does, across commits and a reopened store`, () => {
    const file = join(dir, 'many-runs-read-models.db');
    const log = new ThreadLog();
    const events = [log.runStarted('open')];
    for (let i = 0; i < FINISHED_RUNS_KEPT + 20; i += 1) {
      events.push(log.runStarted(`r${i}`), log.runFinished(`r${i}`));
    }
    const expected = emptyThread(TENANT, THREAD);
    for (const event of events) applyToThread(expected, event);

    // Folded in batches of 7 events, the store closed and reopened half way.
    let readModels = new ReadModelStore(file, { writerCacheBytes: 0 });
    try {
      for (let from = 0; from < events.length; from += 7) {
        if (from === 119) {
          readModels.close();
          readModels = new ReadModelStore(file, { writerCacheBytes: 0 });
        }
        const rows = readModels.openThread(TENANT, THREAD);
        const batch = events.slice(from, from + 7);
        for (const event of batch) applyToRows(rows, event);
        readModels.commit([rows], batch[batch.length - 1].position);
      }
      const stored = readModels.head(TENANT, THREAD)!.header;
      expect(stored.runs).toEqual(expected.runs);
      expect(stored.runs).toHaveLength(FINISHED_RUNS_KEPT + 1);
      expect(stored.runs[1].runId).toBe('r20');
    } finally {
      readModels.close();
    }
  });
});

describe('the export of a thread', () => {
  it('reads messages in pages bounded in bytes of parts, each message once, in order', () => {
    const readModels = new ReadModelStore(join(dir, 'export-read-models.db'));
    try {
      const log = new ThreadLog();
      const rows = readModels.openThread(TENANT, THREAD);
      applyToRows(rows, log.runStarted('r1'));
      // Texts of 1, 3, 5, ... KB: a page of at most 10,000 bytes holds a few of them.
      const sizes = Array.from({ length: 12 }, (_, n) => (2 * n + 1) * 1000);
      for (const [n, size] of sizes.entries()) {
        applyToRows(
          rows,
          log.event('r1', 'message.added', {
            messageId: `m${n}`,
            role: 'user',
            text: `${n}:`.padEnd(size, 'x'),
          }),
        );
      }
      readModels.commit([rows], 13);

      const pages = [...readModels.allMessages(TENANT, THREAD, 200, 10_000)].map((page) =>
        page.map(
          (json) => JSON.parse(json.toString()) as { id: string; parts: { text: string }[] },
        ),
      );
      expect(pages.flat().map((message) => message.id)).toEqual(sizes.map((_, n) => `m${n}`));
      for (const page of pages) {
        const bytes = page.reduce((sum, message) => sum + message.parts[0].text.length, 0);
        // At least one message a page, however large; more only while they fit.
        expect(page.length === 1 || bytes <= 10_000).toBe(true);
      }
      expect(pages.length).toBeGreaterThan(5);
      expect([...readModels.allMessages(TENANT, THREAD)]).toHaveLength(1);
    } finally {
      readModels.close();
    }
  });
});

describe('a read in one snapshot', () => {
  it("sees one commit throughout: another connection's commit between its reads is not in it", () => {
    const file = join(dir, 'snapshot-read-models.db');
    const writer = new ReadModelStore(file);
    const reader = new ReadModelStore(file);
    try {
      const log = new ThreadLog();
      const say = (n: number) =>
        log.event('r1', 'message.added', { messageId: `m${n}`, role: 'user', text: `m${n}` });
      let rows = writer.openThread(TENANT, THREAD);
      applyToRows(rows, log.runStarted('r1'));
      applyToRows(rows, say(1));
      writer.commit([rows], 2);

      // As the projector's worker thread does while a request reads the header, then a page.
      const [head, page] = reader.snapshot(() => {
        const header = reader.head(TENANT, THREAD);
        rows = writer.openThread(TENANT, THREAD);
        applyToRows(rows, say(2));
        writer.commit([rows], 3);
        return [header, reader.messagePage(TENANT, THREAD, 50)] as const;
      });
      expect(head?.messageCount).toBe(1);
      expect(page.messages).toHaveLength(head!.messageCount);
      expect(reader.messagePage(TENANT, THREAD, 50).messages).toHaveLength(2);
    } finally {
      reader.close();
      writer.close();
    }
  });
});
