/**
 * The SQLite log's writer thread (SqliteEventStore with `writer: 'thread'`): runs each group
 * of appends in its own connection, so the fsync of a durable commit (milliseconds on real
 * disks) never holds the service's event loop, which meanwhile gathers the next group.
 */
import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';
import {
  fromWire,
  SqliteAppender,
  type AppendOutcome,
  type FromWriter,
  type ToWriter,
  type WriterData,
} from './sqlite.appender';

const { file, synchronous } = workerData as WriterData;
const db = new Database(file);
db.pragma('journal_mode = WAL');
db.pragma(`synchronous = ${synchronous}`);
db.pragma('busy_timeout = 5000');
const appender = new SqliteAppender(db);

function post(message: FromWriter): void {
  parentPort!.postMessage(message);
}

parentPort!.on('message', (message: ToWriter) => {
  if (message.type === 'close') {
    db.close();
    parentPort!.close();
    return;
  }
  let outcomes: AppendOutcome[];
  try {
    outcomes = appender.appendGroup(message.requests.map(fromWire));
  } catch (error) {
    post({ type: 'commit-failed', message: String(error) });
    return;
  }
  post({ type: 'outcomes', outcomes });
});
