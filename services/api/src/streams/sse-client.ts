/**
 * One Server-Sent Events connection: its position in the log, and the writes to its socket
 * with a bounded backlog. The fan-out decides what to send; this decides when the socket
 * takes it, and ends the stream with `overflow` when the client falls too far behind: more
 * than `maxBufferBytes` waiting for its socket, or a socket that took nothing for
 * `sendTimeoutMs`. The budget is in bytes, not frames: one frame may be a 1 MiB event.
 */
import type { ServerResponse } from 'node:http';
import { HEARTBEAT_FRAME, overflowFrame } from './sse-frame';

/** Why a client was sent `overflow`. */
export type OverflowReason = 'buffer' | 'send_timeout';

export interface SseClientLimits<W = StreamWatch> {
  /** Bytes written or queued but not yet taken by the socket, at most. */
  maxBufferBytes: number;
  /** How long the socket may take nothing while bytes wait for it. */
  sendTimeoutMs: number;
  /** Told once, as the client is sent `overflow` (to count it, log it, stop feeding it). */
  onOverflow?: (client: SseClient<W>, reason: OverflowReason) => void;
}

/** What a stream shows: one run, or every run of one thread, always within one tenant. */
export type StreamWatch =
  | { kind: 'run'; tenantId: string; runId: string }
  | { kind: 'thread'; tenantId: string; threadId: string };

/** A tenant's notifications, all or one user's (GET /v1/notifications/stream). */
export interface NotificationsWatch {
  kind: 'notifications';
  tenantId: string;
  user: string | null;
}

interface QueuedFrame {
  bytes: Buffer;
  position: number;
}

/** How long a closed stream's last bytes may wait for a client that does not read. */
export const CLOSE_GRACE_MS = 30_000;

export class SseClient<W = StreamWatch> {
  /** Every event of the watch at or below this position has been written or queued. */
  cursor: number;
  /** Position of the last event handed to the socket: where a resumed stream continues. */
  lastWritten: number;
  /** Receiving the live feed (its catch-up from the store is done). */
  live = false;
  closed = false;
  /** The last write() answered false and no 'drain' followed yet. */
  private blocked = false;
  private queue: QueuedFrame[] = [];
  private queueHead = 0;
  private queuedBytes = 0;
  private drained: (() => void) | null = null;
  private graceTimer: NodeJS.Timeout | null = null;
  private stallTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly res: ServerResponse,
    readonly watch: W,
    from: number,
    private readonly limits: SseClientLimits<W>,
  ) {
    this.cursor = from;
    this.lastWritten = from;
    res.on('drain', () => this.flush());
    // A reset connection can surface as an error on the response; 'close' follows and cleans up.
    res.on('error', () => this.markClosed());
    res.on('close', () => this.markClosed());
    // The server answers a client that ends its side of the connection (http-server.ts),
    // but a stream has no end to answer with: such a client has left (a browser closing its
    // tab ends its side), and its stream closes now, not at the next write that fails.
    res.socket?.once('end', () => res.destroy());
  }

  /** Writes a frame that is not an event (the start id). */
  writeRaw(bytes: Buffer): void {
    if (!this.closed && !this.res.write(bytes)) this.block();
  }

  /**
   * Catch-up: writes one event and resolves once the socket takes more, so a client reading
   * from an old position is paced by its own socket and never builds a backlog.
   */
  async write(bytes: Buffer, position: number): Promise<void> {
    if (this.closed) return;
    this.send(bytes, position);
    if (this.blocked) await new Promise<void>((resolve) => (this.drained = resolve));
  }

  /**
   * Live: writes the frame, or queues it while the socket is backed up. A backlog past
   * maxBufferBytes (counting what node:http holds unsent) ends the stream with `overflow`.
   */
  offer(bytes: Buffer, position: number): void {
    if (this.closed || position <= this.cursor) return;
    this.cursor = position;
    if (!this.blocked) {
      this.send(bytes, position);
      return;
    }
    this.queue.push({ bytes, position });
    this.queuedBytes += bytes.length;
    if (this.queuedBytes + this.res.writableLength > this.limits.maxBufferBytes) {
      this.overflow('buffer');
    }
  }

  /** Ends the stream with `overflow` and where to resume: the client reconnects from there. */
  overflow(reason: OverflowReason): void {
    if (this.closed) return;
    this.limits.onOverflow?.(this, reason);
    // A client that did not read for a send timeout will not read its last frame either.
    this.end(overflowFrame(this.lastWritten), this.limits.sendTimeoutMs);
  }

  /** Only to a socket that drains: a backed-up one gains nothing from more bytes. */
  heartbeat(): void {
    if (!this.closed && !this.blocked && !this.res.write(HEARTBEAT_FRAME)) this.block();
  }

  /**
   * Ends the stream after `last`, dropping anything queued (the client resumes from the log).
   * A client that does not read its last bytes within `graceMs` is disconnected.
   */
  end(last?: Buffer, graceMs = CLOSE_GRACE_MS): void {
    if (this.closed) return;
    this.markClosed();
    this.queue = [];
    this.queueHead = 0;
    this.queuedBytes = 0;
    // The socket ends once the last bytes left: a keep-alive socket would otherwise stay
    // open after the stream and hold up a server shutdown until its keep-alive timeout.
    this.res.once('finish', () => this.res.socket?.end());
    this.res.end(last);
    if (!this.res.writableFinished) {
      this.graceTimer = setTimeout(() => this.res.destroy(), graceMs);
      this.graceTimer.unref();
      this.res.once('close', () => {
        if (this.graceTimer) clearTimeout(this.graceTimer);
      });
    }
  }

  private send(bytes: Buffer, position: number): void {
    this.lastWritten = position;
    if (!this.res.write(bytes)) this.block();
  }

  /** The socket stopped taking bytes: it has sendTimeoutMs to take some again. */
  private block(): void {
    this.blocked = true;
    this.stallTimer ??= setTimeout(() => this.overflow('send_timeout'), this.limits.sendTimeoutMs);
    this.stallTimer.unref();
  }

  private flush(): void {
    this.blocked = false;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = null;
    while (this.queueHead < this.queue.length && !this.blocked) {
      const frame = this.queue[this.queueHead];
      this.queueHead += 1;
      this.queuedBytes -= frame.bytes.length;
      this.send(frame.bytes, frame.position);
    }
    if (this.queueHead === this.queue.length) {
      this.queue = [];
      this.queueHead = 0;
    }
    if (!this.blocked) this.wake();
  }

  private markClosed(): void {
    this.closed = true;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = null;
    this.wake();
  }

  private wake(): void {
    const drained = this.drained;
    this.drained = null;
    drained?.();
  }
}
