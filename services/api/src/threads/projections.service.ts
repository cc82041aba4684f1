/**
 * Runs the projector inside the api process (the embedded default) and answers the
 * read side's operational questions: is it healthy, how far behind is it, has it passed a
 * position yet. An empty read store is rebuilt from the log at start-up, with progress
 * logged and exported.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { RUN_STREAM_PREFIX } from '@runledger/domain';
import {
  EVENT_STORE,
  followerLag,
  lagProblem,
  type EventStore,
  type FollowerLag,
} from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import {
  OFF_LOOP_BATCHING,
  Projector,
  ProjectorThread,
  ReadModelStore,
  projectorHeapMib,
  type ProjectionRunner,
  type ProjectorObserver,
  type ThreadHead,
  type ThreadReadModels,
} from '@runledger/projections';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { FollowerRestarts } from '../health/follower-restarts';
import { rebuildAtStart, type RebuildProgress } from '../health/rebuild-progress';
import { ApiError, awaitReadModel } from '../http/api-error';

export const READ_MODELS_FILE = 'read-models.db';
const LAG_REFRESH_MS = 1000;

@Injectable()
export class ProjectionsService
  implements OnApplicationBootstrap, OnApplicationShutdown, ProjectorObserver
{
  /** What the queries read; the SQLite adapter behind it is this service's to open and close. */
  readonly readModels: ThreadReadModels;
  private readonly store: ReadModelStore;
  private readonly projector: ProjectionRunner;
  private readonly logger = new Logger('projector');
  private rebuild: RebuildProgress | null = null;
  private lagTimer: NodeJS.Timeout | null = null;
  private readonly restarts: FollowerRestarts;

  constructor(
    @Inject(EVENT_STORE) private readonly log: EventStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly metrics: Metrics,
  ) {
    mkdirSync(config.dataDir, { recursive: true });
    const readModelsFile = join(config.dataDir, READ_MODELS_FILE);
    this.store = new ReadModelStore(readModelsFile);
    this.readModels = this.store;
    this.projector =
      config.backgroundThreads === 'on'
        ? new ProjectorThread(
            log,
            {
              store: {
                eventStoreUrl: config.eventStoreUrl,
                dataDir: config.dataDir,
                sqliteSynchronous: config.sqliteSynchronous,
              },
              readModelsFile,
              options: OFF_LOOP_BATCHING,
              heapMib: projectorHeapMib(config.eventMaxBytes),
            },
            this.store.checkpoint(),
            this,
          )
        : new Projector(log, this.store, this);
    this.restarts = new FollowerRestarts('projector', this.projector, this.logger);
  }

  async onApplicationBootstrap(): Promise<void> {
    this.rebuild = await rebuildAtStart(
      this.store,
      () => this.log.headPosition({ streamPrefix: RUN_STREAM_PREFIX }),
      'read models',
      this.logger,
      this.metrics.rebuildProgress,
    );
    if (!this.rebuild) this.metrics.rebuildProgress.set(1);
    this.metrics.projectorPosition.set(this.projector.current());
    const starting = Date.now();
    // Listening only once the projector follows the log: a read-your-writes straight after
    // start-up then waits for a fold, not for a worker thread to load.
    await this.projector.start();
    this.logger.log({
      msg: 'projector following the log',
      position: this.projector.current(),
      thread: this.config.backgroundThreads === 'on' ? 'worker' : 'api',
      startMs: Date.now() - starting,
    });
    this.lagTimer = setInterval(() => {
      this.lag().catch((error: unknown) =>
        this.logger.warn({ msg: 'could not read the log to measure lag', error: String(error) }),
      );
    }, LAG_REFRESH_MS).unref();
  }

  async onApplicationShutdown(): Promise<void> {
    this.restarts.close();
    if (this.lagTimer) clearInterval(this.lagTimer);
    await this.projector.stop();
    this.store.close();
  }

  committed(events: number, position: number): void {
    this.metrics.projectedEvents.inc(events);
    this.metrics.projectorPosition.set(position);
    this.rebuild?.committed(position);
    if (this.rebuild?.reached(position)) this.rebuild = null;
    this.restarts.committed();
  }

  failed(error: unknown, position: number): void {
    this.restarts.failed(error, position);
  }

  /** Null when healthy, else why the read side cannot be trusted to be caught up. */
  async problem(): Promise<string | null> {
    const failure = this.restarts.failure;
    if (failure !== null) return `projector stopped: ${String(failure)}`;
    // However young the log, views half rebuilt are not ready to be read.
    if (this.rebuild) return `projector ${this.rebuild.problem(this.projector.current())}`;
    const behind = await lagProblem(() => this.lag(), this.config.readyMaxLagMs);
    return behind && `projector ${behind}`;
  }

  position(): number {
    return this.projector.current();
  }

  /**
   * The thread's header row, or why there is none: 404, unless the read models are being
   * rebuilt from an empty store, where a thread of the log may not be folded yet (503, with
   * how far the rebuild has come) — a thread that exists is never answered "not found".
   */
  threadHead(tenantId: string, threadId: string): ThreadHead {
    const head = this.readModels.head(tenantId, threadId);
    if (head) return head;
    if (this.rebuild) throw this.rebuilding(`thread ${threadId} may not be folded yet`);
    throw new ApiError(404, 'thread_not_found', `thread ${threadId} not found`);
  }

  /**
   * Read-your-writes: waits up to READ_WAIT_MS for the projection to pass `minPosition`.
   * Without one, a read during a start-up rebuild is 503: the views are partly rebuilt (a
   * thread list short of threads, a thread short of its newest messages), not stale.
   */
  async waitFor(minPosition: number | undefined): Promise<void> {
    if (minPosition === undefined) {
      if (this.rebuild) throw this.rebuilding('the views are not whole yet');
      return;
    }
    await awaitReadModel('the projection', this.projector, minPosition, this.config.readWaitMs);
  }

  /**
   * For a command that decides on a thread view ("yes", a prompt): waits for `minPosition`
   * when the client names one, else for everything recorded when it is asked. A view that
   * lags the log by a commit would otherwise not yet hold the approval just recorded ("yes"
   * answered 404) or the turn just started.
   */
  async waitForRecorded(minPosition: number | undefined): Promise<void> {
    await this.waitFor(minPosition ?? (await this.log.headPosition()));
  }

  private rebuilding(why: string): ApiError {
    return this.rebuild!.refusal(this.projector.current(), why);
  }

  /** Measures the lag now, and sets its gauges. */
  private async lag(): Promise<FollowerLag> {
    // Only run streams are projected: a consumed receipt after them is nothing to catch up on.
    const lag = await followerLag(this.log, this.projector.current(), RUN_STREAM_PREFIX);
    this.metrics.projectorLagEvents.set(lag.events);
    this.metrics.projectorLagSeconds.set(lag.seconds);
    return lag;
  }
}
