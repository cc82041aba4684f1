/**
 * A small client for the runs API (services/api/src/runs/runs.controller.ts), as a caller
 * outside the service sees it: JSON over HTTP with a bearer key, nothing imported from src.
 */
import { request } from './service-process';

export interface NewEvent {
  id?: string;
  type: string;
  data: unknown;
  metadata?: Record<string, unknown>;
}

export interface AppendResponse {
  runId: string;
  firstRevision: number;
  lastRevision: number;
  position: number;
  events: { id: string; revision: number; position: number }[];
}

export interface EventView {
  id: string;
  type: string;
  revision: number;
  position: number;
  recordedAt: string;
  data: unknown;
  metadata: Record<string, unknown>;
}

export interface AuditVerdict {
  runId: string;
  count: number;
  headHash: string | null;
  verified: boolean;
  firstBrokenRevision: number | null;
}

/** An answer that was not the one expected, with what the service said. */
export class UnexpectedResponse extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    what: string,
  ) {
    super(`${what}: HTTP ${status} ${body.slice(0, 2000)}`);
    this.name = 'UnexpectedResponse';
  }
}

export class RunsClient {
  constructor(
    readonly baseUrl: string,
    readonly key: string,
  ) {}

  /** POST /v1/runs/:runId/events; anything but 201 throws UnexpectedResponse. */
  async append(
    runId: string,
    events: NewEvent[],
    expectedRevision?: number | 'any' | 'no_stream' | 'stream_exists',
  ): Promise<AppendResponse> {
    const body = expectedRevision === undefined ? { events } : { expectedRevision, events };
    const response = await request(this.baseUrl, `/v1/runs/${runId}/events`, {
      key: this.key,
      body,
    });
    const text = await response.text();
    if (response.status !== 201)
      throw new UnexpectedResponse(response.status, text, `append to ${runId}`);
    return JSON.parse(text) as AppendResponse;
  }

  /** Every event of the run, read page by page through GET /v1/runs/:runId/events. */
  async readAll(runId: string, pageSize = 100): Promise<EventView[]> {
    const events: EventView[] = [];
    for (let from = 0; ;) {
      const page = await this.getJson<{
        runId: string;
        events: EventView[];
        nextRevision: number | null;
      }>(`/v1/runs/${runId}/events?fromRevision=${from}&limit=${pageSize}`);
      events.push(...page.events);
      if (page.nextRevision === null) return events;
      if (page.nextRevision <= from) {
        throw new Error(`reading ${runId}: nextRevision ${page.nextRevision} after ${from}`);
      }
      from = page.nextRevision;
    }
  }

  /** GET /v1/runs/:runId/replay, parsed line by line. */
  async replay(runId: string): Promise<EventView[]> {
    const response = await request(this.baseUrl, `/v1/runs/${runId}/replay`, { key: this.key });
    const text = await response.text();
    if (response.status !== 200)
      throw new UnexpectedResponse(response.status, text, `replay ${runId}`);
    return text
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as EventView);
  }

  audit(runId: string): Promise<AuditVerdict> {
    return this.getJson<AuditVerdict>(`/v1/runs/${runId}/audit`);
  }

  private async getJson<T>(path: string): Promise<T> {
    const response = await request(this.baseUrl, path, { key: this.key });
    const text = await response.text();
    if (response.status !== 200) throw new UnexpectedResponse(response.status, text, `GET ${path}`);
    return JSON.parse(text) as T;
  }
}

export function runStarted(threadId: string, id?: string): NewEvent {
  return {
    ...(id === undefined ? {} : { id }),
    type: 'run.started',
    data: { threadId, agent: 'e2e-agent', source: 'api' },
  };
}

export function messageAdded(
  id: string,
  messageId: string,
  text: string,
  role: 'user' | 'assistant' | 'system' = 'user',
): NewEvent {
  return { id, type: 'message.added', data: { messageId, role, text } };
}
