/**
 * The run log's use cases: append a batch to a run, read it, replay it, audit it. Rules
 * come from libs/domain; this service reads what they need, applies them, and writes
 * through the EventStore port. Nothing is written unless the whole batch is accepted.
 */
import { Inject, Injectable, Logger } from '@nestjs/common';
import { v7 as uuidv7 } from 'uuid';
import {
  ChainVerifier,
  PATH_ID_PATTERN,
  RefusedError,
  SERVER_ONLY_TYPES,
  SliceClock,
  jsonArray,
  canonicalDigestSteps,
  decideAppend,
  gateEvent,
  isEventType,
  isPlainObject,
  mapInSlices,
  measureEventSteps,
  nextTurn,
  parseStreamName,
  runHeadOf,
  runInSlices,
  runStream,
  validateEvent,
  validateEventInSlices,
  type ChainVerdict,
  type GateResult,
  type Problem,
  type RunHead,
  type Validated,
  type ValidEvent,
} from '@runledger/domain';
import {
  EVENT_STORE,
  EventIdConflictError,
  PAGE_CHARS,
  UnreadableEventError,
  WrongExpectedRevisionError,
  appendResult,
  expectationHolds,
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type RecordedEvent,
} from '@runledger/event-store';
import { Metrics } from '@runledger/observability';
import type { Actor } from '../auth/principal';
import { APP_CONFIG, type AppConfig } from '../config/config';
import { ApiError } from '../http/api-error';
import { parseAppendRequest } from './append-request';
import { HeadCache } from './head-cache';
import { KeyedSerializer } from './keyed-serializer';

type Gated = GateResult<ValidEvent & { id: string }>;

/** A batch answered as a retry: its originals, and what each was reduced from (null: whole). */
interface RecordedBatch {
  result: AppendResult;
  reductions: (number | null)[];
}

/**
 * Metadata the server stamps on a reduced event: the SHA-256 of the canonical JSON of the
 * data it came with. Two events that differ only in what the gate cut reduce alike; this
 * tells a retry of the same event from a different one under the same id.
 */
const ORIGINAL_DIGEST = 'originalSha256';

export interface AppendResponse {
  runId: string;
  firstRevision: number;
  lastRevision: number;
  position: number;
  events: { id: string; revision: number; position: number }[];
  /** Events reduced to fit EVENT_MAX_BYTES, recorded with a truncation stamp. */
  truncated?: { id: string; originalByteLength: number }[];
}

/** An event the server itself writes; the id is the server's too. */
export interface ServerEvent {
  type: string;
  data: Record<string, unknown>;
  metadata?: Record<string, unknown>;
}

/** What a command decided to append to a run, at which expected revision, and its answer. */
export interface ServerDecision<R> {
  events: ServerEvent[];
  expectedRevision: ExpectedRevision;
  result: R;
}

export interface EventView {
  id: string;
  type: string;
  revision: number;
  position: number;
  recordedAt: string;
  data: unknown;
  metadata: Record<string, unknown>;
  /**
   * Only on an event the store holds but cannot read (a damaged or tampered row), which a
   * replay shows in its place: why. Its data is null and its metadata empty, so the chain
   * breaks there.
   */
  unreadable?: string;
}

/** Appends that lose a race with another process re-read the head and try again, this often. */
const MAX_ATTEMPTS = 5;
/** Events read at once for a replay, an audit or an export; fewer when they are large. */
const PAGE = 250;
/**
 * JSON a page of `GET …/events` holds at most, after its first event. Larger than the 1 MiB
 * of the internal loops, so that a page is cut only when its events are far larger than a
 * run's usual ones (1,000 events of 16 KB fit): a client that takes a page shorter than its
 * `limit` for the end, rather than follow `nextRevision`, still reads whole runs of tool calls.
 * A page of megabyte events is cut at about 17 of them (17.7 MB, answered in ~0.2 s here),
 * never a string too long to build.
 */
