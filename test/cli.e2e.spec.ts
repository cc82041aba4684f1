/**
 * The `runledger` CLI as an operator runs it: the compiled executable (no ts-node) started
 * as a process against a data directory a real service wrote, with its exit codes, its
 * output, and its refusal to rebuild under a running service.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { RunledgerClient, type NewEvent, type RecordedEvent } from '@runledger/client';
import { REPO_ROOT, makeTempDir, startService } from './support/service-process';

jest.setTimeout(120_000);

const CLI = join(REPO_ROOT, 'dist', 'services', 'cli', 'src', 'main.js');
const KEY = 'e2e-cli-key-0123456789abcdef';
const KEYS = `${KEY}=e2e:append,read,admin`;

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runCli(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      cwd: REPO_ROOT,
      env: { PATH: process.env.PATH, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** The CLI on a pseudo-terminal (util-linux `script`), as a person at a shell sees it. */
function runCliOnTerminal(args: string[], env: Record<string, string>): Promise<CliResult> {
  const command = [process.execPath, CLI, ...args].map((a) => `'${a}'`).join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qec', command, '/dev/null'], {
      env: { PATH: process.env.PATH, TERM: 'xterm', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr: '' }));
  });
}

const runStarted = (threadId: string): NewEvent => ({
  type: 'run.started',
  data: { threadId, agent: 'e2e-agent', source: 'api' },
});
const messageAdded = (messageId: string, text: string): NewEvent => ({
  type: 'message.added',
  data: { messageId, role: 'user', text },
});

const jsonLines = (text: string) =>
  text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);

describe('runledger CLI: usage', () => {
  it('prints its help and exit codes, and each command its own help', async () => {
    const help = await runCli(['--help']);
    expect(help.code).toBe(0);
    for (const command of ['replay', 'verify', 'rebuild', 'keys']) {
      expect(help.stdout).toContain(command);
    }
    expect(help.stdout).toContain('Exit codes:');
    const replayHelp = await runCli(['replay', '--help']);
    expect(replayHelp.code).toBe(0);
    expect(replayHelp.stdout).toMatch(/^Usage: runledger replay <runId>/);
  });

  it('prints the package version', async () => {
    const { version } = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
      version: string;
    };
    expect(await runCli(['--version'])).toMatchObject({ code: 0, stdout: `${version}\n` });
  });

  it.each([
    [['frobnicate'], /unknown command "frobnicate"/],
    [['replay'], /replay takes <runId>; got 0 argument/],
    [['verify', 'a', 'b'], /verify takes <runId>; got 2 argument/],
    [['rebuild', '--force'], /rebuild: Unknown option '--force'/],
    [['keys'], /keys needs --tenant/],
    [['keys', '--tenant', 'acme', '--scopes', 'root'], /unknown scopes root/],
    [['replay', 'bad id!'], /"bad id!" is not a run id/],
  ])('answers %j with exit 2 and a one-line reason, no stack trace', async (args, reason) => {
    const result = await runCli(args);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(reason);
    expect(result.stderr).toContain('runledger --help');
    expect(result.stderr).not.toMatch(/\n\s+at /);
  });

  it.each([
    ['a directory that does not exist', () => join(makeTempDir(), 'mistyped')],
    ['a file', () => CLI],
  ])(
    'refuses a DATA_DIR that is %s with exit 2, creating nothing there',
    async (_what, dataDir) => {
      const dir = dataDir();
      for (const args of [['verify', 'run-1'], ['replay', 'run-1'], ['rebuild']]) {
        const result = await runCli(args, { DATA_DIR: dir });
        expect({ args, code: result.code }).toEqual({ args, code: 2 });
        expect(result.stderr).toContain(`DATA_DIR=${dir} holds no runledger log (runledger.db)`);
        expect(result.stderr).not.toMatch(/\n\s+at /);
      }
      expect(existsSync(join(dir, 'runledger.db'))).toBe(false);
    },
  );

  it('refuses a bad configuration with exit 2 naming the variable', async () => {
    const result = await runCli(['replay', 'run-1'], { SQLITE_SYNCHRONOUS: 'SOMETIMES' });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('SQLITE_SYNCHRONOUS must be FULL or NORMAL');
  });
});

