/**
 * A typed client for the runledger HTTP API, written over the types generated from its
 * OpenAPI document (./openapi.ts). No dependencies beyond `fetch`: it runs in Node 20+ and
 * in browsers.
 *
 * - `append` gives every event an id before the first attempt, so a retry after a lost
 *   answer is idempotent: the server answers the original revisions and writes nothing twice.
 * - `replay` and `threads` are async iterables over NDJSON and pages.
 * - `follow` is a Server-Sent Events stream that resumes by itself after a drop or an
 *   overflow, from the last position it saw.
 */
import { ChainBrokenError, RunledgerError, type ErrorBody } from './errors';
import type { components } from './openapi';
import { parseSse } from './sse';

type Schemas = components['schemas'];
export type NewEvent = Schemas['NewEvent'];
export type AppendResponse = Schemas['AppendResponse'];
export type RecordedEvent = Schemas['RecordedEvent'];
export type RunEventsPage = Schemas['RunEventsPage'];
export type AuditVerdict = Schemas['AuditVerdict'];
export type ThreadListPage = Schemas['ThreadListPage'];
export type ThreadSummary = Schemas['ThreadSummary'];
export type ThreadView = Schemas['ThreadView'];
export type VoiceSeed = Schemas['VoiceSeed'];
export type Resolution = Schemas['Resolution'];
export type ConsumeResponse = Schemas['ConsumeResponse'];
export type SteerResponse = Schemas['SteerResponse'];
export type StopResponse = Schemas['StopResponse'];
export type StreamToken = Schemas['StreamTokenResponse'];
export type ExpectedRevision = NonNullable<Schemas['AppendRequest']['expectedRevision']>;

export interface RetryPolicy {
  /** Attempts in all, the first included. */
  attempts: number;
  /** The first wait; it doubles after each failed attempt. */
  baseDelayMs: number;
  maxDelayMs: number;
}

export interface ClientOptions {
  baseUrl: string;
  apiKey: string;
  /** Sent as X-Runledger-User: the person acting, for rate limits and receipts. */
  user?: string;
  retry?: Partial<RetryPolicy>;
  fetch?: typeof fetch;
}

const DEFAULT_RETRY: RetryPolicy = { attempts: 4, baseDelayMs: 200, maxDelayMs: 5000 };

/** Answers worth another attempt: the request may not have been applied, or may succeed later. */
const RETRYABLE_STATUSES = new Set([429, 502, 503, 504]);

export type FollowTarget = { runId: string } | { threadId: string };

export interface FollowOptions {
  /** Start after this position (exclusive); `0` is the whole history. Default: from now. */
  from?: number;
  signal?: AbortSignal;
}

export class RunledgerClient {
  private readonly baseUrl: string;
  private readonly retry: RetryPolicy;
  private readonly fetch: typeof fetch;

  constructor(private readonly options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** Appends a batch atomically; ids are assigned once here, so every retry is idempotent. */
  append(
    runId: string,
    events: NewEvent[],
    options: { expectedRevision?: ExpectedRevision } = {},
  ): Promise<AppendResponse> {
    const body = {
      ...(options.expectedRevision === undefined
        ? {}
        : { expectedRevision: options.expectedRevision }),
      events: events.map((event) => ({ ...event, id: event.id ?? globalThis.crypto.randomUUID() })),
    };
    return this.json('POST', `/v1/runs/${enc(runId)}/events`, body);
  }

  readEvents(
    runId: string,
    page: { fromRevision?: number; limit?: number } = {},
  ): Promise<RunEventsPage> {
    return this.json('GET', `/v1/runs/${enc(runId)}/events${query(page)}`);
  }

  /**
   * Every recorded event of the run, in order, streamed from the NDJSON replay. When the
   * service finds the run's hash chain broken, a ChainBrokenError follows the last event.
   */
  async *replay(runId: string): AsyncGenerator<RecordedEvent> {
    const response = await this.send('GET', `/v1/runs/${enc(runId)}/replay`);
    const decoder = new TextDecoder();
    let buffer = '';
    const reader = response.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      const lines = buffer.split('\n');
      buffer = done ? '' : lines.pop()!;
      for (const line of lines) {
        if (line.trim() === '') continue;
        const item = JSON.parse(line) as RecordedEvent | AuditVerdict;
        if ('firstBrokenRevision' in item) throw new ChainBrokenError(item);
        yield item;
      }
      if (done) return;
    }
  }

  audit(runId: string): Promise<AuditVerdict> {
    return this.json('GET', `/v1/runs/${enc(runId)}/audit`);
  }

  listThreads(
    page: {
      status?: ThreadSummary['status'];
      limit?: number;
      cursor?: string;
      minPosition?: number;
    } = {},
  ): Promise<ThreadListPage> {
    return this.json('GET', `/v1/threads${query(page)}`);
  }

  /** Every thread (of a status), page after page, newest activity first. */
  async *threads(
    filter: { status?: ThreadSummary['status']; pageSize?: number } = {},
  ): AsyncGenerator<ThreadSummary> {
    let cursor: string | undefined;
    do {
      const page = await this.listThreads({
        status: filter.status,
        limit: filter.pageSize,
        cursor,
      });
      yield* page.threads;
      cursor = page.nextCursor ?? undefined;
    } while (cursor !== undefined);
  }

  thread(threadId: string, options: { minPosition?: number } = {}): Promise<ThreadView> {
    return this.json('GET', `/v1/threads/${enc(threadId)}${query(options)}`);
  }

