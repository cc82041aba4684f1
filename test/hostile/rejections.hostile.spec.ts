/**
 * Free event spam: before issue 10 a request with only `Content-Length: 99999999999`
 * recorded an `append.rejected` event, and 50 of them in 115 ms recorded 51 events. Refusals
 * of one key to one run are now coalesced: one marker at once, one with a count per window.
 */
import type { RunningService } from '../support/service-process';
import {
  expectHealthy,
  KEY,
  logState,
  MIB,
  postHead,
  rawRequest,
  startHostileService,
  startRun,
  underWatch,
} from './hostile-support';

const RSS_BOUND = 300 * MIB;
const WINDOW_MS = 3000;
const SPAM = 200;

let service: RunningService;
beforeAll(async () => {
  service = await startHostileService({ REJECTION_MARKER_WINDOW_MS: String(WINDOW_MS) });
  await startRun(service, 'target');
}, 60_000);

afterAll(async () => {
  await service.kill();
});

function declareHuge(key?: string) {
  return rawRequest(
    service,
    postHead('/v1/runs/target/events', {
      'Content-Length': 99_999_999_999,
      ...(key === undefined ? {} : { Authorization: `Bearer ${key}` }),
    }),
  );
}

it(`records ${SPAM} refusals of one key as one marker now and one with their count after the window`, async () => {
  const before = await logState(service, 'target');
  const { result, watched } = await underWatch(service, async () => {
    const statuses: number[] = [];
    // Ten at a time: bounded, and fast enough to fall in one window.
    for (let i = 0; i < SPAM; i += 10) {
      const answers = await Promise.all(Array.from({ length: 10 }, () => declareHuge(KEY)));
      statuses.push(...answers.map((answer) => answer.status));
    }
    return statuses;
  });
  expect(result).toEqual(Array(SPAM).fill(413));
  expectHealthy(watched, RSS_BOUND);
  const during = await logState(service, 'target');
  expect(during.events.slice(0, before.events.length)).toEqual(before.events);
  const markers = during.events.slice(before.events.length);
  expect(markers.map((line) => line.split(' ')[0])).toEqual(['append.rejected']);

  await new Promise((resolve) => setTimeout(resolve, WINDOW_MS + 500));
  const after = await logState(service, 'target');
  expect(after.events.slice(before.events.length).map((line) => line.split(' ')[0])).toEqual([
    'append.rejected',
    'append.rejected',
  ]);
  const res = await fetch(`${service.baseUrl}/v1/runs/target/events?fromRevision=2`, {
    headers: { authorization: `Bearer ${KEY}` },
  });
  const [coalesced] = ((await res.json()) as { events: { data: Record<string, unknown> }[] })
    .events;
  expect(coalesced.data).toMatchObject({ reason: 'body_too_large', count: SPAM - 1 });
}, 60_000);

it('records nothing for the same spam without a key: 401, unread', async () => {
  const before = await logState(service, 'target');
  const { result, watched } = await underWatch(service, () =>
    Promise.all(Array.from({ length: 50 }, () => declareHuge())),
  );
  expect(result.map((answer) => answer.status)).toEqual(Array(50).fill(401));
  expectHealthy(watched, RSS_BOUND);
  await new Promise((resolve) => setTimeout(resolve, WINDOW_MS + 500));
  expect(await logState(service, 'target')).toEqual(before);
}, 30_000);
