/**
 * The AI SDK's own validator, as the thread view's messages must pass it: a UI built on the
 * `ai` package loads them as they are. Checked on the objects and on their JSON (what a
 * client receives).
 */
import { validateUIMessages } from 'ai';
import type { UIMessage } from '../thread-state';

/** Resolves to null when the messages are valid, else to the validator's complaint. */
export async function uiMessageProblems(messages: readonly UIMessage[]): Promise<string | null> {
  // The SDK refuses an empty list; a thread with no messages yet has nothing to check.
  if (messages.length === 0) return null;
  for (const candidate of [messages, JSON.parse(JSON.stringify(messages)) as unknown]) {
    try {
      await validateUIMessages({ messages: candidate });
    } catch (error) {
      return error instanceof Error ? error.message : String(error);
    }
  }
  return null;
}
