/**
 * The bytes of the Server-Sent Events wire format runledger sends. Frames are Buffers so
 * one encoding is handed to every client's socket as it is (no per-client UTF-8 encoding).
 */
import type { RecordedEvent } from '@runledger/event-store';
import { toView, type EventView } from '../runs/run-log.service';

/** A comment line: ignored by EventSource, but it keeps proxies and load balancers from timing out. */
export const HEARTBEAT_FRAME = Buffer.from(': heartbeat\n\n');

/**
 * `id: <position>\nevent: <type>\ndata: <json>\n\n`. JSON.stringify escapes every line break
 * inside strings, so the data is always one line; the type comes from the event catalogue,
 * and a line break in it is replaced anyway, since it would end the field and forge others.
 */
export function eventFrame(event: RecordedEvent): Buffer {
  return viewFrame(toView(event));
}

/** The frame of an event as shown: a recorded one, or one the store cannot read (`unreadable`). */
export function viewFrame(view: EventView): Buffer {
  const data = JSON.stringify(view);
  const type = /[\r\n]/.test(view.type) ? view.type.replace(/[\r\n]/g, ' ') : view.type;
  return Buffer.from(`id: ${view.position}\nevent: ${type}\ndata: ${data}\n\n`);
}

/**
 * An `id:` with no data dispatches no event but sets the browser's Last-Event-ID: sent first,
 * it lets a client that received nothing yet resume from where its connection started.
 */
export function startFrame(position: number): Buffer {
  return Buffer.from(`id: ${position}\n\n`);
}

/** The last frame to a client that fell behind: it reconnects with Last-Event-ID: resumeFrom. */
export function overflowFrame(resumeFrom: number): Buffer {
  return Buffer.from(`event: overflow\ndata: ${JSON.stringify({ resumeFrom })}\n\n`);
}
