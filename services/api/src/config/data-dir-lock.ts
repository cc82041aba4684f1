/**
 * One writer of a data directory's read models at a time: the api holds this lock while it
 * runs, and `runledger rebuild` takes it before dropping anything. The lock is SQLite's own
 * exclusive file lock on DATA_DIR/runledger.lock, so the operating system releases it when
 * its holder exits, however it exits: there is no stale lock to clean up after a crash.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';

export const LOCK_FILE = 'runledger.lock';

export class DataDirInUseError extends Error {
  constructor(
    readonly dataDir: string,
    readonly file: string,
  ) {
    super(
      `${dataDir} is in use by a running runledger service or CLI (it holds ${file}); stop it first`,
    );
    this.name = 'DataDirInUseError';
  }
}

export class DataDirLock {
  private constructor(private readonly db: Database.Database) {}

  /** Takes the lock at once or throws DataDirInUseError; never waits for it. */
  static acquire(dataDir: string): DataDirLock {
    mkdirSync(dataDir, { recursive: true });
    const file = join(dataDir, LOCK_FILE);
    const db = new Database(file, { timeout: 0 });
    try {
      // In exclusive locking mode the first write's lock is kept until the connection closes.
      db.pragma('locking_mode = EXCLUSIVE');
      db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER)');
      db.prepare('DELETE FROM holder').run();
      db.prepare('INSERT INTO holder (pid) VALUES (?)').run(process.pid);
      return new DataDirLock(db);
    } catch (error) {
      db.close();
      if (error instanceof Database.SqliteError && error.code.startsWith('SQLITE_BUSY')) {
        throw new DataDirInUseError(dataDir, file);
      }
      throw error;
    }
  }

  release(): void {
    this.db.close();
  }
}
