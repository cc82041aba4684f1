/**
 * The fan-out's two delicate moments, driven step by step against an in-memory log and a
 * response whose socket drains only when the test says so: the switch from catch-up to the
 * live feed while the follower moves on, and the bounded backlog of a socket that stalls.
 */
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { Logger } from '@nestjs/common';
import type {
  EventStore,
  ReadAllOptions,
  RecordedEvent,
  SubscribeOptions,
  Subscription,
} from '@runledger/event-store';
import { runStream } from '@runledger/domain';
import { Metrics } from '@runledger/observability';
import type { FastifyReply } from 'fastify';
import type { AppConfig } from '../config/config';
import { SseFanout } from './sse-fanout.service';
import { eventFrame } from './sse-frame';

/** A log in memory. Reads see the log as it was when they were called, like SQLite's. */
class MemoryLog {
  readonly events: RecordedEvent[] = [];
  /** Reads (numbered from 1) that wait for `release()` before answering. */
  readonly held = new Set<number>();
  /** The number of the read now waiting, if any. */
  parked: number | null = null;
  private reads = 0;
  private releaseParked: () => void = () => undefined;
  private readonly wakers = new Set<() => void>();

  add(runId: string, threadId = 'thread-1', tenantId = 'tenant-a'): RecordedEvent {
    const position = this.events.length + 1;
    const event: RecordedEvent = {
      id: `e${position}`,
      stream: runStream(tenantId, runId),
      type: 'message.added',
      revision: this.events.filter((e) => e.stream === runStream(tenantId, runId)).length,
      position,
      data: { text: `event ${position}` },
      metadata: { tenantId, runId, threadId },
      recordedAt: new Date(0).toISOString(),
    };
    this.events.push(event);
    for (const wake of [...this.wakers]) wake();
    return event;
  }

  release(): void {
    this.parked = null;
    this.releaseParked();
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    this.reads += 1;
    const snapshot = this.events
      .filter((e) => e.position >= (options.fromPosition ?? 0))
      .filter((e) => e.stream.startsWith(options.streamPrefix ?? ''))
      .filter((e) => options.stream === undefined || e.stream === options.stream)
      .slice(0, options.maxCount ?? Infinity);
    if (this.held.has(this.reads)) {
      this.parked = this.reads;
      await new Promise<void>((resolve) => (this.releaseParked = resolve));
    }
    return snapshot;
  }

  async headPosition(): Promise<number> {
    return this.events.length;
  }

  subscribeToAll(options: SubscribeOptions = {}): Subscription {
    const from = options.fromPosition;
    let cursor = typeof from === 'number' ? from : 0;
    let closed = false;
    let wake: () => void = () => undefined;
    const wakers = this.wakers;
    const events = this.events;
    const waker = () => wake();
    wakers.add(waker);
    async function* follow(): AsyncGenerator<readonly RecordedEvent[]> {
      while (!closed) {
        const next = events.find((e) => e.position > cursor);
        if (next) {
          cursor = next.position;
          yield [next];
          continue;
        }
        await new Promise<void>((resolve) => (wake = resolve));
      }
    }
    const iterator = follow();
    return {
      [Symbol.asyncIterator]: () => iterator,
      close: async () => {
        closed = true;
        wakers.delete(waker);
        wake();
        await iterator.return(undefined);
      },
    };
  }
}

/** A response whose writes complete only when `drain()` is called (a socket the test controls). */
class StalledResponse extends Writable {
  readonly received: string[] = [];
  private pending: (() => void)[] = [];
  /** What the fan-out asks of the connection: whether it is gone, to end it, and its end. */
  readonly socket = Object.assign(new EventEmitter(), {
    destroyed: false,
    end: (): void => undefined,
  });

  /** `fast`: every write completes at once, like a socket that always drains. */
  constructor(private readonly fast = false) {
    super({ highWaterMark: 1 });
  }

  writeHead(): this {
    return this;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.received.push(chunk.toString('utf8'));
    if (this.fast) setImmediate(done);
    else this.pending.push(done);
  }