describe('runledger CLI: keys', () => {
  it('prints a key entry the service accepts', async () => {
    const result = await runCli(['keys', '--tenant', 'acme', '--scopes', 'append,read']);
    expect(result.code).toBe(0);
    const entry = result.stdout.trim();
    expect(entry).toMatch(/^[A-Za-z0-9_-]{43}=acme:append,read$/);
    const key = entry.slice(0, entry.indexOf('='));
    const service = await startService({ dataDir: makeTempDir(), apiKeys: entry });
    try {
      const client = new RunledgerClient({ baseUrl: service.baseUrl, apiKey: key });
      await client.append('keys-run', [runStarted('keys-thread')]);
      expect((await client.readEvents('keys-run')).events).toHaveLength(1);
    } finally {
      await service.kill('SIGTERM');
    }
  });
});

describe('runledger CLI: replay, verify and rebuild on a data directory the service wrote', () => {
  const dataDir = makeTempDir();
  const env = { DATA_DIR: dataDir };
  const runId = 'cli-run';
  let served: RecordedEvent[];
  let threadBefore: unknown;
  let notificationsBefore: unknown;
  let lastPosition: number;

  /** The tenant's notifications, once the client surface has folded `minPosition`. */
  async function notifications(baseUrl: string, minPosition: number): Promise<unknown> {
    const response = await fetch(`${baseUrl}/v1/notifications?minPosition=${minPosition}`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(response.status).toBe(200);
    return response.json();
  }

  beforeAll(async () => {
    const service = await startService({ dataDir, apiKeys: KEYS });
    const client = new RunledgerClient({ baseUrl: service.baseUrl, apiKey: KEY });
    await client.append(runId, [runStarted('cli-thread')]);
    for (let i = 0; i < 30; i++) {
      await client.append(runId, [messageAdded(`m-${i}`, `message ${i}`)]);
    }
    served = [];
    for await (const event of client.replay(runId)) served.push(event);
    threadBefore = await client.thread('cli-thread', {
      minPosition: served[served.length - 1].position,
    });
    // A second run, finished: its thread gets a notification in the client surface.
    const finished = await client.append('cli-finished-run', [
      runStarted('cli-finished-thread'),
      { type: 'run.finished', data: { status: 'completed' } },
    ]);
    lastPosition = finished.position;
    notificationsBefore = await notifications(service.baseUrl, lastPosition);
    expect(JSON.stringify(notificationsBefore)).toContain('cli-finished-thread');

    // While the service runs, rebuild refuses and changes nothing.
    const refused = await runCli(['rebuild'], env);
    expect(refused.code).toBe(4);
    expect(refused.stderr).toContain('is in use by a running runledger service');
    expect(await client.thread('cli-thread')).toEqual(threadBefore);
    await service.kill('SIGTERM');
  });

  it('replays the run as the same NDJSON the HTTP replay serves', async () => {
    const result = await runCli(['replay', runId, '--tenant', 'e2e'], env);
    expect(result.code).toBe(0);
    expect(jsonLines(result.stdout)).toEqual(served);
  });

  it('answers exit 3 for a run that does not exist', async () => {
    const result = await runCli(['replay', 'no-such-run', '--tenant', 'e2e'], env);
    expect(result.code).toBe(3);
    expect(result.stderr).toContain(`run no-such-run of tenant e2e not found in ${dataDir}`);
  });

  it('verifies the chain, reporting progress as JSON lines when not on a terminal', async () => {
    const result = await runCli(['verify', runId, '--tenant', 'e2e'], env);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({
      runId,
      count: served.length,
      verified: true,
      firstBrokenRevision: null,
    });
    const progress = jsonLines(result.stderr);
    expect(progress[0]).toMatchObject({ msg: 'verify started', total: served.length });
    expect(progress[progress.length - 1]).toMatchObject({
      msg: 'verify finished',
      done: served.length,
      percent: 100,
      etaSeconds: 0,
    });
  });

  it('rebuilds the read models, then the service serves the same thread and notifications', async () => {
    const result = await runCli(['rebuild'], env);
    expect(result.stderr).toContain('"msg":"rebuild finished"');
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ rebuilt: true });
    // The client surface was dropped too, to be refolded by the service.
    const surface = new Database(join(dataDir, 'client-surface.db'), { readonly: true });
    try {
      expect(surface.prepare('SELECT COUNT(*) AS n FROM notifications').get()).toEqual({ n: 0 });
      expect(
        surface.prepare("SELECT position FROM checkpoints WHERE name = 'client-surface'").get(),
      ).toEqual({ position: 0 });
    } finally {
      surface.close();
    }
    // The rebuild left its target with the views: had it stopped short of it, the service's
    // next start would go on answering 503 until it had passed it.
    const views = new Database(join(dataDir, 'read-models.db'), { readonly: true });
    try {
      const position = (name: string) =>
        (
          views.prepare('SELECT position FROM checkpoints WHERE name = ?').get(name) as {
            position: number;
          }
        ).position;
      expect(position('rebuild-target')).toBeGreaterThan(0);
      expect(position('threads')).toBeGreaterThanOrEqual(position('rebuild-target'));
    } finally {
      views.close();
    }
    const service = await startService({ dataDir, apiKeys: KEYS });
    try {
      const client = new RunledgerClient({ baseUrl: service.baseUrl, apiKey: KEY });
      expect(await client.thread('cli-thread')).toEqual(threadBefore);
      expect(await notifications(service.baseUrl, lastPosition)).toEqual(notificationsBefore);
    } finally {
      await service.kill('SIGTERM');
    }
  });

  it('draws a progress bar with percentage, rate and ETA on a terminal', async () => {
    const result = await runCliOnTerminal(['rebuild'], env);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(
      /rebuild \[#{30}\] 100% \d[\d,]*\/\d[\d,]* events [\d,]+\/s ETA \d+s/,
    );
  });

  it('names the first broken revision and exits 1 when the log was altered', async () => {
    const db = new Database(join(dataDir, 'runledger.db'));
    db.prepare('UPDATE events SET data = ? WHERE stream LIKE ? AND revision = 7').run(
      JSON.stringify({ messageId: 'm-6', role: 'user', text: 'rewritten' }),
      `%${runId}`,
    );
    db.close();
    const result = await runCli(['verify', runId, '--tenant', 'e2e'], env);
    expect(result.code).toBe(1);
    expect(JSON.parse(result.stdout)).toMatchObject({ verified: false, firstBrokenRevision: 7 });
  });

  it('replays an altered log whole, then names the first broken revision and exits 1', async () => {
    const result = await runCli(['replay', runId, '--tenant', 'e2e'], env);
    expect(result.code).toBe(1);
    const lines = jsonLines(result.stdout);
    expect(lines).toHaveLength(served.length + 1);
    expect(lines.slice(0, served.length).map((line) => line.id)).toEqual(served.map((e) => e.id));
    expect(lines[served.length]).toEqual({
      runId,
      count: served.length,
      headHash: null,
      verified: false,
      firstBrokenRevision: 7,
    });

    expect(result.stderr).toContain(`the hash chain of run ${runId} breaks at revision 7`);
  });

  it('ends quietly with 141 when its reader stops reading (a pipe to head)', async () => {
    const result = await new Promise<CliResult>((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, 'replay', runId, '--tenant', 'e2e'], {
        cwd: REPO_ROOT,
        env: { PATH: process.env.PATH, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout.destroy();
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.once('error', reject);
      child.once('close', (code) => resolve({ code, stdout: '', stderr }));
    });
    expect(result).toEqual({ code: 141, stdout: '', stderr: '' });
  });

  it('replays a log with an unreadable event whole, naming it, and verify names its revision', async () => {
    const db = new Database(join(dataDir, 'runledger.db'));
    db.prepare("UPDATE events SET data = '{broken' WHERE stream LIKE ? AND revision = 3").run(
      `%${runId}`,
    );
    db.close();
    const replayed = await runCli(['replay', runId, '--tenant', 'e2e'], env);
    expect(replayed.code).toBe(1);
    const lines = jsonLines(replayed.stdout);
    expect(lines).toHaveLength(served.length + 1);
    expect(lines[3]).toMatchObject({
      id: served[3].id,
      revision: 3,
      data: null,
      unreadable: expect.stringContaining('does not parse'),
    });
    expect(lines[served.length]).toMatchObject({ verified: false, firstBrokenRevision: 3 });
    // The log line naming it is one JSON line on stderr, as a log collector takes it, beside
    // the command's own words (the broken revision).
    const logged = replayed.stderr.split('\n').filter((line) => line.startsWith('{'));
    expect(replayed.stderr).not.toContain('\u001b[');
    expect(logged.map((line) => JSON.parse(line) as unknown)).toContainEqual(
      expect.objectContaining({
        level: 'error',
        message: expect.objectContaining({ msg: 'a recorded event is unreadable', revision: 3 }),
      }),
    );
    const verified = await runCli(['verify', runId, '--tenant', 'e2e'], env);
    expect(verified.code).toBe(1);
    expect(JSON.parse(verified.stdout)).toMatchObject({
      verified: false,
      firstBrokenRevision: 3,
    });
    expect(verified.stderr).not.toMatch(/\n\s+at /);
  });
});
