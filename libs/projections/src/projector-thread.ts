/**
 * Runs the projector in a worker thread, so folding events and writing their rows never
 * holds the event loop that serves HTTP: the service's loop only forwards "the log moved"
 * and hears "the read models reached position N". Reads of the read models stay on this
 * thread, through its own connection to the same SQLite file (WAL: readers never wait for
 * the writer).
 *
 * The worker opens the log itself, from the same settings: a SQLite log through a second
 * connection (woken by this thread's commits, polled for other processes'), EventStoreDB
 * through its own subscription.
 */
import { Worker } from 'node:worker_threads';
import {
  PositionGate,
  SqliteEventStore,
  type EventStoreReader,
  type ProcessorObserver,
  type StoreSettings,
  workerEntry,
} from '@runledger/event-store';
import { RUN_STREAM_PREFIX } from '@runledger/domain';
import type { ProjectorOptions } from './projector';

/**
 * The projector worker's heap bound (V8's old generation, in MiB) for events of at most
 * `eventMaxBytes`. Left to itself V8 let the worker's heap grow to hundreds of MiB of garbage
 * during a rebuild: the same code measured 411 and 686 MiB of RSS on one host on one day.
 * What the worker holds alive is bounded below this: the writer's kept threads (about
 * 32 MiB), a subscription page (1 MiB of JSON) and two batches (8 MiB of JSON each), each
 * parsed and folded, and one event of the largest size, which is held in a few copies.
 */
export function projectorHeapMib(eventMaxBytes: number): number {
  return 160 + Math.ceil((4 * eventMaxBytes) / 2 ** 20);
}

export interface ProjectorWorkerData {
  store: StoreSettings;
  readModelsFile: string;
  options: ProjectorOptions;
  /** The worker's heap bound (projectorHeapMib); by default the one for 1 MiB events. */
  heapMib?: number;
}

export type ToProjector = { type: 'commit' } | { type: 'stop' };

export type FromProjector =
  | { type: 'started' }
  | { type: 'committed'; events: number; position: number; lastRecordedAt: string }
  | { type: 'failed'; position: number; message: string; stack?: string }
  | { type: 'stopped' };

/** What the service needs of a projector, wherever it runs. */
export interface ProjectionRunner {
  /**
   * Starts following the log; settles once the projector is following it (or has failed,
   * which its observer hears), so a caller can wait until positions will be folded.
   */
  start(): void | Promise<void>;
  stop(): Promise<void>;
  current(): number;
  waitFor(minPosition: number, timeoutMs: number): Promise<void>;
}

export class ProjectorWorkerError extends Error {
  constructor(message: string, stack?: string) {
    super(message);
    this.name = 'ProjectorWorkerError';
    if (stack) this.stack = stack;
  }
}

export class ProjectorThread implements ProjectionRunner {
  private readonly gate: PositionGate;
  private worker: Worker | null = null;
  private stopped: Promise<void> | null = null;
  private following: Promise<void> = Promise.resolve();
  private unsubscribe: (() => void) | null = null;

  /**
   * `log`: this thread's store, read for the log head (waitFor) and, when it is SQLite, told
   * of as each commit; `checkpoint`: where the read models stand now.
   */
  constructor(
    private readonly log: EventStoreReader,
    private readonly data: ProjectorWorkerData,
    checkpoint: number,
    private readonly observer: ProcessorObserver,
  ) {
    this.gate = new PositionGate(log, RUN_STREAM_PREFIX, checkpoint);
  }

  current(): number {
    return this.gate.current();
  }

  /**
   * Resolves once the worker has loaded and follows the log, or has failed to (reported to
   * the observer first). Loading a worker takes a while (about 0.1 s on an idle 2-core host,
   * longer on a busy one, as the worker runs at a lower priority) and until then nothing is
   * folded: a caller that serves reads waits for this before it says it is up.
   */
  start(): Promise<void> {
    if (this.worker) return this.following;
    const entry = workerEntry(__dirname, 'projector.worker', __filename);
    const worker = new Worker(entry.filename, {
      eval: entry.eval,
      workerData: this.data,
      resourceLimits: { maxOldGenerationSizeMb: this.data.heapMib ?? projectorHeapMib(2 ** 20) },
    });
    this.worker = worker;
    let stopping = false;
    let reported = false;
    let followed: () => void = () => undefined;
    this.following = new Promise<void>((resolve) => {
      followed = resolve;
    });
    this.stopped = new Promise<void>((resolve) => {
      worker.on('message', (message: FromProjector) => {
        if (message.type === 'started') {
          followed();
        } else if (message.type === 'committed') {
          this.gate.moveTo(message.position);
          this.observer.committed(message.events, message.position, message.lastRecordedAt);
        } else if (message.type === 'failed') {
          this.observer.failed(
            new ProjectorWorkerError(message.message, message.stack),
            message.position,
          );
        } else {
          stopping = true;
        }
      });
      worker.on('error', (error) => {
        reported = true;
        this.observer.failed(error, this.gate.current());
      });
      worker.on('exit', (code) => {
        this.unsubscribe?.();
        this.unsubscribe = null;
        this.worker = null;
        if (!stopping && !reported) {
          this.observer.failed(
            new ProjectorWorkerError(`the projector's worker thread exited (code ${code})`),
            this.gate.current(),
          );
        }
        followed();
        resolve();
      });
    });
    if (this.log instanceof SqliteEventStore) {
      // One wake-up per group commit: the worker reads whatever the commit wrote.
      this.unsubscribe = this.log.onCommitted(() => this.send({ type: 'commit' }));
    }
    return this.following;
  }

  async stop(): Promise<void> {
    if (!this.worker) return;
    this.send({ type: 'stop' });
    await this.stopped;
  }

  waitFor(minPosition: number, timeoutMs: number): Promise<void> {
    return this.gate.waitFor(minPosition, timeoutMs);
  }

  private send(message: ToProjector): void {
    this.worker?.postMessage(message);
  }
}