  /** Lets the socket take everything written so far. */
  async drain(): Promise<void> {
    while (this.pending.length > 0) {
      const pending = this.pending;
      this.pending = [];
      for (const done of pending) done();
      await ticks();
    }
  }

  ids(): number[] {
    return this.received.flatMap((frame) =>
      frame.includes('\nevent: ') ? [Number(/^id: (\d+)/.exec(frame)![1])] : [],
    );
  }
}

async function ticks(n = 5): Promise<void> {
  for (let i = 0; i < n; i += 1) await new Promise((resolve) => setImmediate(resolve));
}

/** Lets the event loop run until `done` holds; fails the test when it never does. */
async function settle(done: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !done(); i += 1) await ticks(1);
  if (!done()) throw new Error('the fan-out did not reach the expected state');
}

function fanoutOver(
  log: MemoryLog,
  sse: Partial<AppConfig['sse']> = {},
): { fanout: SseFanout; metrics: Metrics } {
  const metrics = new Metrics();
  const config = {
    sse: { maxBufferBytes: 1_000_000, sendTimeoutMs: 60_000, heartbeatMs: 60_000, ...sse },
  } as AppConfig;
  return { fanout: new SseFanout(log as unknown as EventStore, config, metrics), metrics };
}

function replyTo(res: StalledResponse): FastifyReply {
  return {
    hijack: () => undefined,
    raw: res as unknown as ServerResponse,
    request: { method: 'GET' },
  } as unknown as FastifyReply;
}

