/**
 * The SQLite log's writer thread (SqliteEventStore with `writer: 'thread'`): runs each group
 * of appends in its own connection, so the fsync of a durable commit (milliseconds on real
 * disks) never holds the service's event loop, which meanwhile gathers the next group.
 */
import Database from 'better-sqlite3';
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import {
  fromWire,
  SqliteAppender,
  type AppendOutcome,
  type FromWriter,
  type ToWriter,
  type WireRequest,
  type WriterData,
} from './sqlite.appender';

const { file, synchronous, maxGroupSize } = workerData as WriterData;
const db = new Database(file);
db.pragma('journal_mode = WAL');
db.pragma(`synchronous = ${synchronous}`);
db.pragma('busy_timeout = 5000');
const appender = new SqliteAppender(db);
const port = parentPort!;

function post(message: FromWriter): void {
  port.postMessage(message);
}

/**
 * Commits the groups in as few transactions as maxGroupSize allows. Groups sent while the
 * last commit ran wait together on the port; taking them all at once is the group commit.
 */
function commit(groups: WireRequest[][]): void {
  while (groups.length > 0) {
    let taken = 1;
    let size = groups[0].length;
    while (taken < groups.length && size + groups[taken].length <= maxGroupSize) {
      size += groups[taken].length;
      taken += 1;
    }
    const batch = groups.splice(0, taken);
    let outcomes: AppendOutcome[];
    try {
      outcomes = appender.appendGroup(batch.flat().map(fromWire));
    } catch (error) {
      post({ type: 'commit-failed', message: String(error), groups: batch.length });
      continue;
    }
    const answers: AppendOutcome[][] = [];
    for (const group of batch) answers.push(outcomes.splice(0, group.length));
    post({ type: 'outcomes', outcomes: answers });
  }
}

port.on('message', (first: ToWriter) => {
  const groups: WireRequest[][] = [];
  let closing = false;
  for (let message: ToWriter | undefined = first; message !== undefined;) {
    if (message.type === 'close') closing = true;
    else groups.push(message.requests);
    message = receiveMessageOnPort(port)?.message as ToWriter | undefined;
  }
  commit(groups);
  if (closing) {
    db.close();
    port.close();
  }
});
