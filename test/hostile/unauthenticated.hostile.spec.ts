/**
 * A stranger's big body: 16 MiB of nested brackets without a key. Before issue 10 it was
 * read and parsed before the key was checked, freezing the service for seconds; now the key
 * is checked as the request is routed and the body is never read.
 */
import type { RunningService } from '../support/service-process';
import {
  expectHealthy,
  logState,
  MIB,
  postBody,
  startHostileService,
  startRun,
  underWatch,
} from './hostile-support';

/** Baseline RSS of the service is about 150 MiB; a body read into memory would show. */
const RSS_BOUND = 300 * MIB;
const NESTED = Buffer.concat([Buffer.alloc(8 * MIB, '['), Buffer.alloc(8 * MIB, ']')]);

let service: RunningService;
beforeAll(async () => {
  service = await startHostileService();
  await startRun(service, 'target');
}, 60_000);

afterAll(async () => {
  await service.kill();
});

it('answers a 16 MiB nested body without a key 401 at once, unread', async () => {
  const before = await logState(service, 'target');
  const { result, watched } = await underWatch(service, () =>
    postBody(service, '/v1/runs/target/events', {}, NESTED),
  );
  expect(result.status).toBe(401);
  expect(JSON.parse(result.body)).toMatchObject({ error: 'unauthorized' });
  expect(result.ms).toBeLessThan(1000);
  expectHealthy(watched, RSS_BOUND);
  expect(await logState(service, 'target')).toEqual(before);
}, 30_000);

it('answers four of them in parallel, with a wrong key, 401 each', async () => {
  const before = await logState(service, 'target');
  const { result, watched } = await underWatch(service, () =>
    Promise.all(
      Array.from({ length: 4 }, () =>
        postBody(service, '/v1/runs/target/events', { authorization: 'Bearer wrong' }, NESTED),
      ),
    ),
  );
  expect(result.map((answer) => answer.status)).toEqual([401, 401, 401, 401]);
  expect(Math.max(...result.map((answer) => answer.ms))).toBeLessThan(1000);
  expectHealthy(watched, RSS_BOUND);
  expect(await logState(service, 'target')).toEqual(before);
}, 30_000);