const EVENTS_PAGE_CHARS = 16 * 1024 * 1024;

@Injectable()
export class RunLogService {
  /** Appends to one stream take turns; two tenants' runs of one id are two streams. */
  private readonly serializer = new KeyedSerializer();
  /** Heads of runs this process appended to last; the store's revision check guards them. */
  private readonly heads = new HeadCache(10_000);
  private readonly logger = new Logger('size-gate');
  private readonly auditLogger = new Logger('audit');

  constructor(
    @Inject(EVENT_STORE) private readonly store: EventStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly metrics: Metrics,
  ) {}

  async append(
    tenantId: string,
    runId: string,
    body: unknown,
    actor?: Actor,
  ): Promise<AppendResponse> {
    assertRunId(runId);
    const request = parseAppendRequest(body, this.config.maxEventsPerAppend);
    if (!request.ok)
      throw new ApiError(400, 'validation_failed', 'the request is invalid', request.problems);
    // Refused whatever else is wrong with the batch: these types are not the client's to write.
    const types = request.value.events.map((event) => {
      const type = isPlainObject(event) ? event.type : undefined;
      return isEventType(type) ? type : null;
    });
    const serverOnly = types.flatMap((type, index) =>
      type !== null && SERVER_ONLY_TYPES.has(type) ? [{ index, type }] : [],
    );
    if (serverOnly.length > 0) {
      for (const type of types) {
        this.metrics.appendedEvents.inc({ type: type ?? 'invalid', outcome: 'rejected_forbidden' });
      }
      throw new ApiError(
        403,
        'server_only_event_type',
        `${serverOnly.map((s) => s.type).join(', ')} may only be written by the server's own commands`,
        serverOnly,
      );
    }
    // A batch may hold a thousand events of tens of kilobytes, and one model call tens of
    // thousands of messages: each step over them gives other requests turns between slices.
    const clock = new SliceClock();
    const validated: Validated<ValidEvent>[] = [];
    for (const [index, event] of request.value.events.entries()) {
      validated.push(await validateEventInSlices(event, index, clock));
    }
    const problems = validated.flatMap((v, index) =>
      v.ok ? clientStampProblems(v.value, index) : v.problems,
    );
    if (problems.length > 0) {
      this.countRejected(validated, 'invalid');
      throw new ApiError(
        400,
        'validation_failed',
        `${problems.length} problem(s) in the batch; nothing was written`,
        problems,
      );
    }
    const events = validated.map((v) => (v as { ok: true; value: ValidEvent }).value);
    const impersonations = actor?.kind === 'user' ? othersNamed(events, actor.name) : [];
    if (impersonations.length > 0) {
      this.countRejected(validated, 'forbidden');
      throw new ApiError(
        403,
        'forbidden',
        `metadata.user may only name the user this call acts as (${actor!.name}): a client cannot choose who it is; nothing was written`,
        impersonations,
      );
    }
    // Time-ordered ids keep inserts into the id index local (random v4 ids scatter them).
    const withIds = events.map((e) => ({ ...e, id: e.id ?? uuidv7() }));
    const clientIds = events.some((e) => e.id !== undefined);
    const gated: Gated[] = [];
    for (const event of withIds) gated.push(await this.gate(event, clock));
    const toRecord = gated.map((g) => g.event as ValidEvent & { id: string });
    const stream = runStream(tenantId, runId);
    const appended = await this.serializer
      .run(stream, () =>
        this.appendSerialized(tenantId, runId, toRecord, request.value.expectedRevision, clientIds),
      )
      .catch((error: unknown) => {
        if (clientIds && error instanceof EventIdConflictError) return error;
        throw error;
      });
    let result: AppendResult;
    let retried: RecordedBatch | null = null;
    if (appended instanceof EventIdConflictError || appended.idempotent) {
      // The store compares events as reduced, and metadata, which is not an event's identity,
      // decides how much a near-limit event is cut: whether this is a retry is decided here,
      // by the data each event was sent with.
      const asRecorded = await this.asRecorded(stream, gated, clock, appended);
      if ('differs' in asRecorded) {
        throw appended instanceof EventIdConflictError
          ? appended
          : new EventIdConflictError(
              stream,
              asRecorded.differs,
              'was recorded with different content',
            );
      }
      retried = asRecorded;
      result = asRecorded.result;
    } else {
      result = appended;
    }
    const outcome = result.idempotent ? 'idempotent' : 'recorded';
    gated.forEach((g) => {
      this.metrics.appendedEvents.inc({ type: g.event.type, outcome });
      if (!result.idempotent) this.metrics.appendedBytes.inc({ type: g.event.type }, g.byteLength);
    });
    const response: AppendResponse = {
      runId,
      firstRevision: result.firstRevision,
      lastRevision: result.lastRevision,
      position: result.position,
      events: result.events,
    };
    // A retry answers as its events were recorded: reduced or whole, whatever this send was.
    const reductions =
      retried?.reductions ?? gated.map((g) => (g.truncated ? g.originalByteLength : null));
    const reduced = gated.flatMap((g, i) => {
      const originalByteLength = reductions[i];
      return originalByteLength === null
        ? []
        : [{ type: g.event.type, originalByteLength, recorded: result.events[i] }];
    });
    if (reduced.length === 0) return response;
    for (const { type, originalByteLength, recorded } of reduced) {
      // A retry of a reduced event was recorded (and said so) the first time.
      if (result.idempotent) continue;
      this.metrics.truncations.inc({ type });
      this.logger.warn({
        msg: 'oversize event reduced to fit and recorded with a truncation stamp',
        tenantId,
        runId,
        eventId: recorded.id,
        type,
        originalByteLength,
        limitBytes: this.config.eventMaxBytes,
        dispatch: type === 'model.call' ? 'refused' : 'not_applicable',
        recorded: { revision: recorded.revision, position: recorded.position, truncated: true },
      });
    }
    const truncated = reduced.map(({ originalByteLength, recorded }) => ({
      id: recorded.id,
      originalByteLength,
    }));
    const calls = reduced.filter(({ type }) => type === 'model.call');
    if (calls.length > 0) {
      // Each refused call counts: a batch may hold several. The answer's fields name the first;
      // `truncated` lists them all.
      this.metrics.dispatchRefusals.inc(calls.length);
      const [call] = calls;
      const more =
        calls.length > 1 ? ` (and ${calls.length - 1} more model calls, in truncated)` : '';
      throw new ApiError(
        413,
        'model_call_too_large',
        `model call ${call.recorded.id}${more} is ${call.originalByteLength} bytes, over EVENT_MAX_BYTES (${this.config.eventMaxBytes}): ` +
          'it was recorded reduced and must not be dispatched',
        undefined,
        {
          dispatch: 'refused',
          originalByteLength: call.originalByteLength,
          limitBytes: this.config.eventMaxBytes,
          recorded: {
            revision: call.recorded.revision,
            position: call.recorded.position,
            truncated: true,
          },
          advice:
            'Do not dispatch this call. Reduce its context below the limit: drop or summarise the oldest ' +
            'messages, shorten long tool outputs and documents quoted in messages, send large attachments ' +
            'by reference instead of inline, and trim tool schemas; then record and dispatch the smaller call.',
          // The whole batch was recorded, not only the call: a client that retried the 413
          // without event ids would record the rest twice.
          ...response,
          truncated,
        },
      );
    }
    return { ...response, truncated };
  }

