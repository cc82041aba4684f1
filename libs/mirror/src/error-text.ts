/**
 * An error as one line for a log or a readiness answer: its name and message, then what it
 * aggregates or was caused by. kafkajs says "Topic creation errors" or "Number of retries
 * exceeded" at the top, and the broker's own reason (a name that collides with another topic,
 * a request that timed out) only in the errors it carries.
 */
export function errorText(error: unknown, depth = 0): string {
  if (!(error instanceof Error)) return String(error);
  const text = `${error.name}: ${error.message}`;
  if (depth >= MAX_DEPTH) return text;
  const { errors, cause } = error as { errors?: unknown; cause?: unknown };
  const inner = [...(Array.isArray(errors) ? errors : []), ...(cause === undefined ? [] : [cause])];
  if (inner.length === 0) return text;
  const shown = inner.slice(0, MAX_INNER).map((item) => errorText(item, depth + 1));
  if (inner.length > MAX_INNER) shown.push(`and ${inner.length - MAX_INNER} more`);
  return `${text} (${shown.join('; ')})`;
}

/** Nesting followed, and inner errors named per level: a readiness answer stays a line. */
const MAX_DEPTH = 3;
const MAX_INNER = 3;
