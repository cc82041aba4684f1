/**
 * A tool's result as a voice model is told it (docs/architecture.md, "Why it exists"): the whole result up to a
 * ceiling sized to the session, and a result cut above it says so, with a hint that leads
 * with the general remedy (ask for less) before the specific one (ask for the rest).
 */
import { cutChars, isHighSurrogate } from '../canonical-json';
import { isToolPart } from './message-text';
import type { ThreadState, ToolPart, ToolPartState } from './thread-state';

export const VOICE_TOOL_RESULT_MAX_CHARS = 12_000;

export interface VoiceToolResult {
  toolCallId: string;
  toolName: string;
  state: ToolPartState;
  /** The result as text, cut to the ceiling with the continuation hint appended. */
  text: string;
  truncated: boolean;
  /** Length of the whole result text before any cut. */
  totalChars: number;
  /**
   * Where `text` starts in the whole result: the `offset` asked for (0 by default), one less
   * when it falls inside a surrogate pair, the end when past it.
   */
  offset: number;
}

export interface VoiceToolResultOptions {
  /** The run of the call, when the caller knows it (call ids are unique within a run). */
  runId?: string;
  maxChars?: number;
  /** Start here: the character a cut result's hint says the rest starts at. */
  offset?: number;
}

/**
 * The thread's tool call `toolCallId` (the latest one with that id, unless `runId` names
 * the run) as text, or null when the thread has no such call:
 * - output-available: a string output as it is, any other output as JSON (indented when small);
 * - output-error: its errorText;
 * - output-denied: that it was denied, with the reason when there is one;
 * - not finished yet (input-available, approval-requested, approval-responded): '' (the
 *   state says why).
 */
export function toolResultForVoice(
  state: ThreadState,
  toolCallId: string,
  options: VoiceToolResultOptions = {},
): VoiceToolResult | null {
  const part = findToolPart(state, toolCallId, options.runId);
  return part === null ? null : toolPartResult(part, options);
}

/** One tool part's result as text, cut as `toolResultForVoice` describes. */
export function toolPartResult(
  part: ToolPart,
  options: Omit<VoiceToolResultOptions, 'runId'> = {},
): VoiceToolResult {
  const whole = resultText(part);
  const maxChars = options.maxChars ?? VOICE_TOOL_RESULT_MAX_CHARS;
  const asked = Math.min(options.offset ?? 0, whole.length);
  // Inside a surrogate pair: from the pair's start, so no half character is spoken or sent.
  const offset = asked > 0 && isHighSurrogate(whole.charCodeAt(asked - 1)) ? asked - 1 : asked;
  const base = {
    toolCallId: part.toolCallId,
    toolName: part.type.slice('tool-'.length),
    state: part.state,
    totalChars: whole.length,
    offset,
  };
  if (whole.length - offset <= maxChars)
    return { ...base, text: whole.slice(offset), truncated: false };
  const cutAt = offset + cutChars(whole.slice(offset), maxChars).length;
  return {
    ...base,
    text: `${whole.slice(offset, cutAt)}\n${continuationHint(cutAt, whole.length)}`,
    truncated: true,
  };
}

/** The hint a cut result ends with: the general remedy first, then the specific one. */
export function continuationHint(cutAt: number, totalChars: number): string {
  return (
    `[Result cut at ${grouped(cutAt)} of ${grouped(totalChars)} characters; ` +
    `ask again for less: a narrower query or filter. ` +
    `Or ask for the rest, starting at character ${grouped(cutAt)}.]`
  );
}

function resultText(part: ToolPart): string {
  switch (part.state) {
    case 'output-available':
      if (typeof part.output === 'string') return part.output;
      return outputText(part.output === undefined ? null : part.output);
    case 'output-error':
      return part.errorText ?? '';
    case 'output-denied':
      return part.approval?.reason === undefined
        ? 'The call was denied.'
        : `The call was denied: ${part.approval.reason}`;
    default:
      return '';
  }
}

/**
 * Outputs up to this many characters of JSON are indented for reading. Indentation grows with
 * depth: 960 KB nested 60 deep became 60 MB, built whole for each read of it.
 */
const INDENTED_MAX_CHARS = 64 * 1024;

/** A structured output as text: indented when small, compact otherwise (at most its own size). */
function outputText(output: unknown): string {
  const compact = JSON.stringify(output);
  return compact.length > INDENTED_MAX_CHARS ? compact : JSON.stringify(output, null, 2);
}

/** Newest first: a query, not a fold, so a scan from the end is the cheapest. */
function findToolPart(state: ThreadState, toolCallId: string, runId?: string): ToolPart | null {
  for (let m = state.messages.length - 1; m >= 0; m -= 1) {
    const message = state.messages[m];
    if (runId !== undefined && (message.metadata?.runId ?? '') !== runId) continue;
    for (let p = message.parts.length - 1; p >= 0; p -= 1) {
      const part = message.parts[p];
      if (isToolPart(part) && part.toolCallId === toolCallId) return part;
    }
  }
  return null;
}

/** 12000 → "12,000", the same on every machine (no locale). */
function grouped(value: number): string {
  return String(value).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}