  /**
   * Measures an event once, in slices, and reduces it to fit EVENT_MAX_BYTES. A reduced event
   * goes through the same strict validator as the client's: a stamp the schema refused would
   * lose the very record it exists to keep.
   */
  private async gate(event: ValidEvent & { id: string }, clock: SliceClock): Promise<Gated> {
    const measured = await runInSlices(measureEventSteps(event), clock);
    const gated = gateEvent(event, this.config.eventMaxBytes, measured);
    if (clock.due()) await clock.turn();
    if (!gated.truncated) return gated;
    const check = await validateEventInSlices(gated.event, undefined, clock);
    if (!check.ok) {
      throw new Error(
        `size gate produced an invalid ${event.type} (event ${event.id}): ${JSON.stringify(check.problems)}`,
      );
    }
    // Room for this key is within the gate's STAMP_RESERVE_BYTES.
    const digest = await runInSlices(canonicalDigestSteps(event.data), clock);
    const metadata = { ...gated.event.metadata, [ORIGINAL_DIGEST]: digest };
    return { ...gated, event: { ...gated.event, metadata } };
  }

  /**
   * The batch as recorded, when every event of it is recorded in this stream with the same
   * type and the same original data: the data it was sent with, before any reduction, whose
   * digest a reduced event carries (ORIGINAL_DIGEST). Metadata is not part of an event's
   * identity, yet it counts towards its size, so a retry may be reduced where the first send
   * was not, or the other way round, or cut elsewhere. Answers the originals, and what each
   * recorded event was reduced from (null: recorded whole); else the first event that differs.
   * Events reduced before the digest was stamped are judged by their reduced data alone.
   */
  private async asRecorded(
    stream: string,
    gated: readonly Gated[],
    clock: SliceClock,
    storeAnswer: AppendResult | EventIdConflictError,
  ): Promise<RecordedBatch | { differs: string }> {
    const ids = gated.map((g) => g.event.id);
    const repeated = ids.find((id, i) => ids.indexOf(id) !== i);
    if (repeated !== undefined) return { differs: repeated };
    const digest = (data: unknown) => runInSlices(canonicalDigestSteps(data), clock);
    // The store answered the retry, comparing type and data: what neither side reduced is the same.
    const storeCompared = !(storeAnswer instanceof EventIdConflictError);
    const stored: RecordedEvent[] = [];
    // One event at a time, stopping at the first that differs: a conflict over megabyte events
    // reads one of them, not every one the batch names.
    for (const { event, truncated } of gated) {
      const differs = { differs: event.id };
      const [recorded] = await this.store.readByIds(stream, [event.id]);
      if (recorded === undefined || recorded.type !== event.type) return differs;
      stored.push(recorded);
      if (storeCompared && !truncated && reducedFrom(recorded.data) === null) continue;
      const sent = truncated ? event.metadata?.[ORIGINAL_DIGEST] : await digest(event.data);
      const kept = recorded.metadata[ORIGINAL_DIGEST];
      if (typeof kept === 'string') {
        if (kept !== sent) return differs;
        continue;
      }
      // Recorded whole (or reduced before the digest was stamped): its data is what was sent.
      const recordedDigest = await digest(recorded.data);
      if (
        sent !== recordedDigest &&
        !(truncated && (await digest(event.data)) === recordedDigest)
      ) {
        return differs;
      }
    }
    return {
      result: appendResult(stored, true),
      reductions: stored.map((recorded) => reducedFrom(recorded.data)),
    };
  }

