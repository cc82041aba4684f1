/**
 * The words people see for a running tool ("Reading page: Roadmap", "Searching: calendar"),
 * from one table, so a call bar, a thread card and a notification say the same thing. A label
 * describes what the agent is doing; it is never something the assistant said, so nothing
 * built from it is ever replayed as a turn (the voice seed reads messages' text only).
 */

export interface ToolLabelRule {
  /** What the tool is doing, as a person would say it. */
  verb: string;
  /** Input fields naming what it acts on, first present one wins. */
  titleFields: readonly string[];
}

/** Tool name → verb and titling input fields. Names are matched case-insensitively. */
export const TOOL_LABELS: Readonly<Record<string, ToolLabelRule>> = Object.freeze({
  read_page: { verb: 'Reading page', titleFields: ['title', 'page', 'url'] },
  fetch: { verb: 'Reading page', titleFields: ['title', 'url'] },
  browse: { verb: 'Reading page', titleFields: ['title', 'url'] },
  read_file: { verb: 'Reading file', titleFields: ['path', 'file'] },
  read: { verb: 'Reading', titleFields: ['path', 'file', 'title'] },
  write_file: { verb: 'Writing file', titleFields: ['path', 'file'] },
  edit_file: { verb: 'Editing file', titleFields: ['path', 'file'] },
  ls: { verb: 'Listing', titleFields: ['path'] },
  grep: { verb: 'Searching files', titleFields: ['pattern', 'query'] },
  search: { verb: 'Searching', titleFields: ['query', 'q', 'source'] },
  web_search: { verb: 'Searching the web', titleFields: ['query', 'q'] },
  calendar: { verb: 'Checking calendar', titleFields: ['range', 'date', 'query'] },
  send_message: { verb: 'Sending message', titleFields: ['to', 'recipient'] },
  send_email: { verb: 'Sending email', titleFields: ['to', 'subject'] },
  run_command: { verb: 'Running', titleFields: ['command', 'cmd'] },
  bash: { verb: 'Running', titleFields: ['command', 'cmd'] },
  deploy: { verb: 'Deploying', titleFields: ['target', 'env', 'service'] },
  lookup: { verb: 'Looking up', titleFields: ['query', 'id', 'name'] },
});

/** Longest title kept in a label; a longer one is cut and ends with '…'. */
export const LABEL_TITLE_MAX = 60;

/**
 * The label for a call of `toolName` with `input`: "<verb>: <title>", or the verb alone when
 * no titling field holds text. A tool not in the table reads "Using <tool name>", its words
 * separated ("lookup_order" → "Using lookup order"), titled by a `title`, `name` or `query`
 * input when there is one. Whitespace in a title is collapsed and the ends trimmed.
 */
export function toolLabel(toolName: string, input: unknown): string {
  const rule = TOOL_LABELS[toolName.toLowerCase()] as ToolLabelRule | undefined;
  const verb = rule?.verb ?? `Using ${humanToolName(toolName)}`;
  const title = titleOf(input, rule?.titleFields ?? FALLBACK_TITLE_FIELDS);
  return title === null ? verb : `${verb}: ${title}`;
}

const FALLBACK_TITLE_FIELDS = ['title', 'name', 'query'] as const;

function humanToolName(toolName: string): string {
  const words = toolName
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/[_\-.]+/g, ' ')
    .trim()
    .toLowerCase();
  return words === '' ? 'a tool' : words;
}

function titleOf(input: unknown, fields: readonly string[]): string | null {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) return null;
  const record = input as Record<string, unknown>;
  for (const field of fields) {
    if (!Object.hasOwn(record, field)) continue;
    const value = record[field];
    const text =
      typeof value === 'string' ? value : typeof value === 'number' ? String(value) : null;
    if (text === null) continue;
    const collapsed = text.replace(/\s+/g, ' ').trim();
    if (collapsed === '') continue;
    return collapsed.length > LABEL_TITLE_MAX
      ? `${[...collapsed]
          .slice(0, LABEL_TITLE_MAX - 1)
          .join('')
          .trimEnd()}…`
      : collapsed;
  }
  return null;
}
