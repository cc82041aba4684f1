/**
 * "What needs me": the tenant's notifications (threads that became blocked or finished), as a
 * page or a live SSE stream, and each user's "seen" cursor so a client reconnecting hears
 * only what is new. The cursor is recorded in the log (one small stream per tenant and user),
 * so it is durable, shared by every replica, and survives a rebuild of the read models.
 */
import { Inject, Injectable, Logger, type OnModuleDestroy } from '@nestjs/common';
import { v7 as uuidv7 } from 'uuid';
import { canonicalJson, sha256Hex, type Notification } from '@runledger/domain';
import {
  EVENT_STORE,
  WrongExpectedRevisionError,
  type EventStore,
  type RecordedEvent,
} from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import type { FastifyReply } from 'fastify';
import { APP_CONFIG, type AppConfig } from '../config/config';
import type { ClientCaller } from '../http/caller';
import { headAtLeast } from '../http/head-bound';
import { validateBody } from '../http/validate-body';
import { SseClient, type NotificationsWatch, type OverflowReason } from '../streams/sse-client';
import { takeOverForSse, type StreamStart } from '../streams/sse-fanout.service';
import { startFrame } from '../streams/sse-frame';
import { SurfaceService } from '../surface/surface.service';
import { KeyedSerializer } from '../runs/keyed-serializer';
import { SeenBody } from './seen-body';

export const SEEN_STREAM_PREFIX = 'notifications-seen-';
export const NOTIFICATIONS_SEEN = 'notifications.seen';
/** Items read per page of a live stream's catch-up. */
const STREAM_PAGE = 100;
/** Concurrent "seen" calls of one user on several replicas re-read the cursor this often. */
const MAX_ATTEMPTS = 5;

export interface NotificationPage {
  notifications: Notification[];
  /** Pass as `?after=` for the next page (the last item's position, or `after` when none). */
  nextAfter: number;
  /** The caller's seen cursor. */
  seen: number;
  /** How far the notification view has read the log. */
  position: number;
}

export function seenStream(caller: ClientCaller): string {
  const identity = canonicalJson([caller.tenantId, caller.user]);
  return `${SEEN_STREAM_PREFIX}${sha256Hex(identity)}`;
}

/** `id: <position>`, `event: notification`, one line of JSON data. */
export function notificationFrame(item: Notification): Buffer {
  return Buffer.from(
    `id: ${item.position}\nevent: notification\ndata: ${JSON.stringify(item)}\n\n`,
  );
}

@Injectable()
export class NotificationsService implements OnModuleDestroy {
  private readonly logger = new Logger('sse');
  /** Open live streams: ended at shutdown, since the HTTP server waits for open connections. */
  private readonly streams = new Set<SseClient<NotificationsWatch>>();
  private readonly seenWrites = new KeyedSerializer();

  constructor(
    private readonly surface: SurfaceService,
    @Inject(EVENT_STORE) private readonly log: EventStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly metrics: Metrics,
  ) {}

  /** Items after `after`, or after the caller's seen cursor when `after` is not given. */
  async list(
    caller: ClientCaller,
    query: { after?: number; user?: string; limit: number; minPosition?: number },
  ): Promise<NotificationPage> {
    await headAtLeast(this.log, 'after', query.after);
    await this.surface.waitFor(query.minPosition);
    const seen = await this.seen(caller);
    const after = query.after ?? seen;
    const notifications = this.surface.store.notifications(caller.tenantId, {
      after,
      user: query.user,
      limit: query.limit,
    });
    return {
      notifications,
      nextAfter: notifications[notifications.length - 1]?.position ?? after,
      seen,
      position: this.surface.position(),
    };
  }

  /** The caller's seen cursor: the highest position it marked seen, 0 when none. */
  async seen(caller: ClientCaller): Promise<number> {
    return seenOf(await this.lastSeen(caller));
  }

  /**
   * Moves the caller's cursor forward to `position` (a cursor never moves back: an older
   * position answers the cursor as it is). A position past the log's head is refused.
   */
  async markSeen(caller: ClientCaller, raw: unknown): Promise<{ seen: number }> {
    const { position } = validateBody(SeenBody, raw);
    await headAtLeast(this.log, 'position', position);
    const stream = seenStream(caller);
    // One user's calls move their cursor one at a time here: racing, all but one re-read and
    // retried, and a burst of thirty outran the retries. Only another replica's calls race.
    return this.seenWrites.run(stream, () => this.moveSeen(caller, stream, position));
  }

