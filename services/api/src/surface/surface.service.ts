/**
 * Runs the client surface's follower in the api process and answers its read side's
 * questions: has it passed a position yet (read-your-writes, as the thread queries), and
 * what changed (live notification streams wait on its commits).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  Inject,
  Injectable,
  Logger,
  Optional,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import type { Notification } from '@runledger/domain';
import { EVENT_STORE, followerLag, lagProblem, type EventStore } from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { FollowerRestarts } from '../health/follower-restarts';
import { rebuildAtStart, type RebuildProgress } from '../health/rebuild-progress';
import { ApiError, awaitReadModel } from '../http/api-error';
import { SurfaceFollower, type SurfaceObserver } from './surface.follower';
import { SurfaceStore } from './surface.store';

export const SURFACE_FILE = 'client-surface.db';
/**
 * The file's name inside DATA_DIR, when not SURFACE_FILE: the standalone mirror keeps its own
 * copy, so it never shares a writer with an api on the same DATA_DIR.
 */
export const SURFACE_FILE_NAME = Symbol('SURFACE_FILE_NAME');

@Injectable()
export class SurfaceService
  implements OnApplicationBootstrap, OnApplicationShutdown, SurfaceObserver
{
  readonly store: SurfaceStore;
  private readonly follower: SurfaceFollower;
  private readonly logger = new Logger('client-surface');
  private readonly listeners = new Set<(position: number) => void>();
  private rebuild: RebuildProgress | null = null;
  private readonly restarts: FollowerRestarts;

  constructor(
    @Inject(EVENT_STORE) private readonly log: EventStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly metrics: Metrics,
    @Optional() @Inject(SURFACE_FILE_NAME) fileName?: string,
  ) {
    mkdirSync(config.dataDir, { recursive: true });
    this.store = new SurfaceStore(join(config.dataDir, fileName ?? SURFACE_FILE));
    this.follower = new SurfaceFollower(log, this.store, this);
    this.restarts = new FollowerRestarts('client surface', this.follower, this.logger);
  }

  async onApplicationBootstrap(): Promise<void> {
    // Every stream is followed: receipts and bindings are as much its work as runs.
    this.rebuild = await rebuildAtStart(
      this.store,
      () => this.log.headPosition(),
      'notifications and bindings',
      this.logger,
    );
    this.follower.start();
  }

  async onApplicationShutdown(): Promise<void> {
    this.restarts.close();
    await this.follower.stop();
    this.store.close();
  }

  committed(position: number, notifications: readonly Notification[]): void {
    this.metrics.clientSurfacePosition.set(position);
    this.rebuild?.committed(position);
    if (this.rebuild?.reached(position)) this.rebuild = null;
    this.restarts.committed();
    for (const item of notifications) this.metrics.notifications.inc({ kind: item.kind });
    for (const listener of this.listeners) listener(position);
  }

  failed(error: unknown, position: number): void {
    this.restarts.failed(error, position);
  }

  position(): number {
    return this.follower.current();
  }

  /**
   * Null when healthy, else why notifications and bindings cannot be trusted, as the projector
   * is judged: stopped, refolding from an empty store (a prefix of the truth, however young the
   * log), or behind the log by more than READY_MAX_LAG_MS.
   */
  async problem(): Promise<string | null> {
    const failure = this.restarts.failure;
    if (failure !== null) return `client surface stopped: ${String(failure)}`;
    if (this.rebuild) return `client surface ${this.rebuild.problem(this.follower.current())}`;
    const behind = await lagProblem(
      () => followerLag(this.log, this.follower.current()),
      this.config.readyMaxLagMs,
    );
    return behind && `client surface ${behind}`;
  }

  /** Called after every committed batch with the new position, until the returned function is called. */
  onCommit(listener: (position: number) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Waits up to READ_WAIT_MS for the follower to pass `minPosition` (every stream is followed,
   * so any recorded position is passed in time), else 503 `projection_behind`. Without one, a
   * read while the store is refolded from empty is 503: a list short of its newest items would
   * read as the truth.
   */
  async waitFor(minPosition: number | undefined): Promise<void> {
    if (minPosition === undefined) {
      if (this.rebuild)
        throw this.rebuild.refusal(this.follower.current(), 'the lists are not whole yet');
      return;
    }
    if (this.follower.current() >= minPosition) return;
    const failure = this.restarts.failure;
    if (failure !== null) {
      throw new ApiError(
        503,
        'projection_stopped',
        `the client surface stopped: ${String(failure)}`,
      );
    }
    await awaitReadModel('the client surface', this.follower, minPosition, this.config.readWaitMs);
  }

  /** Waits until everything recorded so far is folded in: for decisions that must not lag. */
  async waitForHead(): Promise<void> {
    await this.waitFor(await this.log.headPosition());
  }
}