describe('SseFanout', () => {
  // The overflow warning is expected here; the app's logger is not set up in a unit test.
  beforeAll(() => Logger.overrideLogger(false));

  it('joins the live feed at a position boundary: no gap, no duplicate, while the follower moves on', async () => {
    const log = new MemoryLog();
    log.add('r1');
    log.add('r1');
    log.add('r1');
    const { fanout } = fanoutOver(log);
    const res = new StalledResponse(true);
    log.held.add(1).add(3);

    await fanout.open(
      replyTo(res),
      { kind: 'run', tenantId: 'tenant-a', runId: 'r1' },
      { after: 0, field: 'from' },
    );
    await settle(() => log.parked === 1);
    // The first catch-up read is held: the follower dispatches 4 and 5 meanwhile.
    log.add('r1');
    log.add('r2');
    await ticks();
    log.release();
    // Read 2 finds 4; read 3 finds nothing after 4 and is held while 6 is dispatched: the
    // cursor may move only to the follower position taken before that read (5), not past 6.
    await settle(() => log.parked === 3);
    log.add('r1');
    await ticks();
    log.release();
    await settle(() => res.ids().length === 5);
    log.add('r1');
    await settle(() => res.ids().length === 6);
    log.add('r1');
    await settle(() => res.ids().length === 7);

    expect(res.ids()).toEqual([1, 2, 3, 4, 6, 7, 8]);
    await fanout.onModuleDestroy();
  });

  it('follows a thread across runs and never crosses tenants', async () => {
    const log = new MemoryLog();
    const { fanout } = fanoutOver(log);
    const res = new StalledResponse();
    await fanout.open(
      replyTo(res),
      { kind: 'thread', tenantId: 'tenant-a', threadId: 'th' },
      { after: 0, field: 'from' },
    );
    await ticks();
    log.add('r1', 'th');
    log.add('r2', 'th');
    log.add('r3', 'other');
    log.add('r4', 'th', 'tenant-b');
    log.add('r2', 'th');
    await ticks(20);
    await res.drain();
    expect(res.ids()).toEqual([1, 2, 5]);
    await fanout.onModuleDestroy();
  });

  it('queues behind a stalled socket up to SSE_MAX_BUFFER_BYTES, then sends overflow with the last position written', async () => {
    const log = new MemoryLog();
    log.add('r1');
    // Room for four frames (one the socket holds unsent, three queued), not five.
    const frameBytes = eventFrame(log.events[0]).length;
    const { fanout, metrics } = fanoutOver(log, { maxBufferBytes: Math.floor(4.5 * frameBytes) });
    const res = new StalledResponse();
    await fanout.open(replyTo(res), { kind: 'run', tenantId: 'tenant-a', runId: 'r1' }, undefined);
    await res.drain(); // the start frame
    log.add('r1'); // 2: written; the socket now holds it unsent
    await ticks();
    log.add('r1'); // 3, 4, 5: queued, within the bound
    log.add('r1');
    log.add('r1');
    await ticks();
    expect(
      (await metrics.registry.getSingleMetric('runledger_sse_overflows_total')?.get())?.values[0]
        ?.value,
    ).toBe(0);

    // The socket drains: the queue is flushed in order.
    await res.drain();
    expect(res.ids()).toEqual([2, 3, 4, 5]);

    log.add('r1'); // 6: written, unsent
    await ticks();
    for (let i = 0; i < 4; i += 1) log.add('r1'); // 7..10: the fourth queued one passes the budget
    await ticks();
    await res.drain();
    expect(res.ids()).toEqual([2, 3, 4, 5, 6]);
    expect(res.received[res.received.length - 1]).toBe(
      'event: overflow\ndata: {"resumeFrom":6}\n\n',
    );
    expect(res.writableEnded).toBe(true);
    expect(
      (await metrics.registry.getSingleMetric('runledger_sse_overflows_total')?.get())?.values[0]
        ?.value,
    ).toBe(1);
    await fanout.onModuleDestroy();
  });

  it('sends overflow to a socket that takes nothing for SSE_SEND_TIMEOUT_MS, with no new event', async () => {
    const log = new MemoryLog();
    const { fanout, metrics } = fanoutOver(log, { sendTimeoutMs: 100 });
    const res = new StalledResponse();
    await fanout.open(replyTo(res), { kind: 'run', tenantId: 'tenant-a', runId: 'r1' }, undefined);
    await res.drain(); // the start frame
    log.add('r1'); // 1: written; the socket never takes it
    await ticks();
    // Past the send timeout, before the grace for the last frame (one more timeout) ends.
    await new Promise((resolve) => setTimeout(resolve, 150));
    await res.drain();
    expect(res.ids()).toEqual([1]);
    expect(res.received[res.received.length - 1]).toBe(
      'event: overflow\ndata: {"resumeFrom":1}\n\n',
    );
    expect(res.writableEnded).toBe(true);
    expect(
      (await metrics.registry.getSingleMetric('runledger_sse_overflows_total')?.get())?.values[0]
        ?.value,
    ).toBe(1);
    await fanout.onModuleDestroy();
  });

  it('closes a stream whose client ends its side of the connection, and feeds it no more', async () => {
    const log = new MemoryLog();
    const { fanout, metrics } = fanoutOver(log);
    const res = new StalledResponse(true);
    await fanout.open(replyTo(res), { kind: 'run', tenantId: 'tenant-a', runId: 'r1' }, undefined);
    log.add('r1');
    await settle(() => res.ids().length === 1);
    res.socket.emit('end');
    expect(res.destroyed).toBe(true);
    log.add('r1');
    await ticks();
    expect(res.ids()).toEqual([1]);
    expect(
      (await metrics.registry.getSingleMetric('runledger_sse_clients')?.get())?.values[0]?.value,
    ).toBe(0);
    await fanout.onModuleDestroy();
  });

  it('keeps a socket that drains within SSE_SEND_TIMEOUT_MS', async () => {
    const log = new MemoryLog();
    const { fanout, metrics } = fanoutOver(log, { sendTimeoutMs: 200 });
    const res = new StalledResponse();
    await fanout.open(replyTo(res), { kind: 'run', tenantId: 'tenant-a', runId: 'r1' }, undefined);
    for (let i = 0; i < 5; i += 1) {
      log.add('r1');
      await new Promise((resolve) => setTimeout(resolve, 60));
      await res.drain();
    }
    expect(res.ids()).toEqual([1, 2, 3, 4, 5]);
    expect(res.writableEnded).toBe(false);
    expect(
      (await metrics.registry.getSingleMetric('runledger_sse_overflows_total')?.get())?.values[0]
        ?.value,
    ).toBe(0);
    await fanout.onModuleDestroy();
  });
});
