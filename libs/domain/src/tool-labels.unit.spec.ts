/** One label per tool in the table, the fallback, and the trimming rules. */
import { LABEL_TITLE_MAX, TOOL_LABELS, toolLabel } from './tool-labels';

describe('toolLabel', () => {
  const table: [string, Record<string, unknown>, string][] = [
    ['read_page', { title: 'Roadmap', url: 'https://x/r' }, 'Reading page: Roadmap'],
    ['fetch', { url: 'https://example.com/a' }, 'Reading page: https://example.com/a'],
    ['browse', { title: 'Docs' }, 'Reading page: Docs'],
    ['read_file', { path: 'src/main.ts' }, 'Reading file: src/main.ts'],
    ['read', { file: 'notes.md' }, 'Reading: notes.md'],
    ['write_file', { path: 'out.txt', content: 'x' }, 'Writing file: out.txt'],
    ['edit_file', { path: 'a.ts' }, 'Editing file: a.ts'],
    ['ls', { path: '.' }, 'Listing: .'],
    ['grep', { pattern: 'TODO' }, 'Searching files: TODO'],
    ['search', { query: 'calendar' }, 'Searching: calendar'],
    ['web_search', { q: 'weather Berlin' }, 'Searching the web: weather Berlin'],
    ['calendar', { date: '2026-12-03' }, 'Checking calendar: 2026-12-03'],
    ['send_message', { to: 'Ana', text: 'hi' }, 'Sending message: Ana'],
    ['send_email', { subject: 'Invoice' }, 'Sending email: Invoice'],
    ['run_command', { command: 'npm test' }, 'Running: npm test'],
    ['bash', { cmd: 'ls -la' }, 'Running: ls -la'],
    ['deploy', { env: 'prod' }, 'Deploying: prod'],
    ['lookup', { id: 1042 }, 'Looking up: 1042'],
  ];

  it('covers every tool of the table exactly once', () => {
    expect(table.map(([name]) => name).sort()).toEqual(Object.keys(TOOL_LABELS).sort());
  });

  it.each(table)('%s with %j reads "%s"', (name, input, label) => {
    expect(toolLabel(name, input)).toBe(label);
  });

  /** Each tool's titling fields, in the order they win: every one titles the label alone. */
  const titling: [string, string, string[]][] = [
    ['read_page', 'Reading page', ['title', 'page', 'url']],
    ['fetch', 'Reading page', ['title', 'url']],
    ['browse', 'Reading page', ['title', 'url']],
    ['read_file', 'Reading file', ['path', 'file']],
    ['read', 'Reading', ['path', 'file', 'title']],
    ['write_file', 'Writing file', ['path', 'file']],
    ['edit_file', 'Editing file', ['path', 'file']],
    ['ls', 'Listing', ['path']],
    ['grep', 'Searching files', ['pattern', 'query']],
    ['search', 'Searching', ['query', 'q', 'source']],
    ['web_search', 'Searching the web', ['query', 'q']],
    ['calendar', 'Checking calendar', ['range', 'date', 'query']],
    ['send_message', 'Sending message', ['to', 'recipient']],
    ['send_email', 'Sending email', ['to', 'subject']],
    ['run_command', 'Running', ['command', 'cmd']],
    ['bash', 'Running', ['command', 'cmd']],
    ['deploy', 'Deploying', ['target', 'env', 'service']],
    ['lookup', 'Looking up', ['query', 'id', 'name']],
  ];

  it.each(titling)('%s is "%s", titled by %j, the first present winning', (name, verb, fields) => {
    expect(toolLabel(name, {})).toBe(verb);
    fields.forEach((field, i) => {
      const present = Object.fromEntries(fields.slice(i).map((f) => [f, `${f} value`]));
      expect(toolLabel(name, present)).toBe(`${verb}: ${field} value`);
    });
  });

  it('takes the first titling field that holds text, skipping blank and non-text ones', () => {
    expect(toolLabel('read_page', { title: '   ', page: { id: 1 }, url: 'https://u' })).toBe(
      'Reading page: https://u',
    );
  });

  it('is the verb alone when no titling field is present, or the input is not an object', () => {
    expect(toolLabel('search', {})).toBe('Searching');
    expect(toolLabel('search', { raw: 'q=1' })).toBe('Searching');
    expect(toolLabel('search', null)).toBe('Searching');
    expect(toolLabel('search', ['calendar'])).toBe('Searching');
  });

  it('matches tool names case-insensitively', () => {
    expect(toolLabel('Read_Page', { title: 'Roadmap' })).toBe('Reading page: Roadmap');
  });

  it('falls back to "Using <tool>" for an unknown tool, titled by title, name or query', () => {
    expect(toolLabel('lookup_order', { orderId: 7 })).toBe('Using lookup order');
    expect(toolLabel('createRma', { name: 'Box 3' })).toBe('Using create rma: Box 3');
    expect(toolLabel('crm.find', { query: 'Ana' })).toBe('Using crm find: Ana');
    expect(toolLabel('__', {})).toBe('Using a tool');
  });

  it('collapses whitespace and trims the title', () => {
    expect(toolLabel('read_page', { title: '\n  Q4   plan\t ' })).toBe('Reading page: Q4 plan');
  });

  it(`cuts a title longer than ${LABEL_TITLE_MAX} characters and marks the cut`, () => {
    const label = toolLabel('search', { query: 'x'.repeat(200) });
    expect(label).toBe(`Searching: ${'x'.repeat(LABEL_TITLE_MAX - 1)}…`);
    expect(toolLabel('search', { query: 'y'.repeat(LABEL_TITLE_MAX) })).toBe(
      `Searching: ${'y'.repeat(LABEL_TITLE_MAX)}`,
    );
  });

  it('reads a run of separators in an unknown tool name as one space', () => {
    expect(toolLabel('lookup__order--v2', {})).toBe('Using lookup order v2');
  });

  it('cuts a long title without leaving a space before the ellipsis', () => {
    const title = `${'a'.repeat(LABEL_TITLE_MAX - 2)} ${'b'.repeat(10)}`;
    expect(toolLabel('search', { query: title })).toBe(
      `Searching: ${'a'.repeat(LABEL_TITLE_MAX - 2)}…`,
    );
  });
});
