import { evolve, initialRunState, type RunState } from '@runledger/domain';
import type { RecordedEvent } from '@runledger/event-store';

/** A run's state as folded so far, and about how many bytes it holds. */
export class FoldedRun {
  constructor(
    readonly state: RunState = initialRunState(),
    public bytes = RUN_BYTES,
  ) {}

  add(event: RecordedEvent): void {
    evolve(this.state, event);
    this.bytes += heldBytes(event);
  }
}

/**
 * What folding an event adds to a run's state: an approval keeps its request's data (the
 * tool's input, the question) and a resolution; every other event changes a few fields.
 */
function heldBytes(event: RecordedEvent): number {
  if (!event.type.startsWith('approval.')) return 0;
  return ENTRY_BYTES + (event.size ?? JSON.stringify(event.data).length);
}

/** A map entry and its record's fixed fields, about. */
const ENTRY_BYTES = 256;
/** A state's own fields and its place in the map, about: a budget bounds how many are kept. */
const RUN_BYTES = 512;

/**
 * The states commands last decided on, so that the next command on a run folds only the
 * events since: resolving an approval on a run of 300,000 events read and folded every one of
 * them again, 2.1 s and the whole run in memory, each time. A state is folded from the log
 * alone, so one at revision R stays true; what came after is read before deciding, and the
 * store's expected-revision check guards the append. Bounded in bytes: the least recently
 * used go first, and a state larger than an eighth of the budget is not kept.
 */
export class RunStates {
  private readonly runs = new Map<string, FoldedRun>();
  private bytes = 0;

  constructor(private readonly budget: number) {}

  /** A copy of the run's kept state, for the caller to fold on; a fresh one if none is kept. */
  take(stream: string): FoldedRun {
    const kept = this.runs.get(stream);
    if (kept === undefined) return new FoldedRun();
    this.runs.delete(stream);
    this.runs.set(stream, kept);
    return new FoldedRun(structuredClone(kept.state), kept.bytes);
  }

  /** Keeps a copy of the state, unless a later one of the run is kept already. */
  keep(stream: string, folded: FoldedRun): void {
    const kept = this.runs.get(stream);
    if (kept !== undefined) {
      if (kept.state.revision >= folded.state.revision) return;
      this.runs.delete(stream);
      this.bytes -= kept.bytes;
    }
    if (folded.bytes > this.budget / 8) return;
    this.runs.set(stream, new FoldedRun(structuredClone(folded.state), folded.bytes));
    this.bytes += folded.bytes;
    for (const [key, oldest] of this.runs) {
      if (this.bytes <= this.budget) break;
      this.runs.delete(key);
      this.bytes -= oldest.bytes;
    }
  }
}
