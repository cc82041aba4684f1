/**
 * Tool labels through the started app: the thread card (activeTools) and the voice seed say
 * the same words, and the seed never replays them as something the assistant said.
 */
import { randomUUID } from 'node:crypto';
import { startTestApp, type TestApp } from '../testing/test-app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

it('labels a running tool in the thread view and the voice seed alike, never as a turn', async () => {
  const threadId = `t-${randomUUID()}`;
  const runId = `run-${randomUUID()}`;
  const res = await t
    .http()
    .post(`/v1/runs/${runId}/events`)
    .set(t.auth())
    .send({
      events: [
        { type: 'run.started', data: { threadId, agent: 'voice', source: 'voice' } },
        {
          type: 'transcript.added',
          data: { utteranceId: 'u1', role: 'user', text: 'Read me the roadmap' },
        },
        {
          type: 'tool.started',
          data: { toolCallId: 'c1', toolName: 'read_page', input: { title: ' Roadmap  2027 ' } },
        },
      ],
    });
  expect(res.status).toBe(201);
  const view = await t
    .http()
    .get(`/v1/threads/${threadId}?minPosition=${res.body.position}`)
    .set(t.auth());
  expect(view.body.activeTools).toEqual([
    expect.objectContaining({
      toolCallId: 'c1',
      toolName: 'read_page',
      label: 'Reading page: Roadmap 2027',
    }),
  ]);
  const seed = await t.http().get(`/v1/threads/${threadId}/voice-seed`).set(t.auth());
  expect(seed.body.activeTools).toEqual([
    { toolCallId: 'c1', toolName: 'read_page', label: 'Reading page: Roadmap 2027' },
  ]);
  expect(seed.body.turns).toEqual([{ role: 'user', text: 'Read me the roadmap' }]);
});
