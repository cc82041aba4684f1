/**
 * Server-Sent Events for run and thread streams: every event after a client's position,
 * then live, in log order, without gap or duplicate across reconnects.
 *
 * - **One shared follower** per process: a single `subscribeToAll` over the run streams,
 *   started at the log head when the first client connects. For each event it looks up the
 *   clients watching its run and its thread (two map lookups), serialises the event to its
 *   SSE frame once — only when someone watches — and hands that same Buffer to each. Its
 *   `position` is the last event it dispatched: every run event up to it was offered to
 *   every attached client.
 * - **Each client catches up on its own, then joins at a position boundary.** A client
 *   starts after a position (Last-Event-ID, `?from=`, or the head at connect) and reads the
 *   store (`readAll` pages after its cursor), writing at its socket's pace ('drain'). In the
 *   same synchronous step in which it finds its cursor at or past the follower's position
 *   it is attached, so no event can be dispatched in between (no gap), and live events at or
 *   below its cursor are skipped (no duplicate). A read that finds nothing after the cursor
 *   proves there is no such event up to the follower position taken before the read, so the
 *   cursor moves there (the follower may stand on another stream's event).
 *   Catch-up frames are serialised per client: they are read per client anyway, and a
 *   client replaying history is the exception, not the fan-out.
 * - **Bounded backlog**: live frames go to the socket while `write()` accepts them; after a
 *   false they queue until 'drain'. More than SSE_MAX_BUFFER_BYTES waiting, or a socket that
 *   took nothing for SSE_SEND_TIMEOUT_MS (sse-client.ts): the client gets `overflow` with
 *   `resumeFrom` (the last position written), the stream closes and the queue is dropped —
 *   never the events: the client resumes from the log. The follower lets I/O
 *   run every YIELD_EVERY events, so a socket can drain within a large burst.
 * - No batching of our own: node:http corks a socket on a write until the next tick, so the
 *   events of a burst (dispatched in one run of microtasks) leave in one writev per socket.
 * - One heartbeat timer for all clients. A follower failure is logged and the follower
 *   resubscribes from its position; attached clients notice nothing but the delay.
 * - The follower is a handler on the log's one follower (CheckpointedProcessor) whose
 *   checkpoint lives in memory: live streams start from the head, and a client resumes from
 *   its own Last-Event-ID anyway.
 * - A thread's catch-up reads that thread's events (`readAll` by thread, an index in the
 *   embedded store), never every tenant's log.
 */
import type { ServerResponse } from 'node:http';
import { Inject, Injectable, Logger, type OnModuleDestroy } from '@nestjs/common';
import {
  RUN_STREAM_PREFIX,
  SliceClock,
  nextTurn,
  parseStreamName,
  runStream,
} from '@runledger/domain';
import {
  CheckpointedProcessor,
  EVENT_STORE,
  PAGE_CHARS,
  UnreadableEventError,
  type BatchHandler,
  type EventStore,
  type RecordedEvent,
} from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import type { FastifyReply } from 'fastify';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { headAtLeast } from '../http/head-bound';
import { logUnreadable, unreadableView } from '../runs/run-log.service';
import { SseClient, type OverflowReason, type StreamWatch } from './sse-client';
import { eventFrame, startFrame, viewFrame } from './sse-frame';

/** Events read per catch-up page; fewer when they are large (PAGE_CHARS). */
const CATCH_UP_PAGE = 500;
/** Events the follower dispatches before it lets I/O (drains, requests) run. */
const YIELD_EVERY = 64;
/** Wait before the follower resubscribes after its subscription failed. */
const RESUBSCRIBE_MS = [100, 500, 1000, 5000];

const SSE_HEADERS = {
  'Content-Type': 'text/event-stream; charset=utf-8',
  'Cache-Control': 'no-cache',
  Connection: 'keep-alive',
  // nginx buffers proxied responses unless told not to, which would hold events back.
  'X-Accel-Buffering': 'no',
};

/**
 * Takes over the reply and sends a stream's headers; null when there is no stream to write:
 * the client is already gone, or asked with HEAD (Fastify serves HEAD with the GET handler),
 * which gets the headers and an end instead of a stream that never ends.
 */
export function takeOverForSse(reply: FastifyReply): ServerResponse | null {
  reply.hijack();
  const res = reply.raw;
  if (res.destroyed || !res.socket || res.socket.destroyed) return null;
  res.writeHead(200, { ...SSE_HEADERS, 'X-Request-Id': reply.request.id });
  if (reply.request.method !== 'HEAD') return res;
  res.end();
  return null;
}

function runKey(tenantId: string, runId: string): string {
  return `r\u0000${tenantId}\u0000${runId}`;
}

