/**
 * Which read store starts by refolding the log, on the real stores' files: one that is empty
 * while the log holds events, and one a crash left part way (its target survives the
 * restart), for the thread views and the client surface alike.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Logger } from '@nestjs/common';
import { ReadModelStore } from '@runledger/projections';
import { SurfaceStore } from '../surface/surface.store';
import { rebuildAtStart, type RebuildableStore } from './rebuild-progress';

const dir = mkdtempSync(join(tmpdir(), 'runledger-rebuild-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const logger = new Logger('rebuild-test');
beforeAll(() => jest.spyOn(logger, 'log').mockImplementation(() => undefined));

let file = 0;
const stores: Record<string, () => RebuildableStore & { close(): void }> = {
  'the thread views': () => new ReadModelStore(join(dir, `read-models-${++file}.db`)),
  'the client surface': () => new SurfaceStore(join(dir, `client-surface-${++file}.db`)),
};

/** A batch of the store's own, committed up to `position`. */
function fold(store: RebuildableStore, position: number): void {
  if (store instanceof SurfaceStore) {
    store.commit({ threads: [], notifications: [], users: [], bindings: [], position });
  } else {
    (store as ReadModelStore).commit([], position);
  }
}

describe.each(Object.entries(stores))('%s', (_name, open) => {
  it('needs no rebuild on an empty log', async () => {
    const store = open();
    try {
      expect(await rebuildAtStart(store, () => Promise.resolve(0), 'views', logger)).toBeNull();
    } finally {
      store.close();
    }
  });

  it('empty beside a log that holds events: rebuilds to its head, and records that target', async () => {
    const store = open();
    try {
      const rebuild = await rebuildAtStart(store, () => Promise.resolve(40), 'views', logger);
      expect(rebuild?.target).toBe(40);
      expect(store.rebuildTarget()).toBe(40);
      expect(rebuild?.problem(12)).toBe('rebuilding the views from the log: position 12 of 40');
      expect(rebuild?.refusal(12, 'not whole').body()).toMatchObject({
        error: 'projection_behind',
        position: 12,
        rebuildTarget: 40,
      });
      expect(rebuild?.reached(39)).toBe(false);
      expect(rebuild?.reached(40)).toBe(true);
    } finally {
      store.close();
    }
  });

  it('stopped part way: the recorded target is still to reach, and only until it is reached', async () => {
    const store = open();
    try {
      await rebuildAtStart(store, () => Promise.resolve(40), 'views', logger);
      fold(store, 25);
      // A restart: the head has moved on since, but the views are partial only below 40.
      const head = () => Promise.resolve(90);
      expect((await rebuildAtStart(store, head, 'views', logger))?.target).toBe(40);
      fold(store, 40);
      expect(await rebuildAtStart(store, head, 'views', logger)).toBeNull();
    } finally {
      store.close();
    }
  });
});

it("the client surface's clear (the CLI's rebuild) leaves it to be refolded from the log", async () => {
  const store = new SurfaceStore(join(dir, 'cleared.db'));
  try {
    await rebuildAtStart(store, () => Promise.resolve(40), 'views', logger);
    fold(store, 40);
    store.clear();
    expect(store.isEmpty()).toBe(true);
    expect(store.rebuildTarget()).toBe(0);
    expect((await rebuildAtStart(store, () => Promise.resolve(55), 'views', logger))?.target).toBe(
      55,
    );
  } finally {
    store.close();
  }
});
