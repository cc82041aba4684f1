/**
 * How far a follower of the log (the projector, the mirror, the client surface) is behind it,
 * and the one rule readiness applies to each: caught up within a bound of time. The time is
 * how long the oldest event the follower has not handled yet has waited, not the age of the
 * last one it handled: after a quiet hour, one new event would otherwise read as an hour of lag.
 */
import { UnreadableEventError, type EventStoreReader } from './event-store.port';

export interface FollowerLag {
  /** Log positions between the follower and the head; 0 when nothing waits. */
  events: number;
  /** How long the oldest waiting event has waited; 0 when nothing waits. */
  seconds: number;
  /** The oldest waiting event, when it cannot be read: the follower cannot pass it. */
  unreadable?: UnreadableEventError['event'];
}

export const CAUGHT_UP: FollowerLag = Object.freeze({ events: 0, seconds: 0 });

export async function followerLag(
  log: Pick<EventStoreReader, 'readAll' | 'headPosition'>,
  position: number,
  /** The streams it follows; every stream when absent. */
  streamPrefix?: string,
  now: number = Date.now(),
): Promise<FollowerLag> {
  let next: { recordedAt: string } | undefined;
  let unreadable: UnreadableEventError['event'] | undefined;
  try {
    [next] = await log.readAll({ fromPosition: position + 1, maxCount: 1, streamPrefix });
  } catch (error) {
    // Its place and time are known without its JSON: the lag is still measured.
    if (!(error instanceof UnreadableEventError)) throw error;
    next = unreadable = error.event;
  }
  if (!next) return CAUGHT_UP;
  const head = await log.headPosition({ streamPrefix });
  return {
    events: Math.max(1, head - position),
    seconds: Math.max(0, (now - Date.parse(next.recordedAt)) / 1000),
    ...(unreadable === undefined ? {} : { unreadable }),
  };
}

/**
 * Readiness's verdict on a follower, measured when asked: null while the oldest event it has
 * not handled has waited at most `maxLagMs`, else why not. A log that cannot be read is not
 * ready either, and says so rather than failing the probe.
 */
export async function lagProblem(
  measure: () => Promise<FollowerLag>,
  maxLagMs: number,
): Promise<string | null> {
  let lag: FollowerLag;
  try {
    lag = await measure();
  } catch (error) {
    return `lag unknown: the log could not be read (${String(error)})`;
  }
  // It waits for an operator, however young it is (docs/operations.md, damaged events).
  if (lag.unreadable !== undefined) {
    const { id, stream, revision, position } = lag.unreadable;
    return `held at an unreadable event: event ${id} (stream ${stream}, revision ${revision}, position ${position}), ${lag.events} positions back`;
  }
  if (lag.seconds * 1000 <= maxLagMs) return null;
  return `behind the log: the oldest event not yet handled has waited ${lag.seconds.toFixed(1)} s (over ${maxLagMs} ms), ${lag.events} positions back`;
}
