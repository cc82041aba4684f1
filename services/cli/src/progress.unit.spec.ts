import { Progress, rateAndEta, renderBar } from './progress';

function sink(isTTY: boolean) {
  const written: string[] = [];
  return { isTTY, columns: 200, written, write: (text: string) => written.push(text) };
}

describe('CLI progress', () => {
  it('computes percentage, rate and the time left at that rate', () => {
    expect(rateAndEta({ done: 250, total: 1000, elapsedMs: 500 })).toEqual({
      percent: 25,
      perSecond: 500,
      etaSeconds: 1.5,
    });
    expect(rateAndEta({ done: 0, total: 1000, elapsedMs: 0 }).etaSeconds).toBeNull();
    expect(rateAndEta({ done: 0, total: 0, elapsedMs: 10 }).percent).toBe(100);
  });

  it('draws a bar a person can read at a glance', () => {
    expect(renderBar('rebuild', 'events', { done: 5000, total: 10_000, elapsedMs: 2000 })).toBe(
      `rebuild [${'#'.repeat(15)}${'-'.repeat(15)}]  50% 5,000/10,000 events 2,500/s ETA 2s`,
    );
    expect(renderBar('verify', 'events', { done: 1, total: 7200, elapsedMs: 1000 })).toMatch(
      /ETA 1h59m$/,
    );
  });

  it('redraws in place on a terminal at most every 100 ms; the last state is drawn when done', () => {
    let now = 0;
    const out = sink(true);
    const progress = new Progress('rebuild', 'events', 100, out, () => now);
    now = 10;
    progress.update(10);
    now = 50;
    progress.update(20);
    now = 200;
    progress.update(60);
    now = 250;
    progress.update(100);
    progress.finish();
    expect(out.written).toHaveLength(3);
    expect(out.written.every((line) => line.startsWith('\r'))).toBe(true);
    expect(out.written[2]).toMatch(/100% 100\/100 events .*\n$/);
  });

  it('writes JSON lines when not on a terminal: started, throttled progress, finished', () => {
    let now = 0;
    const out = sink(false);
    const progress = new Progress('rebuild', 'events', 100, out, () => now);
    now = 1000;
    progress.update(10);
    now = 1500;
    progress.update(20);
    now = 4000;
    progress.finish();
    const lines = out.written.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines.map((line) => line.msg)).toEqual([
      'rebuild started',
      'rebuild progress',
      'rebuild finished',
    ]);
    expect(lines[1]).toMatchObject({ done: 10, total: 100, percent: 10, perSecond: 10 });
    expect(lines[1].etaSeconds).toBe(9);
  });
});
