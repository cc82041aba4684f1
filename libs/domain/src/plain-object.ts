/**
 * A module of its own, importing nothing: the projector's worker thread calls it through the
 * thread fold and loads only what it runs, where the event catalogue brings class-validator.
 */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
