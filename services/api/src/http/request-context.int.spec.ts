/**
 * Every log line a request causes names it: the service's JSON lines carry the request id its
 * answer carries (`X-Request-Id`), also for lines written after its body was read.
 */
import { randomUUID } from 'node:crypto';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Logger } from '@nestjs/common';
import { JsonLinesLogger } from '../config/process-config';
import { startTestApp, type TestApp } from '../testing/test-app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ EVENT_MAX_BYTES: '4096' });
  await t.app.listen(0, '127.0.0.1');
});

/** Posts `body` in two parts, the second a while after the first, as a slow client sends it. */
function postInParts(path: string, body: string): Promise<IncomingMessage> {
  const { port } = t.app.getHttpServer().address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        headers: {
          ...t.auth(),
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      resolve,
    );
    req.on('error', reject);
    const half = Math.floor(body.length / 2);
    req.write(body.slice(0, half));
    setTimeout(() => req.end(body.slice(half)), 50);
  });
}
afterAll(async () => {
  Logger.overrideLogger(false);
  await t.close();
});

it("writes the request's id into the lines it causes, after its body was read too", async () => {
  const lines: Record<string, unknown>[] = [];
  const out = jest.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
    return true;
  });
  try {
    Logger.overrideLogger(new JsonLinesLogger('test', 'stdout'));
    const runId = `run-${randomUUID()}`;
    const res = await postInParts(
      `/v1/runs/${runId}/events`,
      JSON.stringify({
        events: [
          { type: 'run.started', data: { threadId: 't', agent: 'a', source: 'api' } },
          {
            type: 'tool.finished',
            data: { toolCallId: 'c1', failed: false, output: 'o'.repeat(10_000) },
          },
        ],
      }),
    );
    res.resume();
    expect(res.statusCode).toBe(201);
    const reduced = lines.find(
      (line) => (line.message as { msg?: string }).msg?.includes('reduced to fit') === true,
    );
    expect(reduced?.message).toMatchObject({ requestId: res.headers['x-request-id'], runId });
    // A line written outside any request names none.
    Logger.log({ msg: 'between requests' });
    expect(lines.at(-1)?.message).toEqual({ msg: 'between requests' });
  } finally {
    Logger.overrideLogger(false);
    out.mockRestore();
  }
});