  private async appendSerialized(
    tenantId: string,
    runId: string,
    events: (ValidEvent & { id: string })[],
    expected: ExpectedRevision,
    clientIds: boolean,
  ): Promise<AppendResult> {
    const stream = runStream(tenantId, runId);
    for (let attempt = 1; ; attempt += 1) {
      const cached = this.heads.get(stream);
      const head = cached ?? (await this.readHead(stream));
      const decided = decideAppend({ tenantId, runId, events }, head);
      const refused = 'refusal' in decided;
      const mismatch = !expectationHolds(expected, head?.revision);
      if ((refused || mismatch) && cached) {
        // Decide a refusal on the stored head only: another process may have moved it.
        this.heads.forget(stream);
        continue;
      }
      if (refused || mismatch) {
        // A retry of a batch that was recorded answers its originals, even after the run ended.
        const original = clientIds ? await this.recordedBefore(stream, events) : null;
        if (original) return original;
        // The client's own precondition first: a mismatch answers with the actual revision,
        // which is what a client racing on revisions reads and retries on.
        if (mismatch) {
          throw new WrongExpectedRevisionError(stream, expected, head?.revision ?? 'no_stream');
        }
      }
      if ('refusal' in decided) throw new RefusedError(decided.refusal);
      const sealed = await mapInSlices(decided.events, (event) => decided.chain.seal(event));
      try {
        const result = await this.store.append(stream, sealed, {
          expectedRevision: head?.revision ?? 'no_stream',
        });
        const last = sealed[sealed.length - 1];
        if (result.idempotent) this.heads.forget(stream);
        else this.heads.remember(stream, runHeadOf({ ...last, revision: result.lastRevision }));
        return result;
      } catch (error) {
        this.heads.forget(stream);
        const lostRace = error instanceof WrongExpectedRevisionError;
        const retryable =
          cached !== undefined || expected === 'any' || expected === 'stream_exists';
        if (lostRace && retryable && attempt < MAX_ATTEMPTS) continue;
        if (lostRace) throw new WrongExpectedRevisionError(stream, expected, error.actual);
        throw error;
      }
    }
  }

