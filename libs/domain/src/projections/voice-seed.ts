/**
 * The voice seed (docs/architecture.md, "Why it exists"): the last spoken and typed turns of a thread, replayed
 * into a new voice call so it picks up where the thread is. Words only, read through the
 * one decoder; tool rows and tool outputs are never replayed as speech.
 */
import { messageText } from './message-text';
import type { ActiveTool, ThreadState, UIMessage } from './thread-state';

export const VOICE_SEED_MAX_TURNS = 20;
export const VOICE_SEED_MAX_TOKENS = 4000;
/** The estimate the budget is counted in: one token per four characters, rounded up. */
export const CHARS_PER_TOKEN = 4;
/** Starts a turn that was cut to fit the budget, so the model knows it hears the end only. */
export const CUT_TURN_MARKER = '…';

export interface VoiceSeedTurn {
  role: 'user' | 'assistant';
  text: string;
}

/** A tool running now, for the call's status line: shown to people, never spoken as a turn. */
export interface VoiceSeedTool {
  toolCallId: string;
  toolName: string;
  label: string;
}

export interface VoiceSeed {
  /** Oldest first. */
  turns: VoiceSeedTurn[];
  /** The sum of the turns' estimates (each turn is estimated on its own). */
  tokenEstimate: number;
  /** What is running now, labelled; outside `turns` and the budget. */
  activeTools: VoiceSeedTool[];
}

export interface VoiceSeedOptions {
  maxTurns?: number;
  maxTokens?: number;
}

/** ceil(chars / 4), chars counted as UTF-16 code units (JavaScript string length). */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

/** The voice seed of a thread held in memory: `voiceSeedOf` its messages, newest first. */
export function voiceSeed(state: ThreadState, options: VoiceSeedOptions = {}): VoiceSeed {
  return voiceSeedOf(newestFirst(state.messages), state.activeTools, options);
}

function* newestFirst(messages: readonly UIMessage[]): Generator<UIMessage> {
  for (let m = messages.length - 1; m >= 0; m -= 1) yield messages[m];
}

/**
 * The newest user and assistant turns (typed messages and transcripts) that fit, oldest
 * first: at most `maxTurns` turns and `maxTokens` tokens, the estimate taken per turn and
 * summed. A message with no words (a tool row, blank text) is not a turn; system messages
 * are not turns. The turns are contiguous: the walk back stops at the first that does not
 * fit. When the newest turn alone is over the budget it is kept cut to its last characters,
 * after a leading '…', so the call still hears what was said last.
 *
 * `messages` is walked newest first and only as far as the budget goes, so a store can hand
 * its rows over lazily and read only those the seed needs.
 */
export function voiceSeedOf(
  messages: Iterable<UIMessage>,
  running: readonly ActiveTool[],
  options: VoiceSeedOptions = {},
): VoiceSeed {
  const maxTurns = options.maxTurns ?? VOICE_SEED_MAX_TURNS;
  const maxTokens = options.maxTokens ?? VOICE_SEED_MAX_TOKENS;
  const turns: VoiceSeedTurn[] = [];
  let tokenEstimate = 0;
  for (const message of messages) {
    if (turns.length >= maxTurns) break;
    if (message.role !== 'user' && message.role !== 'assistant') continue;
    const text = messageText(message);
    if (text.trim() === '') continue;
    const tokens = estimateTokens(text);
    if (tokenEstimate + tokens <= maxTokens) {
      turns.push({ role: message.role, text });
      tokenEstimate += tokens;
      continue;
    }
    if (turns.length === 0) {
      const cut = lastCharacters(text, maxTokens * CHARS_PER_TOKEN - CUT_TURN_MARKER.length);
      if (cut !== '') {
        const kept = `${CUT_TURN_MARKER}${cut}`;
        turns.push({ role: message.role, text: kept });
        tokenEstimate += estimateTokens(kept);
      }
    }
    break;
  }
  turns.reverse();
  const activeTools = running.map(({ toolCallId, toolName, label }) => ({
    toolCallId,
    toolName,
    label,
  }));
  return { turns, tokenEstimate, activeTools };
}

/**
 * The last `count` UTF-16 units of `text`, never starting inside a surrogate pair; '' when
 * `count` is not positive. `count` is below the text's length: only a turn over the budget
 * is cut.
 */
function lastCharacters(text: string, count: number): string {
  let start = text.length - count;
  if (isLowSurrogate(text.charCodeAt(start))) start += 1;
  return text.slice(start);
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}