  private async moveSeen(
    caller: ClientCaller,
    stream: string,
    position: number,
  ): Promise<{ seen: number }> {
    for (let attempt = 1; ; attempt += 1) {
      const last = await this.lastSeen(caller);
      const current = seenOf(last);
      if (position <= current) return { seen: current };
      try {
        await this.log.append(
          stream,
          [
            {
              id: uuidv7(),
              type: NOTIFICATIONS_SEEN,
              data: { position, user: caller.user },
              metadata: { tenantId: caller.tenantId },
            },
          ],
          { expectedRevision: last?.revision ?? 'no_stream' },
        );
        return { seen: position };
      } catch (error) {
        if (!(error instanceof WrongExpectedRevisionError) || attempt >= MAX_ATTEMPTS) throw error;
      }
    }
  }

  /**
   * Streams the items after `after` (undefined: see streamStart), then live.
   * Each frame's `id:` is the item's position, so `Last-Event-ID` resumes with no gap and no
   * repeat. The catch-up is paced by the client's socket.
   */
  async stream(
    reply: FastifyReply,
    caller: ClientCaller,
    query: { after?: StreamStart; user?: string; minPosition?: number },
  ): Promise<void> {
    const start = query.after;
    await headAtLeast(this.log, start?.field ?? 'after', start?.after);
    // Only a named position is waited for: without one a stream during a refold is still whole,
    // items coming in position order as the view folds them.
    if (query.minPosition !== undefined) await this.surface.waitFor(query.minPosition);
    let cursor = start?.after ?? (await this.streamStart(caller));
    const res = takeOverForSse(reply);
    if (res === null) return;
    // The run and thread streams' client: a socket that takes nothing for SSE_SEND_TIMEOUT_MS
    // is sent `overflow` and closed, so a client that never reads cannot hold its slot forever.
    const client = new SseClient<NotificationsWatch>(
      res,
      { kind: 'notifications', tenantId: caller.tenantId, user: query.user ?? null },
      cursor,
      {
        maxBufferBytes: this.config.sse.maxBufferBytes,
        sendTimeoutMs: this.config.sse.sendTimeoutMs,
        onOverflow: (behind, reason) => this.overflowed(behind, reason),
      },
    );
    client.writeRaw(startFrame(cursor));
    this.streams.add(client);
    this.metrics.sseClients.inc();
    let changed = false;
    let wake: (() => void) | null = null;
    const signal = () => {
      const resolve = wake;
      wake = null;
      resolve?.();
    };
    const stopListening = this.surface.onCommit(() => {
      changed = true;
      signal();
    });
    const heartbeat = setInterval(() => client.heartbeat(), this.config.sse.heartbeatMs);
    heartbeat.unref();
    res.on('close', signal);
    try {
      while (!client.closed) {
        changed = false;
        const page = this.surface.store.notifications(caller.tenantId, {
          after: cursor,
          user: query.user,
          limit: STREAM_PAGE,
        });
        for (const item of page) {
          if (client.closed) break;
          cursor = item.position;
          // Paced by the client's socket: resolves once it takes more (or closes).
          await client.write(notificationFrame(item), item.position);
        }
        if (page.length === STREAM_PAGE || changed || client.closed) continue;
        await new Promise<void>((resolve) => (wake = resolve));
      }
    } finally {
      this.streams.delete(client);
      this.metrics.sseClients.dec();
      stopListening();
      clearInterval(heartbeat);
      res.off('close', signal);
    }
  }

  private overflowed(client: SseClient<NotificationsWatch>, reason: OverflowReason): void {
    this.metrics.sseOverflows.inc();
    this.logger.warn({
      msg: 'notification stream client took nothing in time; sent overflow and closed the stream',
      watch: client.watch,
      reason,
      resumeFrom: client.lastWritten,
      sendTimeoutMs: this.config.sse.sendTimeoutMs,
    });
  }

  /**
   * Where a stream with no position starts: after the caller's seen cursor, or, for a caller
   * who never marked anything seen, from now (like the run and thread streams): a first
   * connection is not handed the tenant's whole history.
   */
  private async streamStart(caller: ClientCaller): Promise<number> {
    const last = await this.lastSeen(caller);
    return last === undefined ? this.log.headPosition() : seenOf(last);
  }

  onModuleDestroy(): void {
    // Before the HTTP server closes: it waits for open connections, and streams never end.
    for (const client of this.streams) client.end(undefined, 0);
  }

  private async lastSeen(caller: ClientCaller): Promise<RecordedEvent | undefined> {
    const [last] = await this.log.readStream(seenStream(caller), {
      direction: 'backwards',
      maxCount: 1,
    });
    return last;
  }
}

function seenOf(event: RecordedEvent | undefined): number {
  const position = (event?.data as { position?: unknown } | undefined)?.position;
  return typeof position === 'number' ? position : 0;
}
