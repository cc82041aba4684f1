import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeEventStoreContract } from './event-store.contract';
import { SqliteEventStore } from './sqlite.event-store';

const dir = mkdtempSync(join(tmpdir(), 'runledger-sqlite-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describeEventStoreContract(
  'SQLite',
  async () => new SqliteEventStore({ file: join(dir, 'events.db') }),
);
