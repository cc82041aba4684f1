/**
 * For tests of work that must give the event loop a turn between steps (pages read, bodies
 * parsed, events hashed): `mark()` at each step records whether the loop had a turn since the
 * step before, by setting a task at each one and seeing whether it has run. The first step
 * counts as after a turn.
 */
export function loopTurns(): { turns: boolean[]; mark(): void } {
  const turns: boolean[] = [];
  let turned = true;
  return {
    turns,
    mark() {
      turns.push(turned);
      turned = false;
      setImmediate(() => {
        turned = true;
      });
    },
  };
}
