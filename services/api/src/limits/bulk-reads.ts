/**
 * Bulk reads: a page of a run's events (up to 16 MiB of JSON), a run's replay or audit, a
 * thread's export. Each holds what it read until its client's socket takes it (or the send
 * timeout cuts it off), and reads a whole run or thread a page at a time; forty pages from
 * one key, never read, took the service from 240 MiB to 1.38 GB of RSS. So one API key has
 * at most BULK_READS_PER_KEY in progress; the next wait their turn, in the order they came,
 * and past BULK_READS_WAITING_PER_SLOT times as many waiting the key is refused 429
 * `too_many_bulk_reads`. A waiting request holds a socket and nothing read. A client that
 * resets its connection gives its place up; one that only ends its side is answered in its
 * turn, as every such client is (http-server.ts).
 *
 * The runtime's appends, thread pages (1 MiB at most, and rate limited) and streams (their own
 * slots) are not bulk reads.
 */
import type { Metrics } from '@runledger/observability';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { apiKeyOf } from '../auth/principal';
import type { AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';
import { answerRefusal } from '../http/error.filter';
import { AddRouteConfig } from '../http/route-config';

/** Requests a key may have waiting, per bulk read it may have in progress. */
export const BULK_READS_WAITING_PER_SLOT = 4;

/** Marks a route as a bulk read (its Fastify route config, read before Nest runs). */
export const BulkRead = () => AddRouteConfig({ bulkRead: true });

function isBulkRead(request: FastifyRequest): boolean {
  return (request.routeOptions.config as { bulkRead?: unknown } | undefined)?.bulkRead === true;
}

/**
 * Bulk reads wait for a turn of their key as soon as the key is known (after the onRequest
 * authentication), before a byte is read for them. Register after authenticateRequests.
 */
export function limitBulkReads(
  fastify: FastifyInstance,
  config: AppConfig,
  metrics: Metrics,
): void {
  const waitingPerKey = BULK_READS_WAITING_PER_SLOT * config.bulkReadsPerKey;
  const turns = new KeyedTurns(config.bulkReadsPerKey, waitingPerKey, (running, waiting) => {
    metrics.bulkReads.set({ state: 'running' }, running);
    metrics.bulkReads.set({ state: 'waiting' }, waiting);
  });
  fastify.addHook('onRequest', (request, reply, done) => {
    const principal = request.principal;
    if (!isBulkRead(request) || principal === undefined) {
      done();
      return;
    }
    const leave = turns.enter(apiKeyOf(principal), () => done());
    if (leave === null) {
      const refusal = new ApiError(
        429,
        'too_many_bulk_reads',
        `this API key has ${config.bulkReadsPerKey} bulk reads (pages of a run's events, replays, audits, exports) in progress and ${waitingPerKey} waiting (BULK_READS_PER_KEY); read their answers before asking for more. Nothing was read for this one`,
      );
      answerRefusal(request, reply, refusal, metrics);
      return;
    }
    // The answer sent, cut off, or its connection reset: the turn passes on, or the place in
    // line is given up.
    reply.raw.once('close', leave);
  });
}

interface Waiter {
  start: () => void;
  started: boolean;
}

interface Lane {
  running: number;
  waiting: Waiter[];
}

/**
 * Turns per key: `perKey` holders at once, then up to `waitingPerKey` waiting in order. Every
 * key's lane is dropped once it is empty, so keys that come and go leave nothing behind.
 */
export class KeyedTurns {
  private readonly lanes = new Map<string, Lane>();
  private running = 0;
  private waiting = 0;

  constructor(
    private readonly perKey: number,
    private readonly waitingPerKey: number,
    private readonly counted: (running: number, waiting: number) => void = () => undefined,
  ) {
    this.counted(0, 0);
  }

  /**
   * Calls `start` once the key has a turn (at once, when it has one free), and answers how to
   * leave: give the turn back, or the place in line before it came. Null, and `start` is never
   * called: the key's line is full. Leaving twice is leaving once.
   */
  enter(key: string, start: () => void): (() => void) | null {
    let lane = this.lanes.get(key);
    if (lane === undefined) {
      lane = { running: 0, waiting: [] };
      this.lanes.set(key, lane);
    }
    const waiter: Waiter = { start, started: false };
    if (lane.running < this.perKey) {
      this.begin(lane, waiter);
    } else if (lane.waiting.length < this.waitingPerKey) {
      lane.waiting.push(waiter);
      this.waiting += 1;
      this.counted(this.running, this.waiting);
    } else {
      return null;
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.leave(key, lane, waiter);
    };
  }

  private begin(lane: Lane, waiter: Waiter): void {
    lane.running += 1;
    this.running += 1;
    waiter.started = true;
    this.counted(this.running, this.waiting);
    waiter.start();
  }

  private leave(key: string, lane: Lane, waiter: Waiter): void {
    if (waiter.started) {
      lane.running -= 1;
      this.running -= 1;
      const next = lane.waiting.shift();
      if (next !== undefined) {
        this.waiting -= 1;
        this.begin(lane, next);
      }
    } else {
      lane.waiting.splice(lane.waiting.indexOf(waiter), 1);
      this.waiting -= 1;
    }
    this.counted(this.running, this.waiting);
    // A lane has waiters only while all its turns are taken: with none taken, it is empty.
    if (lane.running === 0) this.lanes.delete(key);
  }

  /** Keys with a turn taken or a place in line now (for tests: an empty lane is dropped). */
  keys(): number {
    return this.lanes.size;
  }
}
