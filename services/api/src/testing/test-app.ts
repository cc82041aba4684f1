/**
 * The real api app on a real SQLite file in a temp dir, for HTTP tests through supertest.
 * Two tenants, so every test can also check isolation.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import request from 'supertest';
import { createApp } from '../app';
import { loadConfig, type AppConfig } from '../config/config';

export const KEYS = {
  tenantA: 'key-tenant-a-0123456789',
  tenantB: 'key-tenant-b-0123456789',
  readerA: 'key-reader-a-0123456789',
  adminB: 'key-admin-b-0123456789',
  /** An agent runtime: records runs, may not approve. */
  runtimeA: 'key-runtime-a-012345678',
  /** A trusted gateway: names the acting user in X-Runledger-User. */
  gatewayA: 'key-gateway-a-012345678',
  /** A key that is the user Ana. */
  anaA: 'key-ana-a-0123456789012',
  gatewayB: 'key-gateway-b-012345678',
};

export interface TestApp {
  app: NestFastifyApplication;
  config: AppConfig;
  http: () => ReturnType<typeof request>;
  auth: (key?: string) => { Authorization: string };
  /** GET a run's NDJSON replay: the status, content type and parsed lines. */
  replay: (
    runId: string,
    key?: string,
  ) => Promise<{ status: number; type: string; lines: Record<string, unknown>[] }>;
  close: () => Promise<void>;
}

/** `DATA_DIR` in env shares a store with another app (and is then left for its owner to remove). */
export async function startTestApp(env: Record<string, string> = {}): Promise<TestApp> {
  const ownDir = env.DATA_DIR === undefined;
  const dataDir = env.DATA_DIR ?? mkdtempSync(join(tmpdir(), 'runledger-http-'));
  const config = loadConfig({
    DATA_DIR: dataDir,
    RUNLEDGER_API_KEYS: [
      `${KEYS.tenantA}=tenant-a:append,read,admin,approve`,
      `${KEYS.tenantB}=tenant-b:append,read,approve`,
      `${KEYS.readerA}=tenant-a:read`,
      `${KEYS.adminB}=tenant-b:read,admin`,
      `${KEYS.runtimeA}=tenant-a:append,read`,
      `${KEYS.gatewayA}=tenant-a:append,read,approve,act-as`,
      `${KEYS.anaA}=tenant-a:append,read,approve:Ana`,
      `${KEYS.gatewayB}=tenant-b:append,read,approve,act-as`,
    ].join(';'),
    // Suites drive one key far past the production budgets; limits/rate-limits.int.spec.ts
    // sets the real ones.
    RATE_LIMIT_CALLS: '100000',
    RATE_LIMIT_COSTLY: '100000',
    RATE_LIMIT_SERVICE_CALLS: '100000',
    RATE_LIMIT_SERVICE_COSTLY: '100000',
    // A worker thread takes seconds to start under ts-node, for every app of every suite;
    // thread-pages.int.spec.ts and the e2e tier run the service's default, with threads.
    BACKGROUND_THREADS: 'off',
    ...env,
  });
  const app = await createApp(config, config.apiKeys ?? []);
  return {
    app,
    config,
    http: () => request(app.getHttpServer()),
    auth: (key = KEYS.tenantA) => ({ Authorization: `Bearer ${key}` }),
    replay: async (runId, key = KEYS.tenantA) => {
      const res = await request(app.getHttpServer())
        .get(`/v1/runs/${runId}/replay`)
        .set({ Authorization: `Bearer ${key}` })
        .buffer(true)
        .parse((r, done) => {
          let text = '';
          r.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
          r.on('end', () => done(null, text));
        });
      const text = (res.body as string).trim();
      const lines =
        text === ''
          ? []
          : text.split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);
      return { status: res.status, type: String(res.headers['content-type']), lines };
    },
    close: async () => {
      await app.close();
      if (ownDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
