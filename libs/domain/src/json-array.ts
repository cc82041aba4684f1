/** JSON texts spliced into one answer as bytes, for pages whose items are stored or made as JSON. */

const COMMA = Buffer.from(',');

/**
 * JSON texts (UTF-8) as one JSON array, written between `prefix` and `suffix`: the texts are
 * copied as they are, never decoded. A page's megabyte of tool output built as a string and
 * then encoded for the socket cost about three times what these copies do.
 */
export function jsonArray(items: readonly Buffer[], prefix = '', suffix = ''): Buffer {
  const chunks: Buffer[] = [Buffer.from(`${prefix}[`)];
  for (const [index, item] of items.entries()) {
    if (index > 0) chunks.push(COMMA);
    chunks.push(item);
  }
  chunks.push(Buffer.from(`]${suffix}`));
  return Buffer.concat(chunks);
}