function threadKey(tenantId: string, threadId: string): string {
  return `t\u0000${tenantId}\u0000${threadId}`;
}

function keyOf(watch: StreamWatch): string {
  return watch.kind === 'run'
    ? runKey(watch.tenantId, watch.runId)
    : threadKey(watch.tenantId, watch.threadId);
}

function text(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

/** Whether a run event belongs to the watch; the server stamps tenant and thread into each. */
function matches(watch: StreamWatch, event: RecordedEvent): boolean {
  if (event.metadata.tenantId !== watch.tenantId) return false;
  return watch.kind === 'run'
    ? event.stream === runStream(watch.tenantId, watch.runId)
    : event.metadata.threadId === watch.threadId;
}

/** Where a client asked a stream to start: after a position, named by the field it came in. */
export interface StreamStart {
  after: number;
  field: string;
}

@Injectable()
export class SseFanout implements OnModuleDestroy, BatchHandler {
  private readonly logger = new Logger('sse');
  /** Attached (live) clients by run or thread key. */
  private readonly watchers = new Map<string, Set<SseClient>>();
  /** Every open client, catching up or live. */
  private readonly clients = new Set<SseClient>();
  /** One for every catch-up: clients catching up together hold the loop for one slice a turn. */
  private readonly catchUpClock = new SliceClock();
  private started: Promise<void> | null = null;
  private follower: CheckpointedProcessor | null = null;
  private heartbeat: NodeJS.Timeout | null = null;
  private stopping = false;
  /** Last run event the follower dispatched (or the head it started from). */
  private position = 0;

  constructor(
    @Inject(EVENT_STORE) private readonly store: EventStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly metrics: Metrics,
  ) {}

  /**
   * Takes over the reply and streams `watch` from after `start` (undefined: the head now).
   * Access has been checked by the caller; what fails here before the headers are sent
   * (the store unreachable) is still answered as a JSON error.
   */
  async open(reply: FastifyReply, watch: StreamWatch, start?: StreamStart): Promise<void> {
    await this.ensureFollowing();
    const head = await headAtLeast(this.store, start?.field ?? 'from', start?.after);
    const from = start?.after ?? head;
    // Gone while we looked up where to start (its 'close' has passed, nothing would clean
    // up), or a HEAD: no client to follow.
    const res = takeOverForSse(reply);
    if (res === null) return;
    const client = new SseClient(res, watch, from, {
      maxBufferBytes: this.config.sse.maxBufferBytes,
      sendTimeoutMs: this.config.sse.sendTimeoutMs,
      onOverflow: (behind, reason) => this.overflowed(behind, reason),
    });
    this.clients.add(client);
    this.metrics.sseClients.inc();
    res.on('close', () => {
      if (!this.clients.delete(client)) return;
      this.detach(client);
      this.metrics.sseClients.dec();
    });
    client.writeRaw(startFrame(from));
    this.catchUp(client).catch((error: unknown) => {
      // The client reconnects with its Last-Event-ID and resumes where this stream stopped.
      this.logger.warn({
        msg: 'SSE catch-up failed; the stream was closed',
        watch,
        position: client.cursor,
        error: String(error),
      });
      client.end();
    });
  }

  onModuleDestroy(): Promise<void> {
    // Before the HTTP server closes: it waits for open connections, and streams never end.
    this.stopping = true;
    for (const client of this.clients) client.end(undefined, 0);
    return this.stopFollowing();
  }

  private async catchUp(client: SseClient): Promise<void> {
    const { watch } = client;
    // A run's events all lie in one stream, a thread's are indexed: the store skips the others
    // (not a scan of every tenant's log after the cursor).
    const filter =
      watch.kind === 'run'
        ? { stream: runStream(watch.tenantId, watch.runId) }
        : {
            streamPrefix: RUN_STREAM_PREFIX,
            thread: { tenantId: watch.tenantId, threadId: watch.threadId },
          };
    for (;;) {
      // Before each page too, and again after the turn: a page of large events takes tens of
      // milliseconds, and the clients that resume together after a turn (or start together,
      // once the follower has started) each read one in that turn. Twenty clients of a run of
      // 32 KiB events held the loop for over a second. Now one reads, and the others wait.
      while (this.catchUpClock.due()) await this.catchUpClock.turn();
      if (client.closed) return;
      const target = this.position;
      if (client.cursor >= target) {
        this.attach(client);
        return;
      }
      // Inclusive, from the cursor itself: an EventStoreDB position is only readable from an
      // event's own position, and the cursor is one (or 0, the start).
      const from = client.cursor;
      let page: RecordedEvent[];
      try {
        page = await this.store.readAll({
          fromPosition: from,
          heldPosition: from,
          maxCount: CATCH_UP_PAGE,
          maxChars: PAGE_CHARS,
          ...filter,
        });
      } catch (error) {
        // A stored event that cannot be read is shown in its place, as a replay shows it, and
        // the stream goes on after it: never a stream that silently stops, nor skips the rest.
        if (!(error instanceof UnreadableEventError)) throw error;
        logUnreadable(this.logger, watch.tenantId, error);
        await client.write(viewFrame(unreadableView(error)), error.event.position);
        client.cursor = error.event.position;
        continue;
      }
      const after = page.filter((event) => event.position > from);
      if (after.length === 0) {
        client.cursor = Math.max(from, target);
        continue;
      }
      for (const event of after) {
        if (client.closed) return;
        if (matches(watch, event)) await client.write(eventFrame(event), event.position);
        client.cursor = event.position;
        // A client that reads as fast as we write never waits on its socket.
        if (this.catchUpClock.due()) await this.catchUpClock.turn();
      }
    }
  }

  private attach(client: SseClient): void {
    client.live = true;
    const key = keyOf(client.watch);
    let set = this.watchers.get(key);
    if (!set) {
      set = new Set();
      this.watchers.set(key, set);
    }
    set.add(client);
  }

  private detach(client: SseClient): void {
    if (!client.live) return;
    client.live = false;
    const key = keyOf(client.watch);
    const set = this.watchers.get(key);
    if (!set) return;
    set.delete(client);
    if (set.size === 0) this.watchers.delete(key);
  }

  private dispatch(event: RecordedEvent): void {
    const tenantId = text(event.metadata.tenantId);
    const runId = parseStreamName(event.stream)?.id;
    if (tenantId !== null && runId !== undefined && this.watchers.size > 0) {
      const threadId = text(event.metadata.threadId);
      const byRun = this.watchers.get(runKey(tenantId, runId));
      const byThread =
        threadId === null ? undefined : this.watchers.get(threadKey(tenantId, threadId));
      if (byRun || byThread) {
        const frame = eventFrame(event);
        if (byRun) this.offer(byRun, frame, event.position);
        if (byThread) this.offer(byThread, frame, event.position);
      }
    }
    this.position = event.position;
  }

  private offer(clients: Set<SseClient>, frame: Buffer, position: number): void {
    // A client that overflows leaves the set as it is walked, which a Set allows.
    for (const client of clients) client.offer(frame, position);
  }

  private overflowed(client: SseClient, reason: OverflowReason): void {
    this.detach(client);
    this.metrics.sseOverflows.inc();
    this.logger.warn({
      msg: 'SSE client fell behind; sent overflow and closed the stream',
      watch: client.watch,
      reason,
      resumeFrom: client.lastWritten,
      maxBufferBytes: this.config.sse.maxBufferBytes,
      sendTimeoutMs: this.config.sse.sendTimeoutMs,
    });
  }

  /** Starts the shared follower at the log head, once, when the first client connects. */
  private ensureFollowing(): Promise<void> {
    this.started ??= (async () => {
      this.position = await this.store.headPosition();
      this.follower = new CheckpointedProcessor(
        this.store,
        this,
        {
          committed: () => undefined,
          failed: (error, position) =>
            this.logger.error({ msg: 'the SSE follower stopped', position, error: String(error) }),
          resubscribing: (error, position, retryInMs) =>
            this.logger.error({
              msg: 'the SSE follower lost its subscription; resubscribing',
              position,
              retryInMs,
              error: String(error),
            }),
        },
        { streamPrefix: RUN_STREAM_PREFIX, batchSize: YIELD_EVERY, resubscribeMs: RESUBSCRIBE_MS },
      );
      this.follower.start();
      this.heartbeat = setInterval(() => {
        for (const client of this.clients) client.heartbeat();
      }, this.config.sse.heartbeatMs);
      this.heartbeat.unref();
    })().catch((error: unknown) => {
      // The next connection tries again; this one is answered with the error.
      this.started = null;
      throw error;
    });
    return this.started;
  }

  /** The follower starts where the fan-out stands: the log head when the first client came. */
  checkpoint(): number {
    return this.position;
  }

  /**
   * Dispatches a batch, then gives the event loop a turn: a batch is dispatched in one go, and
   * without a turn no socket could report 'drain' within a burst, which would overflow
   * healthy clients.
   */
  async handle(batch: readonly RecordedEvent[]): Promise<void> {
    for (const event of batch) this.dispatch(event);
    await nextTurn();
  }

  private async stopFollowing(): Promise<void> {
    this.stopping = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = null;
    await this.follower?.stop();
  }
}
