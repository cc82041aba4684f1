/**
 * Many reads of a run's large pages at once, by one reader. The SQLite store reads and
 * decodes a page synchronously, and the reads of requests that arrived together all ran in
 * the same turn of the event loop: twenty replays of this 12 MB run starting together held
 * it for about 470 ms, forty pages of a 24 MB run for about 900 ms. Now the store's reads
 * take a turn each.
 */
import type { RunningService } from '../support/service-process';
import { request } from '../support/service-process';
import {
  expectHealthy,
  KEY,
  MIB,
  startHostileService,
  startLargeRun,
  underWatch,
} from './hostile-support';

const RSS_BOUND = 1500 * MIB;
const EVENTS = 200;
const TEXT_CHARS = 60_000;
const READERS = 20;

let service: RunningService;
beforeAll(async () => {
  service = await startHostileService();
  await startLargeRun(service, 'big', EVENTS, TEXT_CHARS);
}, 60_000);

afterAll(async () => {
  await service.kill();
});

it(`reads ${READERS} pages of ${EVENTS} large events at once while /health/live keeps answering`, async () => {
  const { result, watched } = await underWatch(service, () =>
    Promise.all(
      Array.from({ length: READERS }, async () => {
        const res = await request(service.baseUrl, '/v1/runs/big/events?limit=1000', { key: KEY });
        const page = (await res.json()) as { events: unknown[] };
        return page.events.length;
      }),
    ),
  );
  expect(result).toEqual(Array(READERS).fill(EVENTS + 1));
  expectHealthy(watched, RSS_BOUND);
}, 60_000);

it(`replays the run to ${READERS} clients at once while /health/live keeps answering`, async () => {
  const { result, watched } = await underWatch(service, () =>
    Promise.all(
      Array.from({ length: READERS }, async () => {
        const res = await request(service.baseUrl, '/v1/runs/big/replay', { key: KEY });
        return (await res.text()).trim().split('\n').length;
      }),
    ),
  );
  expect(result).toEqual(Array(READERS).fill(EVENTS + 1));
  expectHealthy(watched, RSS_BOUND);
}, 60_000);