  /**
   * Appends events the server itself writes (the commands' `turn.steered`, `approval.resolved`,
   * `run.finished`), checked by the same strict validator as a client's, under the same run
   * rules and serialization.
   */
  async appendAsServer(
    tenantId: string,
    runId: string,
    events: ServerEvent[],
    expected: ExpectedRevision,
  ): Promise<AppendResponse> {
    return this.serializer.run(runStream(tenantId, runId), () =>
      this.appendServerEvents(tenantId, runId, events, expected),
    );
  }

  /**
   * Appends what `decide` makes of the run now. It is handed the run's events from
   * `fromRevision` on (those its caller has not folded yet), read while this process holds
   * the run's other appends back: none of them lands between what it decided on and what it
   * appends, however busy the run. Another replica's append still fails the append's
   * expected revision (WrongExpectedRevisionError), and the caller decides again. With
   * `dataTypes`, only those types' events come with their data, as from `runEvents`.
   */
  async appendDecided<R>(
    tenantId: string,
    runId: string,
    fromRevision: number,
    decide: (newer: readonly RecordedEvent[]) => ServerDecision<R>,
    dataTypes?: readonly string[],
  ): Promise<{ result: R; appended: AppendResponse }> {
    return this.serializer.run(runStream(tenantId, runId), async () => {
      const newer: RecordedEvent[] = [];
      for await (const event of this.recorded(tenantId, runId, fromRevision, PAGE, dataTypes)) {
        newer.push(event);
      }
      const { events, expectedRevision, result } = decide(newer);
      const appended = await this.appendServerEvents(tenantId, runId, events, expectedRevision);
      return { result, appended };
    });
  }

  /** appendAsServer's work, once the run's turn in the serializer has come. */
  private async appendServerEvents(
    tenantId: string,
    runId: string,
    events: ServerEvent[],
    expected: ExpectedRevision,
  ): Promise<AppendResponse> {
    const valid = events.map((event) => {
      const check = validateEvent(event);
      if (!check.ok) {
        throw new Error(
          `server event ${event.type} for run ${runId} is invalid: ${JSON.stringify(check.problems)}`,
        );
      }
      return { ...check.value, id: uuidv7() };
    });
    const result = await this.appendSerialized(tenantId, runId, valid, expected, false);
    for (const event of valid)
      this.metrics.appendedEvents.inc({ type: event.type, outcome: 'recorded' });
    return {
      runId,
      firstRevision: result.firstRevision,
      lastRevision: result.lastRevision,
      position: result.position,
      events: result.events,
    };
  }