  voiceSeed(threadId: string, options: { minPosition?: number } = {}): Promise<VoiceSeed> {
    return this.json('GET', `/v1/threads/${enc(threadId)}/voice-seed${query(options)}`);
  }

  steer(runId: string, expectedTurnId: string, instruction: string): Promise<SteerResponse> {
    return this.json('POST', `/v1/runs/${enc(runId)}/steer`, { expectedTurnId, instruction });
  }

  stop(runId: string, reason?: string): Promise<StopResponse> {
    return this.json('POST', `/v1/runs/${enc(runId)}/stop`, reason === undefined ? {} : { reason });
  }

  resolveApproval(
    runId: string,
    approvalId: string,
    decision: 'allow' | 'deny',
  ): Promise<Resolution> {
    return this.json('POST', `/v1/runs/${enc(runId)}/approvals/${enc(approvalId)}/resolve`, {
      decision,
    });
  }

  /** Consumes a one-use receipt; a second use is a RunledgerError 409 `receipt_already_used`. */
  consumeReceipt(receipt: string, toolName: string, input: unknown): Promise<ConsumeResponse> {
    return this.json('POST', '/v1/receipts/consume', { receipt, toolName, input });
  }

  /**
   * A short-lived token for one stream, for a browser: `new EventSource(baseUrl + streamUrl)`
   * opens it without an Authorization header.
   */
  streamToken(target: FollowTarget): Promise<StreamToken> {
    return this.json('POST', '/v1/stream-tokens', target);
  }

  /**
   * A run's or a thread's events as they are recorded, over Server-Sent Events. After a
   * dropped connection or an `overflow` it reconnects with `Last-Event-ID` (the last
   * position it yielded), so no event is missed or repeated. Ends when `signal` aborts.
   */
  async *follow(target: FollowTarget, options: FollowOptions = {}): AsyncGenerator<RecordedEvent> {
    const path =
      'runId' in target
        ? `/v1/runs/${enc(target.runId)}/stream`
        : `/v1/threads/${enc(target.threadId)}/stream`;
    let last: string | undefined = options.from === undefined ? undefined : String(options.from);
    let failures = 0;
    while (!options.signal?.aborted) {
      let response: Response;
      try {
        response = await this.send('GET', path, undefined, {
          headers: {
            accept: 'text/event-stream',
            ...(last === undefined ? {} : { 'last-event-id': last }),
          },
          signal: options.signal,
          attempts: 1,
        });
      } catch (error) {
        if (options.signal?.aborted) return;
        if (error instanceof RunledgerError && !RETRYABLE_STATUSES.has(error.status)) throw error;
        await this.backoff(failures++, options.signal);
        continue;
      }
      try {
        for await (const message of parseSse(response.body!)) {
          failures = 0;
          if (message.event === 'overflow') break;
          if (message.id !== undefined) last = message.id;
          if (message.data !== '') yield JSON.parse(message.data) as RecordedEvent;
        }
      } catch (error) {
        if (options.signal?.aborted) return;
        if (!(error instanceof TypeError) && !isNetworkError(error)) throw error;
      }
      await this.backoff(failures++, options.signal);
    }
  }

  private async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.send(method, path, body);
    return (await response.json()) as T;
  }

  /** One request, retried on network failures and retryable statuses with capped backoff. */
  private async send(
    method: string,
    path: string,
    body?: unknown,
    extra: { headers?: Record<string, string>; signal?: AbortSignal; attempts?: number } = {},
  ): Promise<Response> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.options.apiKey}`,
      ...(this.options.user === undefined ? {} : { 'x-runledger-user': this.options.user }),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...extra.headers,
    };
    const attempts = extra.attempts ?? this.retry.attempts;
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await this.fetch(`${this.baseUrl}${path}`, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: extra.signal,
        });
      } catch (error) {
        if (extra.signal?.aborted || attempt + 1 >= attempts) throw error;
        await this.backoff(attempt, extra.signal);
        continue;
      }
      if (response.ok) return response;
      const failure = await toError(response);
      if (!RETRYABLE_STATUSES.has(response.status) || attempt + 1 >= attempts) throw failure;
      await this.backoff(attempt, extra.signal, failure.retryAfterSeconds);
    }
  }

  private backoff(
    attempt: number,
    signal?: AbortSignal,
    retryAfterSeconds?: number,
  ): Promise<void> {
    const exponential = Math.min(this.retry.baseDelayMs * 2 ** attempt, this.retry.maxDelayMs);
    const ms = retryAfterSeconds === undefined ? exponential : retryAfterSeconds * 1000;
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal?.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

async function toError(response: Response): Promise<RunledgerError> {
  const text = await response.text();
  let body: ErrorBody & Record<string, unknown>;
  try {
    body = JSON.parse(text) as ErrorBody & Record<string, unknown>;
  } catch {
    body = { error: 'unexpected_response', message: text.slice(0, 500) };
  }
  const retryAfter = Number(response.headers.get('retry-after'));
  return new RunledgerError(
    response.status,
    body,
    Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter : undefined,
  );
}

function isNetworkError(error: unknown): boolean {
  return error instanceof Error && /terminated|ECONNRESET|socket|network/i.test(error.message);
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

function query(params: Record<string, string | number | undefined>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined) search.set(key, String(value));
  }
  const text = search.toString();
  return text === '' ? '' : `?${text}`;
}
