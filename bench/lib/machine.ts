/**
 * The machine a section was measured on: numbers mean little without it. The temp
 * directory's file system is included because every benchmark here waits on fsync there.
 */
import Database from 'better-sqlite3';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  os: string;
  node: string;
  sqlite: string;
  /** Where the benchmark's SQLite files lived, and on what. */
  tempFileSystem: string;
}

export function describeMachine(): MachineInfo {
  const cpus = os.cpus();
  const db = new Database(':memory:');
  const { version } = db.prepare('SELECT sqlite_version() AS version').get() as {
    version: string;
  };
  db.close();
  return {
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cores: cpus.length,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    sqlite: `${version} (better-sqlite3 ${packageVersion('better-sqlite3')})`,
    tempFileSystem: fileSystemOf(os.tmpdir()),
  };
}

/** The commit measured, and whether the work tree differed from it (outside bench/ and docs/). */
export function codeRevision(): string {
  try {
    const git = (...args: string[]) =>
      execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const commit = git('rev-parse', '--short', 'HEAD');
    const changed = git('status', '--porcelain', '--', '.', ':!bench', ':!docs');
    return changed === '' ? commit : `${commit} with uncommitted changes`;
  } catch {
    return 'unknown (not a git work tree)';
  }
}

export function packageVersion(name: string): string {
  try {
    const file = require.resolve(`${name}/package.json`);
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

function fileSystemOf(dir: string): string {
  try {
    // `df -T` prints a header line, then: device, type, sizes…, mount point.
    const line = execFileSync('df', ['-PT', dir], { encoding: 'utf8' }).trim().split('\n')[1];
    const fields = line.split(/\s+/);
    return `${dir} on ${fields[1]} (${fields[0]})`;
  } catch {
    return `${dir} (file system unknown)`;
  }
}

export function machineLines(machine: MachineInfo): string[] {
  return [
    `CPU: ${machine.cpuModel}, ${machine.cores} cores`,
    `Memory: ${machine.memoryGiB} GiB`,
    `OS: ${machine.os}`,
    `Node: ${machine.node}`,
    `SQLite: ${machine.sqlite}`,
    `Temp files: ${machine.tempFileSystem}`,
  ];
}

export function sameMachine(a: MachineInfo, b: MachineInfo): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