  /**
   * The events of a run the tenant owns from a revision on, in order, a page at a time with a
   * turn between pages (404 for a run it does not own); with `dataTypes`, only those types'
   * events come with their data (the store's `dataTypes`).
   */
  async *runEvents(
    tenantId: string,
    runId: string,
    fromRevision = 0,
    dataTypes?: readonly string[],
  ): AsyncGenerator<RecordedEvent> {
    await this.requireRun(tenantId, runId);
    yield* this.recorded(tenantId, runId, fromRevision, PAGE, dataTypes);
  }

  /**
   * Records an `append.rejected` marker for a body too large to read, when the run exists,
   * belongs to the tenant and is not finished. Answers whether a marker was recorded.
   */
  async recordBodyRejected(
    tenantId: string,
    runId: string,
    declaredBytes: number,
    count = 1,
  ): Promise<boolean> {
    if (!PATH_ID_PATTERN.test(runId)) return false;
    const stream = runStream(tenantId, runId);
    return this.serializer.run(stream, async () => {
      const head = await this.readHead(stream);
      if (!head || head.tenantId !== tenantId || head.finished) return false;
      const marker: ValidEvent & { id: string } = {
        id: uuidv7(),
        type: 'append.rejected',
        data: {
          reason: 'body_too_large',
          declaredBytes,
          limitBytes: this.config.bodyMaxBytes,
          ...(count > 1 ? { count } : {}),
        },
        metadata: {},
      };
      await this.appendSerialized(tenantId, runId, [marker], 'stream_exists', false);
      this.metrics.appendedEvents.inc({ type: marker.type, outcome: 'recorded' });
      return true;
    });
  }

  /**
   * Whether a batch refused now was recorded before (a retry after the run moved on or
   * ended). The store alone decides: when it knows one of the ids in this stream, re-sending
   * the batch answers the originals or refuses ids recorded with other content, and writes
   * nothing, since a batch with a known id is never appended.
   */
  private async recordedBefore(
    stream: string,
    events: (ValidEvent & { id: string })[],
  ): Promise<AppendResult | null> {
    const known = await this.store.readByIds(
      stream,
      events.map((event) => event.id),
    );
    if (known.length === 0) return null;
    return this.store.append(
      stream,
      events.map(({ id, type, data }) => ({ id, type, data, metadata: {} })),
    );
  }

  private async readHead(stream: string): Promise<RunHead | null> {
    const [last] = await this.store.readStream(stream, { direction: 'backwards', maxCount: 1 });
    return last ? runHeadOf(last) : null;
  }

  /**
   * The run's head, or 404 when the tenant has no such run. The stream is the tenant's own;
   * its stamped tenant is checked too, so a stream whose stamp disagrees is never served.
   * A last event the store cannot read has no stamp to check: its run is still the tenant's
   * own stream, and is served for reading, so that the damage can be seen and audited.
   */
  async requireRun(tenantId: string, runId: string): Promise<RunHead> {
    assertRunId(runId);
    const head = await this.readHead(runStream(tenantId, runId)).catch((error: unknown) => {
      if (!(error instanceof UnreadableEventError)) throw error;
      const { revision, type } = error.event;
      return runHeadOf({ revision, type, metadata: { tenantId } });
    });
    if (!head || head.tenantId !== tenantId)
      throw new ApiError(404, 'run_not_found', `run ${runId} not found`);
    return head;
  }

