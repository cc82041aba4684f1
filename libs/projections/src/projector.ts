/**
 * Folds every run event into its thread's rows with the pure fold of libs/domain, as a
 * handler on the log's one follower (CheckpointedProcessor). Each batch's row changes and
 * the new checkpoint commit in one transaction, so a crash never leaves a view ahead of,
 * or behind, its checkpoint.
 *
 * Folding is sliced by time: the fold gives the event loop back every few milliseconds, and
 * a batch is small enough that its one commit is short, so HTTP requests are never held
 * behind a catch-up for more than a slice. Under steady load the processor gathers batches
 * (GATHER_UNDER_LOAD), so commits come at most every 50 ms rather than every few events.
 */
// Modules, not the libraries' indexes: this file runs in the projector's worker thread, which
// starts in ~0.1 s this way and took ~0.7 s with Nest, class-validator and the EventStoreDB
// client (the indexes bring in ~1,000 modules, this ~40).
import {
  applyToRows,
  THREAD_DATA_TYPES,
  threadKey,
  threadOf,
  type ProjectedEvent,
  type ThreadRows,
} from '@runledger/domain/projections';
import { RUN_STREAM_PREFIX } from '@runledger/domain/stream-names';
import { forEachInSlices } from '@runledger/domain/time-slices';
import {
  CheckpointedProcessor,
  GATHER_UNDER_LOAD,
  type BatchHandler,
  type ProcessorObserver,
} from '@runledger/event-store/checkpointed-processor';
import type { EventStoreReader, RecordedEvent } from '@runledger/event-store/event-store.port';
import type { ReadModelWriter } from './read-model.port';

export type ProjectorObserver = ProcessorObserver;

export interface ProjectorOptions {
  /** Most events folded per commit: bounds the time one commit holds the event loop. */
  batchSize?: number;
  /** Longest a batch gathers before it is committed, so readers see progress during a rebuild. */
  maxBatchMs?: number;
  /** Longest the fold runs before it yields the event loop. */
  sliceMs?: number;
}

/**
 * Batching for a projector whose commits hold no HTTP loop: on its worker thread (the
 * service's default) and in `npm run rebuild`. A batch gathers up to 10,000 events (never more
 * than 8 MiB of their JSON, nor for longer than 100 ms), where 1,000 suits the api's own loop.
 * A catch-up then commits less often, and a commit writes each header row and index page its
 * batch touched once: 1.1–1.6× the events/s of batches of 1,000 over runs on the 2-core host
 * (docs/benchmarks.md). Gathering for 250 ms as well measured slower, not faster.
 */
export const OFF_LOOP_BATCHING: Readonly<ProjectorOptions> = Object.freeze({ batchSize: 10_000 });

export class Projector<Rows extends ThreadRows = ThreadRows> implements BatchHandler {
  private readonly processor: CheckpointedProcessor;
  private readonly sliceMs: number;

  constructor(
    log: EventStoreReader,
    private readonly readModels: ReadModelWriter<Rows>,
    observer: ProjectorObserver,
    options: ProjectorOptions = {},
  ) {
    this.sliceMs = options.sliceMs ?? 8;
    this.processor = new CheckpointedProcessor(log, this, observer, {
      streamPrefix: RUN_STREAM_PREFIX,
      dataTypes: THREAD_DATA_TYPES,
      batchSize: options.batchSize ?? 1000,
      maxBatchMs: options.maxBatchMs ?? 100,
      gather: GATHER_UNDER_LOAD,
    });
  }

  /** Position of the last event folded into the read models. */
  current(): number {
    return this.processor.current();
  }

  start(): void {
    this.processor.start();
  }

  stop(): Promise<void> {
    return this.processor.stop();
  }

  /**
   * Resolves once the projection has passed `minPosition`; rejects after `timeoutMs`. Only run
   * streams are projected, so a position of another stream (a consumed receipt) counts as
   * passed once the last run event before it is folded.
   */
  waitFor(minPosition: number, timeoutMs: number): Promise<void> {
    return this.processor.waitFor(minPosition, timeoutMs);
  }

  checkpoint(): number {
    return this.readModels.checkpoint();
  }

  async handle(batch: readonly RecordedEvent[]): Promise<void> {
    const touched = new Map<string, Rows>();
    const fold = (recorded: RecordedEvent) => {
      const event = toProjected(recorded);
      const owner = threadOf(event);
      if (owner === null) return;
      const key = threadKey(owner.tenantId, owner.threadId);
      let rows = touched.get(key);
      if (rows === undefined) {
        rows = this.readModels.openThread(owner.tenantId, owner.threadId);
        touched.set(key, rows);
      }
      applyToRows(rows, event);
    };
    await forEachInSlices(batch, fold, this.sliceMs);
    await this.readModels.commit([...touched.values()], batch[batch.length - 1].position);
  }
}

export function toProjected(event: RecordedEvent): ProjectedEvent {
  return {
    id: event.id,
    type: event.type,
    data: event.data as Record<string, unknown>,
    metadata: event.metadata,
    revision: event.revision,
    position: event.position,
    recordedAt: event.recordedAt,
  };
}
