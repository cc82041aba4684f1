import { mapInSlices, nextTurn, runInSlices, runToEnd, SliceClock, TurnQueue } from './time-slices';

function busyFor(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until);
}

/** Counts turns of the event loop from now, until stopped. */
function turnCounter(): { now: () => number; stop: () => void } {
  let turn = 0;
  let ticking = true;
  const tick = () => {
    turn += 1;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  return { now: () => turn, stop: () => (ticking = false) };
}

describe('mapInSlices', () => {
  it('answers what Array.map answers, with the indexes', async () => {
    const items = ['a', 'b', 'c', 'd'];
    await expect(mapInSlices(items, (item, index) => `${index}:${item}`)).resolves.toEqual(
      items.map((item, index) => `${index}:${item}`),
    );
    await expect(mapInSlices([], () => 1)).resolves.toEqual([]);
  });

  it('gives the event loop a turn once a slice has run, and goes on where it was', async () => {
    let turnTaken = false;
    setImmediate(() => (turnTaken = true));
    const sawTurn = await mapInSlices(
      Array.from({ length: 8 }, (_, n) => n),
      () => {
        busyFor(3);
        return turnTaken;
      },
      5,
    );
    // The first slice ran without a turn; a later item ran after one.
    expect(sawTurn[0]).toBe(false);
    expect(sawTurn.at(-1)).toBe(true);
  });

  it('with a slice of 0 ms gives a turn after every item, however fast the items run', async () => {
    let turns = 0;
    const tick = () => {
      turns += 1;
      if (turns < 10) setImmediate(tick);
    };
    setImmediate(tick);
    const seen = await mapInSlices([1, 2, 3, 4], () => turns, 0);
    expect(seen).toEqual([0, 1, 2, 3]);
  });

  it('keeps a loop that fits in one slice in one turn', async () => {
    let turnTaken = false;
    setImmediate(() => (turnTaken = true));
    const sawTurn = await mapInSlices(
      Array.from({ length: 100 }, (_, n) => n),
      () => turnTaken,
      60_000,
    );
    expect(sawTurn.every((saw) => !saw)).toBe(true);
  });
});

describe('nextTurn', () => {
  it('resolves after what the event loop already had queued', async () => {
    const order: string[] = [];
    setImmediate(() => order.push('queued before'));
    await nextTurn();
    order.push('after the turn');
    expect(order).toEqual(['queued before', 'after the turn']);
  });
});

describe('runInSlices', () => {
  function* steps(count: number): Generator<void, number> {
    for (let i = 0; i < count; i += 1) yield;
    return count;
  }

  it('runs every step to the result without a turn while its slice lasts', async () => {
    let turned = false;
    setImmediate(() => (turned = true));
    expect(await runInSlices(steps(10_000), new SliceClock(60_000))).toBe(10_000);
    expect(turned).toBe(false);
  });

  it('gives the event loop a turn once a slice has run, and answers the same', async () => {
    let turned = false;
    setImmediate(() => (turned = true));
    expect(await runInSlices(steps(3), new SliceClock(0))).toBe(3);
    expect(turned).toBe(true);
    expect(runToEnd(steps(5))).toBe(5);
  });
});

describe('SliceClock', () => {
  afterEach(() => jest.restoreAllMocks());

  it('gives loops that wait on it together one slice per turn between them, not one each', async () => {
    let now = 0;
    jest.spyOn(Date, 'now').mockImplementation(() => now);
    const clock = new SliceClock(3);
    const turns = turnCounter();
    const stepsPerTurn = new Map<number, number>();
    // Each step takes a millisecond of the clock.
    const loop = async () => {
      for (let step = 0; step < 12; step += 1) {
        now += 1;
        stepsPerTurn.set(turns.now(), (stepsPerTurn.get(turns.now()) ?? 0) + 1);
        if (clock.due()) await clock.turn();
      }
    };
    await Promise.all([loop(), loop(), loop()]);
    turns.stop();

    // A slice of three steps, and a step each for the others, which find it spent.
    expect(Math.max(...stepsPerTurn.values())).toBeLessThanOrEqual(5);
    expect([...stepsPerTurn.values()].reduce((a, b) => a + b)).toBe(36);
  });
});

describe('TurnQueue', () => {
  it('lets work go on at once, in the caller’s step, while the turn’s slice lasts', () => {
    const queue = new TurnQueue(1000);
    expect(queue.take()).toBeUndefined();
    expect(queue.take()).toBeUndefined();
  });

  it('gives a later turn a slice of its own', async () => {
    const queue = new TurnQueue(5);
    expect(queue.take()).toBeUndefined();
    busyFor(7);
    await nextTurn();
    expect(queue.take()).toBeUndefined();
  });

  it('gives each piece asked for after the slice a later turn of its own, in order', async () => {
    const queue = new TurnQueue(5);
    const turns = turnCounter();
    expect(queue.take()).toBeUndefined();
    busyFor(7);
    const order: [string, number][] = [];
    const late = ['b', 'c', 'd'].map((name) => {
      const turn = queue.take();
      expect(turn).toBeInstanceOf(Promise);
      return turn!.then(() => {
        order.push([name, turns.now()]);
        busyFor(7);
      });
    });
    await Promise.all(late);
    turns.stop();
    expect(order.map(([name]) => name)).toEqual(['b', 'c', 'd']);
    const at = order.map(([, turn]) => turn);
    expect(new Set(at).size).toBe(3);
    expect(at[0]).toBeGreaterThan(0);
  });

  it('keeps a piece behind those waiting, even once a new turn’s slice has begun', async () => {
    const queue = new TurnQueue(5);
    queue.take();
    busyFor(7);
    const order: string[] = [];
    const first = queue.take()!.then(() => order.push('first'));
    // Nothing asked for since the slice ended may pass what waits.
    const second = queue.take()!.then(() => order.push('second'));
    await Promise.all([first, second]);
    expect(order).toEqual(['first', 'second']);
  });

  it('keeps what is asked for in a waiter’s turn behind those still waiting', async () => {
    const queue = new TurnQueue(50);
    queue.take();
    busyFor(51);
    const order: string[] = [];
    let third: Promise<unknown> | undefined;
    const first = queue.take()!.then(() => {
      order.push('first');
      // The turn's slice has just begun, but the second still waits.
      third = queue.take()?.then(() => order.push('third'));
    });
    const second = queue.take()!.then(() => order.push('second'));
    await Promise.all([first, second]);
    expect(third).toBeInstanceOf(Promise);
    await third;
    expect(order).toEqual(['first', 'second', 'third']);
  });

  it('counts a waiter’s own work against its turn’s slice', async () => {
    const queue = new TurnQueue(5);
    queue.take();
    busyFor(7);
    let after: Promise<void> | undefined;
    await queue.take()!.then(() => {
      busyFor(7);
      after = queue.take();
    });
    expect(after).toBeInstanceOf(Promise);
    await after;
  });

  it('with a slice of 0 ms gives every piece a later turn of its own', async () => {
    const queue = new TurnQueue(0);
    const turns = turnCounter();
    const ran: number[] = [];
    await new Promise<void>((resolve) => {
      for (let i = 0; i < 3; i += 1) {
        queue.run(() => {
          ran.push(turns.now());
          if (ran.length === 3) resolve();
        });
      }
      expect(ran).toEqual([]);
    });
    turns.stop();
    expect(new Set(ran).size).toBe(3);
  });

  it('lets what a job left for the event loop run before the next job', async () => {
    const queue = new TurnQueue(0);
    const seen: string[] = [];
    await new Promise<void>((resolve) => {
      queue.run(() => setImmediate(() => seen.push('left by the first')));
      queue.run(() => {
        seen.push('second');
        resolve();
      });
    });
    expect(seen).toEqual(['left by the first', 'second']);
  });

  it('runs a job at once when the slice allows it', () => {
    const queue = new TurnQueue(1000);
    let ran = false;
    queue.run(() => (ran = true));
    expect(ran).toBe(true);
  });
});
