/**
 * A Server-Sent Events client for tests, over plain node:http: it parses the stream as a
 * browser's EventSource would (messages separated by a blank line; comments kept, since
 * tests look for heartbeats) and can stop reading, to play a client whose socket backs up.
 */
import { request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';

export interface SseMessage {
  id?: string;
  event?: string;
  data?: string;
  comments: string[];
}

/** An event message's parsed data: the recorded event. */
export interface StreamedEvent {
  id: string;
  type: string;
  revision: number;
  position: number;
  recordedAt: string;
  data: Record<string, unknown>;
  metadata: Record<string, unknown>;
}

export class SseReader {
  readonly messages: SseMessage[] = [];
  ended = false;
  private buffer = '';
  private readonly listeners = new Set<() => void>();

  private constructor(readonly res: IncomingMessage) {
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      this.buffer += chunk;
      this.parse();
      this.notify();
    });
    const done = () => {
      this.ended = true;
      this.notify();
    };
    res.on('end', done);
    res.on('close', done);
    res.on('error', done);
  }

  /** Opens a stream; a non-200 answer is returned as its status, headers and parsed JSON body. */
  static async open(
    app: NestFastifyApplication,
    path: string,
    headers: Record<string, string>,
  ): Promise<
    | SseReader
    | {
        status: number;
        type: string;
        headers: IncomingMessage['headers'];
        body: Record<string, unknown>;
      }
  > {
    const { port } = app.getHttpServer().address() as AddressInfo;
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, headers, agent: false }, resolve);
      req.on('error', reject);
      req.end();
    });
    if (res.statusCode === 200) return new SseReader(res);
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    return {
      status: res.statusCode ?? 0,
      type: String(res.headers['content-type']),
      headers: res.headers,
      body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>,
    };
  }

  /** Messages that carry an event (not the start id, not comments). */
  events(type?: string): SseMessage[] {
    return this.messages.filter(
      (m) =>
        m.data !== undefined && m.event !== undefined && (type === undefined || m.event === type),
    );
  }

  /** The recorded events received, parsed. */
  recorded(): StreamedEvent[] {
    return this.events()
      .filter((m) => m.event !== 'overflow')
      .map((m) => JSON.parse(m.data!) as StreamedEvent);
  }

  /** Resolves once `done` holds for what was received; rejects after `timeoutMs`. */
  async until(done: (reader: SseReader) => boolean, timeoutMs = 10_000): Promise<void> {
    if (done(this)) return;
    await new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!done(this)) return;
        clearTimeout(timer);
        this.listeners.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.listeners.delete(check);
        reject(
          new Error(
            `the stream did not reach the expected state within ${timeoutMs} ms; received ${this.messages.length} messages${this.ended ? ', then it ended' : ''}`,
          ),
        );
      }, timeoutMs);
      this.listeners.add(check);
    });
  }

  close(): void {
    this.res.destroy();
  }

  private parse(): void {
    for (let end = this.buffer.indexOf('\n\n'); end !== -1; end = this.buffer.indexOf('\n\n')) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const message: SseMessage = { comments: [] };
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) {
          message.comments.push(line.slice(1).trim());
          continue;
        }
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'id') message.id = value;
        else if (field === 'event') message.event = value;
        else if (field === 'data')
          message.data = message.data === undefined ? value : `${message.data}\n${value}`;
      }
      this.messages.push(message);
    }
  }

  private notify(): void {
    for (const listener of [...this.listeners]) listener();
  }
}

export function isReader(value: SseReader | { status: number }): value is SseReader {
  return value instanceof SseReader;
}
