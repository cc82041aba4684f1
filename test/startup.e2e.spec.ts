/**
 * Starting the service as an operator would: a first run without RUNLEDGER_API_KEYS hands out
 * a working development key (kept private in DATA_DIR), a bad setting stops the process with
 * a message naming the variable, and "listening" means the read side is up as well.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { RunsClient, runStarted } from './support/runs-client';
import {
  REPO_ROOT,
  assertBuilt,
  makeTempDir,
  request,
  runUntilExit,
  startService,
} from './support/service-process';

jest.setTimeout(120_000);

const DEV_KEY_LINE = /authenticate with: Authorization: Bearer (\S+).*development key/;

describe('first start without RUNLEDGER_API_KEYS', () => {
  it('prints a development key, keeps it in DATA_DIR/dev-api-key (0600), and accepts it', async () => {
    const dataDir = join(makeTempDir(), 'fresh-data-dir');
    const service = await startService({ dataDir, apiKeys: undefined });
    const [, key] = await service.process.waitForLine(DEV_KEY_LINE);

    const file = join(dataDir, 'dev-api-key');
    expect((statSync(file).mode & 0o777).toString(8)).toBe('600');
    expect(readFileSync(file, 'utf8').trim()).toBe(key);

    const withKey = await request(service.baseUrl, '/v1/runs/x/events', { key });
    expect({ status: withKey.status, body: await withKey.json() }).toMatchObject({
      status: 404,
      body: { error: 'run_not_found' },
    });
    const withoutKey = await request(service.baseUrl, '/v1/runs/x/events');
    expect(withoutKey.status).toBe(401);
    const wrongKey = await request(service.baseUrl, '/v1/runs/x/events', {
      key: `${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`,
    });
    expect(wrongKey.status).toBe(401);

    // The key survives a restart on the same DATA_DIR.
    await service.kill('SIGTERM');
    const again = await startService({ dataDir, apiKeys: undefined });
    const [, sameKey] = await again.process.waitForLine(DEV_KEY_LINE);
    expect(sameKey).toBe(key);
    expect((await request(again.baseUrl, '/v1/runs/x/events', { key })).status).toBe(404);
    await again.kill('SIGTERM');
  });
});

describe('the listening line', () => {
  it('comes once the projector follows the log: a read-your-writes right after it is answered', async () => {
    const key = 'e2e-startup-key-0123456789';
    const service = await startService({
      dataDir: makeTempDir(),
      apiKeys: `${key}=e2e:append,read`,
      env: { LOG_LEVEL: 'log' },
    });
    try {
      const stdout = service.process.stdout;
      const following = stdout.indexOf('projector following the log');
      expect(following).toBeGreaterThanOrEqual(0);
      expect(following).toBeLessThan(stdout.indexOf('runledger listening on'));

      const { position } = await new RunsClient(service.baseUrl, key).append('run-1', [
        runStarted('thread-1'),
      ]);
      const thread = await request(
        service.baseUrl,
        `/v1/threads/thread-1?minPosition=${position}`,
        {
          key,
        },
      );
      expect(thread.status).toBe(200);
    } finally {
      await service.kill('SIGTERM');
    }
  });
});

describe("the projector's worker thread", () => {
  it('loads only what it runs: not Nest, class-validator or the EventStoreDB client', () => {
    const worker = join(REPO_ROOT, 'dist', 'libs', 'projections', 'src', 'projector.worker.js');
    assertBuilt(worker);
    // The worker file's own imports, loaded as the worker loads them (it cannot run outside one).
    const imports = [...readFileSync(worker, 'utf8').matchAll(/require\("([^"]+)"\)/g)].map(
      ([, specifier]) => specifier,
    );
    expect(imports).toEqual(expect.arrayContaining(['./projector', './read-model.store']));
    const loaded = execFileSync(
      process.execPath,
      [
        '-e',
        `for (const m of ${JSON.stringify(imports)}) require(m.startsWith('.') ? require('node:path').join(${JSON.stringify(dirname(worker))}, m) : m);
         console.log(JSON.stringify(Object.keys(require.cache)));`,
      ],
      { encoding: 'utf8' },
    );
    const heavy = (JSON.parse(loaded) as string[]).filter((file) =>
      /node_modules\/(@nestjs|class-validator|@kurrent|@grpc)\//.test(file),
    );
    expect(heavy).toEqual([]);
  });
});

describe('keys as short as the format example', () => {
  it('starts, warns on stderr that the keys are guessable, and accepts them', async () => {
    const service = await startService({
      dataDir: makeTempDir(),
      apiKeys: 'key1=tenantA:append,read;key2=tenantB:read,admin',
    });
    try {
      const res = await request(service.baseUrl, '/v1/runs/x/events', { key: 'key1' });
      expect(res.status).toBe(404);
      expect((await request(service.baseUrl, '/v1/runs/x/events', { key: 'key3' })).status).toBe(
        401,
      );
      // Written before the app starts, so it is in the pipe before the listening line.
      for (let i = 0; i < 50 && !/shorter than 16/.test(service.process.stderr); i += 1)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(service.process.stderr).toMatch(
        /keys shorter than 16 characters \(tenants tenantA, tenantB\)/,
      );
    } finally {
      await service.kill('SIGTERM');
    }
  });
});

describe('a bad setting', () => {
  it('stops the process with a non-zero exit and a message naming PORT', async () => {
    const result = await runUntilExit({
      PORT: 'abc',
      HOST: '127.0.0.1',
      DATA_DIR: makeTempDir(),
      RUNLEDGER_API_KEYS: 'e2e-startup-key-0123456789=e2e:read',
    });
    expect(result.code).not.toBe(0);
    expect(result.code).not.toBeNull();
    expect(result.stderr).toMatch(/PORT/);
    expect(result.stdout).not.toMatch(/listening on/);
  });
});

describe('production', () => {
  it.each([
    ['NODE_ENV', { NODE_ENV: 'production' }],
    ['RUNLEDGER_ENV', { RUNLEDGER_ENV: 'production' }],
  ])(
    'with %s=production refuses to start without keys or RECEIPT_SECRET, naming each, and prints no key',
    async (_, mode) => {
      const dataDir = makeTempDir();
      const bare = await runUntilExit({ ...mode, HOST: '127.0.0.1', PORT: '0', DATA_DIR: dataDir });
      expect(bare.code).not.toBe(0);
      expect(bare.code).not.toBeNull();
      expect(bare.stderr).toMatch(/RUNLEDGER_API_KEYS is required in production/);
      expect(bare.stderr).toMatch(/RECEIPT_SECRET is required in production/);
      expect(bare.stdout).not.toMatch(
        /listening on|authenticate with: Authorization: Bearer \S{20}/,
      );
      expect(() => statSync(join(dataDir, 'dev-api-key'))).toThrow();

      const keysOnly = await runUntilExit({
        ...mode,
        HOST: '127.0.0.1',
        PORT: '0',
        DATA_DIR: dataDir,
        RUNLEDGER_API_KEYS: 'e2e-production-key-0123456789=e2e:read',
      });
      expect(keysOnly.code).not.toBe(0);
      expect(keysOnly.stderr).toMatch(/RECEIPT_SECRET is required in production/);
      expect(keysOnly.stderr).not.toMatch(/RUNLEDGER_API_KEYS/);
    },
  );

  it('starts in production with keys and RECEIPT_SECRET', async () => {
    const service = await startService({
      dataDir: makeTempDir(),
      apiKeys: 'e2e-production-key-0123456789=e2e:read',
      env: { NODE_ENV: 'production', RECEIPT_SECRET: 'r'.repeat(40) },
    });
    try {
      const res = await request(service.baseUrl, '/v1/threads', {
        key: 'e2e-production-key-0123456789',
      });
      expect(res.status).toBe(200);
    } finally {
      await service.process.kill('SIGTERM');
    }
  });
});
