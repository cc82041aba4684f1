/**
 * A Server-Sent Events reader over fetch (which, unlike EventSource, can send an
 * Authorization header), with resumption: it remembers the last `id:` (a log position) and
 * reconnects from there after a dropped connection or an `overflow`, so the caller sees
 * every event once, in order.
 */
export interface SseMessage {
  id?: string;
  event?: string;
  data: string;
}

/** Parses an SSE byte stream into messages (comments and heartbeats are skipped). */
export async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder();
  let buffer = '';
  let message: { id?: string; event?: string; data: string[] } = { data: [] };
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r?\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer[newline] === '\r' ? 2 : 1));
        if (line === '') {
          if (message.data.length > 0 || message.id !== undefined) {
            yield { id: message.id, event: message.event, data: message.data.join('\n') };
          }
          message = { data: [] };
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'data') message.data.push(value);
        else if (field === 'id') message.id = value;
        else if (field === 'event') message.event = value;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