  /**
   * A page of the run's events as its JSON answer, `{ runId, events, nextRevision }`, in
   * UTF-8. Read in the internal loops' pages (PAGE_CHARS) and serialized an event at a time,
   * the event loop turning between them: a page of megabyte events, read and serialized at
   * once, held it ~225 ms.
   */
  async readEvents(
    tenantId: string,
    runId: string,
    fromRevision: number,
    limit: number,
  ): Promise<Buffer> {
    const head = await this.requireRun(tenantId, runId);
    const clock = new SliceClock();
    const events: Buffer[] = [];
    let chars = 0;
    let next = fromRevision;
    // A page ends at `limit` events, or once the events after its first hold
    // EVENTS_PAGE_CHARS of JSON: `nextRevision` then goes on from it. Stopping right after
    // the event that ends it reads no page beyond it.
    for await (const event of this.replay(tenantId, runId, fromRevision, Math.min(limit, PAGE))) {
      const json = Buffer.from(JSON.stringify(event));
      if (events.length > 0) chars += json.length;
      events.push(json);
      next = event.revision + 1;
      if (events.length >= limit || chars >= EVENTS_PAGE_CHARS) break;
      if (clock.due()) await clock.turn();
    }
    const nextRevision = events.length > 0 && next <= head.revision ? next : null;
    return jsonArray(
      events,
      `{"runId":${JSON.stringify(runId)},"events":`,
      `,"nextRevision":${JSON.stringify(nextRevision)}}`,
    );
  }

  /**
   * The run's recorded events from `fromRevision` on, in order, read `pageSize` at a time. An
   * event the store cannot read is shown in its place (`unreadable`), logged, and the replay
   * goes on after it: an auditor, or a page of events, sees the whole run, and the chain's
   * verdict names where it breaks.
   */
  async *replay(
    tenantId: string,
    runId: string,
    fromRevision = 0,
    pageSize = PAGE,
  ): AsyncGenerator<EventView> {
    for (let from = fromRevision; ;) {
      try {
        for await (const event of this.recorded(tenantId, runId, from, pageSize)) {
          yield toView(event);
          from = event.revision + 1;
        }
        return;
      } catch (error) {
        if (!(error instanceof UnreadableEventError)) throw error;
        logUnreadable(this.auditLogger, tenantId, error);
        yield unreadableView(error);
        from = error.event.revision + 1;
      }
    }
  }

  /**
   * The replay as NDJSON lines, one recorded event a line, with the hash chain recomputed as
   * they go out. When the chain is broken, one last line holds the verdict (as the audit
   * answers it), naming the first broken revision: an auditor who keeps only the replay still
   * sees the break. `done` hears the verdict after the last line.
   */
  async *replayLines(
    tenantId: string,
    runId: string,
    done: (verdict: RunVerdict) => void = () => undefined,
  ): AsyncGenerator<string> {
    const verifier = new ChainVerifier(runId);
    const clock = new SliceClock();
    for await (const event of this.replay(tenantId, runId)) {
      verifier.add(event);
      yield `${JSON.stringify(event)}\n`;
      // A client that reads as fast as lines come takes them in microtasks: without turns,
      // hashing a page of large events (250 of 32 KiB) held the loop for 100 ms and more.
      if (clock.due()) await clock.turn();
    }
    const verdict = { runId, ...verifier.verdict() };
    if (!verdict.verified) yield `${JSON.stringify(verdict)}\n`;
    done(verdict);
  }

  private async *recorded(
    tenantId: string,
    runId: string,
    fromRevision = 0,
    pageSize = PAGE,
    dataTypes?: readonly string[],
  ): AsyncGenerator<RecordedEvent> {
    const stream = runStream(tenantId, runId);
    for (let from = fromRevision; ;) {
      const page = await this.store.readStream(stream, {
        fromRevision: from,
        maxCount: pageSize,
        maxChars: PAGE_CHARS,
        dataTypes,
      });
      // A short page is not the end when its events are large: only an empty one is.
      if (page.length === 0) return;
      yield* page;
      from = page[page.length - 1].revision + 1;
      // An embedded store answers without I/O: give other requests a turn between pages, so
      // auditing or replaying a long run never holds the event loop for more than a page.
      await nextTurn();
    }
  }

  async audit(tenantId: string, runId: string): Promise<RunVerdict> {
    await this.requireRun(tenantId, runId);
    return this.verify(tenantId, runId);
  }

