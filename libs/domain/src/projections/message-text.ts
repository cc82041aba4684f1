/**
 * The one decoder of a message's words (docs/architecture.md, "Why it exists"). Everything that needs what a
 * message says (the voice seed, a list preview, a notification) reads it here, so no reader
 * ever treats a tool row or a structured part as speech.
 */
import type { TextPart, ToolPart, UIMessage, UIMessagePart } from './thread-state';

export function isToolPart(part: UIMessagePart): part is ToolPart {
  return part.type.startsWith('tool-') && 'toolCallId' in part;
}

function isTextPart(part: UIMessagePart): part is TextPart {
  return part.type === 'text';
}

/**
 * The message's text parts, in order, joined by a newline; '' for a message with none (a
 * tool-only message). Text is returned exactly as recorded: text that looks like JSON, or
 * like an envelope, is text, never parsed.
 */
export function messageText(message: UIMessage): string {
  let text = '';
  let first = true;
  for (const part of message.parts) {
    if (!isTextPart(part)) continue;
    text = first ? part.text : `${text}\n${part.text}`;
    first = false;
  }
  return text;
}
