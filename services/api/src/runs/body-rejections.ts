/**
 * A request body over its limit is refused before it is read. When it was an append the
 * caller may make, the run's log still records that the attempt happened (docs/api.md, "Size
 * gating") — but recording must not become a way to fill the log for free: refusals of one
 * key to one run are coalesced per REJECTION_MARKER_WINDOW_MS. The first refusal is recorded
 * at once and opens a window; the ones inside it are counted, and when it closes one marker
 * with their `count` (and the largest declared size) is recorded, opening the next window.
 * A steady stream of refusals thus costs one marker per window, whatever its rate.
 */
import { Inject, Injectable, Logger, type BeforeApplicationShutdown } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { Metrics } from '@runledger/observability';
import { AccessPolicy } from '../auth/access.guard';
import { apiKeyOf } from '../auth/principal';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { RunLogService } from './run-log.service';

const APPEND_ROUTE = '/v1/runs/:runId/events';

/**
 * Open windows at most; past it a refusal that would open one is counted in the metrics and
 * logged, not recorded, so a caller cycling through many runs cannot grow this map.
 */
export const MAX_OPEN_WINDOWS = 10_000;

interface Window {
  tenantId: string;
  runId: string;
  /** Refusals since the marker that opened the window. */
  count: number;
  declaredBytes: number;
  timer: NodeJS.Timeout;
}

@Injectable()
export class BodyRejections implements BeforeApplicationShutdown {
  private readonly logger = new Logger('size-gate');
  private readonly windows = new Map<string, Window>();

  constructor(
    private readonly policy: AccessPolicy,
    private readonly runLog: RunLogService,
    private readonly metrics: Metrics,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {}

  async record(request: FastifyRequest): Promise<void> {
    const limitBytes = this.config.bodyMaxBytes;
    // A chunked body declares nothing: what was received when it was cut off is the lower bound.
    const declared = Number(request.headers['content-length']);
    const declaredBytes =
      Number.isSafeInteger(declared) && declared > limitBytes ? declared : limitBytes + 1;
    const runId = (request.params as { runId?: unknown } | undefined)?.runId;
    let marker = 'not_an_append';
    let tenantId: string | undefined;
    if (
      request.method === 'POST' &&
      request.routeOptions.url === APPEND_ROUTE &&
      typeof runId === 'string'
    ) {
      // A key without the append scope was refused 403 before its body (authenticate.hook.ts).
      const principal = this.policy.principalFor(request, 'append');
      tenantId = principal.tenantId;
      marker = await this.mark(`${apiKeyOf(principal)}\u0000${runId}`, {
        tenantId,
        runId,
        declaredBytes,
      });
    }
    this.metrics.bodyRejections.inc({ marker });
    // A coalesced refusal is logged with its window's marker, not one line each.
    if (marker === 'coalesced') return;
    this.logger.warn({
      msg: 'request body over its limit refused unread',
      method: request.method,
      url: request.url,
      runId,
      tenantId,
      declaredBytes,
      limitBytes,
      marker,
    });
  }

  /** Records what is still counted in open windows (the store closes after this). */
  async beforeApplicationShutdown(): Promise<void> {
    const open = [...this.windows.entries()];
    this.windows.clear();
    for (const [, window] of open) clearTimeout(window.timer);
    await Promise.all(
      open
        .filter(([, window]) => window.count > 0)
        .map(([, window]) => this.recordCoalesced(window)),
    );
  }

  private async mark(
    key: string,
    refusal: { tenantId: string; runId: string; declaredBytes: number },
  ): Promise<string> {
    const open = this.windows.get(key);
    if (open) {
      open.count += 1;
      open.declaredBytes = Math.max(open.declaredBytes, refusal.declaredBytes);
      return 'coalesced';
    }
    if (this.windows.size >= MAX_OPEN_WINDOWS) return 'windows_full';
    const { tenantId, runId, declaredBytes } = refusal;
    // The window opens before the marker is written: refusals racing this one join it.
    this.open(key, tenantId, runId);
    const recorded = await this.runLog.recordBodyRejected(tenantId, runId, declaredBytes);
    if (!recorded) this.close(key);
    return recorded ? 'recorded' : 'no_such_run';
  }

  private open(key: string, tenantId: string, runId: string): void {
    const timer = setTimeout(() => {
      void this.closeWindow(key);
    }, this.config.rejectionMarkerWindowMs);
    timer.unref();
    this.windows.set(key, { tenantId, runId, count: 0, declaredBytes: 0, timer });
  }

  private close(key: string): Window | undefined {
    const window = this.windows.get(key);
    if (!window) return undefined;
    clearTimeout(window.timer);
    this.windows.delete(key);
    return window;
  }

  /** The window's refusals become one marker, which opens the next window. */
  private async closeWindow(key: string): Promise<void> {
    const window = this.close(key);
    if (!window || window.count === 0) return;
    this.open(key, window.tenantId, window.runId);
    try {
      if (!(await this.recordCoalesced(window))) this.close(key);
    } catch (error) {
      this.close(key);
      this.logger.error({
        msg: 'could not record a coalesced append.rejected marker',
        runId: window.runId,
        tenantId: window.tenantId,
        count: window.count,
        error: error instanceof Error ? error.stack : String(error),
      });
    }
  }

  private async recordCoalesced(window: Window): Promise<boolean> {
    const { tenantId, runId, count, declaredBytes } = window;
    const recorded = await this.runLog.recordBodyRejected(tenantId, runId, declaredBytes, count);
    this.logger.warn({
      msg: 'request bodies over their limit refused unread, recorded as one marker',
      runId,
      tenantId,
      count,
      declaredBytes,
      limitBytes: this.config.bodyMaxBytes,
      marker: recorded ? 'recorded' : 'no_such_run',
    });
    return recorded;
  }
}
