/**
 * The service's Prometheus metrics, on a registry of their own (so tests and several app
 * instances in one process never collide on the global default registry).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

const MIRROR_UP = 'runledger_mirror_publishing_ok';

export class Metrics {
  readonly registry = new Registry();

  readonly appendedEvents = new Counter({
    name: 'runledger_appended_events_total',
    help: 'Events offered for append that passed or failed the event checks, by type and outcome (recorded, idempotent, rejected_invalid with type "invalid" for an event that failed its checks, rejected_forbidden); run-rule and revision refusals are in runledger_rejections_total',
    labelNames: ['type', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly appendedBytes = new Counter({
    name: 'runledger_appended_bytes_total',
    help: 'Canonical JSON bytes of recorded event data, by type',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });

  readonly rejections = new Counter({
    name: 'runledger_rejections_total',
    help: 'Requests answered with an error code, by that code (model_call_too_large: recorded reduced, its dispatch refused)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly truncations = new Counter({
    name: 'runledger_truncations_total',
    help: 'Events reduced to fit EVENT_MAX_BYTES and recorded with a truncation stamp, by type',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });

  readonly dispatchRefusals = new Counter({
    name: 'runledger_dispatch_refusals_total',
    help: 'Oversize model calls recorded reduced and answered 413 (dispatch refused)',
    registers: [this.registry],
  });

  readonly bodyRejections = new Counter({
    name: 'runledger_body_rejections_total',
    help: 'Request bodies over BODY_MAX_BYTES refused unread, by whether a marker was recorded',
    labelNames: ['marker'] as const,
    registers: [this.registry],
  });

  readonly projectedEvents = new Counter({
    name: 'runledger_projected_events_total',
    help: 'Run events folded into the read models',
    registers: [this.registry],
  });

  readonly projectorPosition = new Gauge({
    name: 'runledger_projector_position',
    help: 'Log position of the last event folded into the read models',
    registers: [this.registry],
  });

  readonly projectorLagEvents = new Gauge({
    name: 'runledger_projector_lag_events',
    help: 'Log head position minus the projector position (events, on the embedded store)',
    registers: [this.registry],
  });

  readonly projectorLagSeconds = new Gauge({
    name: 'runledger_projector_lag_seconds',
    help: 'How long the oldest run event not yet folded into the read models has waited; 0 when caught up',
    registers: [this.registry],
  });

  readonly rebuildProgress = new Gauge({
    name: 'runledger_rebuild_progress_ratio',
    help: 'Progress of the running read-model rebuild, 0 to 1 (1 when none is running)',
    registers: [this.registry],
  });

  readonly sseClients = new Gauge({
    name: 'runledger_sse_clients',
    help: 'Server-Sent Events streams open now (run, thread and notification streams)',
    registers: [this.registry],
  });

  readonly bulkReads = new Gauge({
    name: 'runledger_bulk_reads',
    help: 'Bulk reads (pages of a run\'s events, replays, audits, exports) in progress (state="running") and waiting for one of their key\'s BULK_READS_PER_KEY turns (state="waiting")',
    labelNames: ['state'] as const,
    registers: [this.registry],
  });

  readonly sseOverflows = new Counter({
    name: 'runledger_sse_overflows_total',
    help: 'SSE clients sent `overflow` and closed: over SSE_MAX_BUFFER_BYTES waiting, or no write taken for SSE_SEND_TIMEOUT_MS',
    registers: [this.registry],
  });

  readonly mirrorPublished = new Counter({
    name: 'runledger_mirror_published_events_total',
    help: 'Run events the Kafka broker acknowledged (re-drives of parked events included)',
    registers: [this.registry],
  });

  readonly mirrorFailures = new Counter({
    name: 'runledger_mirror_publish_failures_total',
    help: 'Failed publish attempts to Kafka; each is retried with backoff, nothing is skipped',
    registers: [this.registry],
  });

  readonly mirrorRetries = new Counter({
    name: 'runledger_mirror_publish_retries_total',
    help: 'Publish attempts scheduled again after a failure, plus re-drives of parked events that attempted a publish',
    registers: [this.registry],
  });

  readonly mirrorParked = new Counter({
    name: 'runledger_mirror_parked_events_total',
    help: 'Run events parked because they cannot be encoded or the broker refuses them as they are',
    registers: [this.registry],
  });

  readonly mirrorParkedNow = new Gauge({
    name: 'runledger_mirror_parked_events',
    help: 'Run events parked and not yet re-driven',
    registers: [this.registry],
  });

  readonly mirrorResubscriptions = new Counter({
    name: 'runledger_mirror_resubscriptions_total',
    help: 'Times the mirror followed the log again from its checkpoint (stalled or failed subscription)',
    registers: [this.registry],
  });

  readonly mirrorPosition = new Gauge({
    name: 'runledger_mirror_position',
    help: 'Log position of the last run event the broker acknowledged (or that was parked)',
    registers: [this.registry],
  });

  readonly mirrorLagEvents = new Gauge({
    name: 'runledger_mirror_lag_events',
    help: 'Log head position minus the mirror position while run events wait; 0 when caught up',
    registers: [this.registry],
  });

  readonly mirrorLagSeconds = new Gauge({
    name: 'runledger_mirror_lag_seconds',
    help: 'How long the oldest run event not yet acknowledged by the broker has waited; 0 when caught up',
    registers: [this.registry],
  });

  /**
   * Exported only by a process that runs the mirror (`exportMirrorUp`): an api replica without
   * KAFKA_BROKERS showed 0, which an alert on "publishing failing" fired on.
   */
  readonly mirrorUp = new Gauge({
    name: MIRROR_UP,
    help: '1 while publishing to Kafka succeeds, 0 while it fails (see the failures counter); only where the mirror runs',
    registers: [],
  });

  /** Called by the mirror as it starts in this process. */
  exportMirrorUp(): void {
    if (this.registry.getSingleMetric(MIRROR_UP) === undefined) {
      this.registry.registerMetric(this.mirrorUp);
    }
  }

  readonly clientSurfacePosition = new Gauge({
    name: 'runledger_client_surface_position',
    help: 'Log position folded into notifications and bindings',
    registers: [this.registry],
  });

  readonly notifications = new Counter({
    name: 'runledger_notifications_total',
    help: 'Notification items recorded (a thread became blocked or finished), by kind',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  readonly notificationPublishFailures = new Counter({
    name: 'runledger_notification_publish_failures_total',
    help: 'Failed attempts to publish notification items to KAFKA_NOTIFICATIONS_TOPIC (each retried)',
    registers: [this.registry],
  });

  readonly httpDuration = new Histogram({
    name: 'runledger_http_request_duration_seconds',
    help: 'HTTP request latency, by method, route and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });

  /** Sampled every 10 ms; read and reset at each scrape, so each scrape covers its own interval. */
  private readonly loopDelay = monitorEventLoopDelay({ resolution: 10 });

  readonly eventLoopDelay = new Gauge({
    name: 'runledger_event_loop_delay_seconds',
    help: 'Event-loop delay since the previous scrape: max, p99 and mean (a request that blocks the loop shows here)',
    labelNames: ['stat'] as const,
    registers: [this.registry],
    collect: () => {
      const seconds = (nanoseconds: number) =>
        Number.isFinite(nanoseconds) ? nanoseconds / 1e9 : 0;
      this.eventLoopDelay.set({ stat: 'max' }, seconds(this.loopDelay.max));
      this.eventLoopDelay.set({ stat: 'p99' }, seconds(this.loopDelay.percentile(99)));
      this.eventLoopDelay.set({ stat: 'mean' }, seconds(this.loopDelay.mean));
      this.loopDelay.reset();
    },
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'runledger_' });
    this.loopDelay.enable();
  }

  /** Nest calls this when the app closes: the sampler stops with it. */
  onModuleDestroy(): void {
    this.loopDelay.disable();
  }

  async render(): Promise<string> {
    return this.registry.metrics();
  }
}
