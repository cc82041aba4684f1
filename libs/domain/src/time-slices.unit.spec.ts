import { mapInSlices, nextTurn, runInSlices, runToEnd, SliceClock } from './time-slices';

function busyFor(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until);
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
    let turn = 0;
    let ticking = true;
    const tick = () => {
      turn += 1;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    const stepsPerTurn = new Map<number, number>();
    // Each step takes a millisecond of the clock.
    const loop = async () => {
      for (let step = 0; step < 12; step += 1) {
        now += 1;
        stepsPerTurn.set(turn, (stepsPerTurn.get(turn) ?? 0) + 1);
        if (clock.due()) await clock.turn();
      }
    };
    await Promise.all([loop(), loop(), loop()]);
    ticking = false;

    // A slice of three steps, and a step each for the others, which find it spent.
    expect(Math.max(...stepsPerTurn.values())).toBeLessThanOrEqual(5);
    expect([...stepsPerTurn.values()].reduce((a, b) => a + b)).toBe(36);
  });
});