  /** Recomputes the run's hash chain from the log; for operators, who name the tenant. */
  async verify(tenantId: string, runId: string): Promise<RunVerdict> {
    const verifier = new ChainVerifier(runId);
    const clock = new SliceClock();
    for await (const event of this.replay(tenantId, runId)) {
      verifier.add(event);
      // Hashing a page of large events (250 of 32 KiB) held the loop for 100 ms and more.
      if (clock.due()) await clock.turn();
    }
    return { runId, ...verifier.verdict() };
  }

  private countRejected(validated: ReturnType<typeof validateEvent>[], outcome: string): void {
    for (const v of validated) {
      this.metrics.appendedEvents.inc({
        type: v.ok ? v.value.type : 'invalid',
        outcome: `rejected_${outcome}`,
      });
    }
  }
}

/**
 * The truncation stamp and the original's digest are the server's word that it reduced the
 * event: either one a client sent would make a faithful record look reduced, or a stamp
 * worthless to an auditor.
 */
function clientStampProblems(event: ValidEvent, index: number): Problem[] {
  const stamps = [
    ['truncation' in event.data, 'data.truncation'],
    [
      event.metadata !== undefined && ORIGINAL_DIGEST in event.metadata,
      `metadata.${ORIGINAL_DIGEST}`,
    ],
  ] as const;
  return stamps.flatMap(([sent, field]) =>
    sent
      ? [
          {
            index,
            field,
            rule: 'serverOnly',
            message: `${field} is stamped by the server on an event it reduced; never send it`,
          },
        ]
      : [],
  );
}

export function assertRunId(runId: string): void {
  if (!PATH_ID_PATTERN.test(runId)) {
    throw new ApiError(400, 'invalid_run_id', `runId must match ${PATH_ID_PATTERN.source}`, [
      { field: 'runId', rule: 'matches', message: `runId must match ${PATH_ID_PATTERN.source}` },
    ]);
  }
}

export type RunVerdict = { runId: string } & ChainVerdict;

/** A recorded event as every read answers it (pages, replay lines, SSE data). */
/** An event the store holds but cannot read, shown in its place: why, no data, no metadata. */
export function unreadableView(error: UnreadableEventError): EventView {
  const { id, type, revision, position, recordedAt } = error.event;
  return {
    id,
    type,
    revision,
    position,
    recordedAt,
    data: null,
    metadata: {},
    unreadable: error.reason,
  };
}

/** Says, with its ids, that a read met an unreadable event (and showed it in its place). */
export function logUnreadable(logger: Logger, tenantId: string, error: UnreadableEventError): void {
  const { id, stream, revision, position } = error.event;
  logger.error({
    msg: 'a recorded event is unreadable',
    tenantId,
    runId: parseStreamName(stream)?.id,
    eventId: id,
    revision,
    position,
    reason: error.reason,
  });
}

export function toView(event: RecordedEvent): EventView {
  return {
    id: event.id,
    type: event.type,
    revision: event.revision,
    position: event.position,
    recordedAt: event.recordedAt,
    data: event.data,
    metadata: event.metadata,
  };
}

/** What a recorded event was reduced from (its stamp's originalByteLength); null when whole. */
function reducedFrom(data: unknown): number | null {
  const stamp = isPlainObject(data) ? data.truncation : undefined;
  return isPlainObject(stamp) && typeof stamp.originalByteLength === 'number'
    ? stamp.originalByteLength
    : null;
}

/**
 * Events whose `metadata.user` names someone other than `user`, the one the call acts as: the
 * thread would be that person's (notifications, "what needs me") on another's word.
 */
function othersNamed(events: readonly ValidEvent[], user: string): Problem[] {
  return events.flatMap((event, index) => {
    const named = event.metadata?.user;
    return named === undefined || named === user
      ? []
      : [
          {
            index,
            field: 'metadata.user',
            rule: 'actingUser',
            message: `metadata.user must be absent or ${user}, the user this call acts as`,
          },
        ];
  });
}
