import type { RunHead } from '@runledger/domain';

/**
 * The last known head of recently appended runs, so an append need not read the stream
 * before it writes. Bounded: the least recently used entry goes first. A cached head is only
 * a guess; the store's expected-revision check is what makes a stale one harmless.
 */
export class HeadCache {
  private readonly entries = new Map<string, RunHead>();

  constructor(private readonly capacity: number) {}

  get(stream: string): RunHead | undefined {
    const head = this.entries.get(stream);
    if (head === undefined) return undefined;
    this.entries.delete(stream);
    this.entries.set(stream, head);
    return head;
  }

  remember(stream: string, head: RunHead): void {
    this.entries.delete(stream);
    this.entries.set(stream, head);
    if (this.entries.size > this.capacity) {
      this.entries.delete(this.entries.keys().next().value as string);
    }
  }

  forget(stream: string): void {
    this.entries.delete(stream);
  }
}
