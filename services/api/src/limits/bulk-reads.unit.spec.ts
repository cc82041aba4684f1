import { KeyedTurns } from './bulk-reads';

function recorder() {
  const started: string[] = [];
  const counts: [number, number][] = [];
  const turns = new KeyedTurns(2, 1, (running, waiting) => counts.push([running, waiting]));
  const enter = (key: string, name: string) => turns.enter(key, () => started.push(name));
  return { started, counts, enter, turns };
}

it('counts none before anything enters', () => {
  expect(recorder().counts).toEqual([[0, 0]]);
});

it('starts a key’s first holders at once, then lines the next up, then refuses', () => {
  const { started, enter } = recorder();
  expect(enter('a', 'a1')).not.toBeNull();
  expect(enter('a', 'a2')).not.toBeNull();
  expect(enter('a', 'a3')).not.toBeNull();
  expect(enter('a', 'a4')).toBeNull();
  expect(started).toEqual(['a1', 'a2']);
  // Another key has turns of its own.
  expect(enter('b', 'b1')).not.toBeNull();
  expect(started).toEqual(['a1', 'a2', 'b1']);
});

it('passes a turn given back to the first in line, in order', () => {
  const { started, counts, enter } = recorder();
  const a1 = enter('a', 'a1')!;
  enter('a', 'a2');
  enter('a', 'a3');
  a1();
  expect(started).toEqual(['a1', 'a2', 'a3']);
  expect(counts.at(-1)).toEqual([2, 0]);
  // Leaving twice is leaving once: a3 keeps its turn, and a fourth waits.
  a1();
  expect(counts.at(-1)).toEqual([2, 0]);
  enter('a', 'a4');
  expect(started).toEqual(['a1', 'a2', 'a3']);
  expect(counts.at(-1)).toEqual([2, 1]);
});

it('gives a turn given back with nobody in line to the next to come', () => {
  const { started, enter } = recorder();
  const a1 = enter('a', 'a1')!;
  enter('a', 'a2');
  a1();
  enter('a', 'a3');
  expect(started).toEqual(['a1', 'a2', 'a3']);
});

it('gives a place in line up when its holder leaves before its turn', () => {
  const { started, counts, enter } = recorder();
  const a1 = enter('a', 'a1')!;
  enter('a', 'a2');
  const a3 = enter('a', 'a3')!;
  a3();
  expect(counts.at(-1)).toEqual([2, 0]);
  // Its place is free again, and its turn never comes.
  expect(enter('a', 'a4')).not.toBeNull();
  a1();
  expect(started).toEqual(['a1', 'a2', 'a4']);
});

it('counts every key’s holders and waiters together, back to none', () => {
  const { counts, enter, turns } = recorder();
  const left = [enter('a', 'a1')!, enter('b', 'b1')!, enter('a', 'a2')!, enter('a', 'a3')!];
  expect(counts.at(-1)).toEqual([3, 1]);
  expect(turns.keys()).toBe(2);
  for (const leave of left) leave();
  expect(counts.at(-1)).toEqual([0, 0]);
  // Keys that came and went leave nothing behind.
  expect(turns.keys()).toBe(0);
});
