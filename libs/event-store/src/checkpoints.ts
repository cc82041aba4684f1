/**
 * A log follower's durable positions, kept in the follower's own SQLite file beside the data
 * they describe, so a checkpoint commits in the same transaction as the work it passes.
 */
import type { Database, Statement } from 'better-sqlite3';

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS checkpoints (
    name     TEXT    PRIMARY KEY,
    position INTEGER NOT NULL
  );
`;

export class Checkpoints {
  private readonly select: Statement<[string], { position: number }>;
  private readonly upsert: Statement<[string, number]>;

  constructor(db: Database) {
    db.exec(SCHEMA);
    this.select = db.prepare('SELECT position FROM checkpoints WHERE name = ?');
    this.upsert = db.prepare(
      'INSERT INTO checkpoints (name, position) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET position = excluded.position',
    );
  }

  /** The position of `name`, 0 when it never committed one. */
  get(name: string): number {
    return this.select.get(name)?.position ?? 0;
  }

  /** Call inside the transaction that commits the work up to `position`. */
  save(name: string, position: number): void {
    this.upsert.run(name, position);
  }

  /**
   * A checkpoint kept under `shared` before each destination (a topic) had its own: the first
   * `name` that asks takes it over, when it has none yet, and `shared` is spent, so a name
   * asking later starts from nothing. True when `name` took it. Call inside a transaction.
   */
  takeOver(shared: string, name: string): boolean {
    const position = this.get(shared);
    if (position === 0) return false;
    const taken = this.get(name) === 0;
    if (taken) this.save(name, position);
    this.save(shared, 0);
    return taken;
  }
}
