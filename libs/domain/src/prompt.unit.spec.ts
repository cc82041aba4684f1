/** The prompt's rule: refused while a turn is active; else the turn goes to the open run, or a new one. */
import { validateEvent } from './event-catalogue';
import { decidePrompt, promptEvents, promptRunId, PROMPT_TITLE_MAX } from './prompt';

const run = (
  runId: string,
  status: 'running' | 'completed',
  activeTurnId: string | null = null,
) => ({
  runId,
  status,
  activeTurnId,
  agent: 'support-bot',
});

describe('decidePrompt', () => {
  it('refuses while any run of the thread has an active turn, naming the turn and the thread status', () => {
    expect(
      decidePrompt({
        status: 'running',
        title: null,
        runs: [run('r1', 'running'), run('r2', 'running', 't7')],
      }),
    ).toEqual({ kind: 'refused', activeTurnId: 't7', runId: 'r2', status: 'running' });
  });

  it('continues the newest open run when no turn is active', () => {
    expect(
      decidePrompt({
        status: 'idle',
        title: null,
        runs: [run('r1', 'running'), run('r2', 'running'), run('r3', 'completed')],
      }),
    ).toEqual({ kind: 'continue', runId: 'r2' });
  });

  it('starts a run after the last one when every run ended, with its agent', () => {
    expect(
      decidePrompt({ status: 'finished', title: 'x', runs: [run('r1', 'completed')] }),
    ).toEqual({ kind: 'start', previousRunId: 'r1', agent: 'support-bot' });
  });

  it('starts the first run of a thread that has none (a new binding)', () => {
    expect(decidePrompt({ status: 'idle', title: null, runs: [] })).toEqual({
      kind: 'start',
      previousRunId: null,
      agent: null,
    });
  });
});

describe('promptRunId', () => {
  it('is the same for the same thread and previous run, and differs otherwise', () => {
    const id = promptRunId('t-a', 'th1', null);
    expect(promptRunId('t-a', 'th1', null)).toBe(id);
    expect(promptRunId('t-b', 'th1', null)).not.toBe(id);
    expect(promptRunId('t-a', 'th1', id)).not.toBe(id);
  });
});

describe('promptEvents', () => {
  const input = {
    text: 'Where is my   order?',
    threadId: 'th1',
    messageId: '0190a8a0-0000-7000-8000-000000000001',
    turnId: 'turn-1',
    source: 'telegram' as const,
    metadata: { user: 'u:ana' },
  };

  it('records a run start titled by the prompt, the user message and the turn, each valid', () => {
    const events = promptEvents(
      input,
      { kind: 'start', previousRunId: null, agent: null },
      { title: null },
      'assistant',
    );
    expect(events.map((e) => e.type)).toEqual(['run.started', 'message.added', 'turn.started']);
    expect(events[0].data).toEqual({
      threadId: 'th1',
      agent: 'assistant',
      source: 'telegram',
      title: 'Where is my order?',
    });
    for (const event of events) {
      expect(validateEvent(event).ok).toBe(true);
      expect(event.metadata).toEqual({ user: 'u:ana' });
    }
  });

  it('records only the message and the turn in an open run, and keeps a thread title', () => {
    const events = promptEvents(input, { kind: 'continue', runId: 'r1' }, { title: 'x' }, 'a');
    expect(events.map((e) => e.type)).toEqual(['message.added', 'turn.started']);
    expect(events[1].data).toEqual({ turnId: 'turn-1', source: 'telegram' });
  });

  it(`cuts a long first prompt to a ${PROMPT_TITLE_MAX}-character title`, () => {
    const [started] = promptEvents(
      { ...input, text: 'w '.repeat(100) },
      { kind: 'start', previousRunId: null, agent: 'bot' },
      { title: null },
      'assistant',
    );
    expect((started.data.title as string).length).toBeLessThanOrEqual(PROMPT_TITLE_MAX);
    expect(started.data.agent).toBe('bot');
  });
});

describe('a new run’s title and agent', () => {
  const input = {
    text: '',
    threadId: 'th1',
    messageId: '0190a8a0-0000-7000-8000-000000000001',
    turnId: 'turn-1',
    source: 'typed' as const,
    metadata: {},
  };
  const start = { kind: 'start' as const, previousRunId: null, agent: null };
  const titleOf = (text: string, title: string | null = null) =>
    promptEvents({ ...input, text }, start, { title }, 'agent')[0].data.title;

  it('is the prompt’s words, whitespace collapsed and trimmed', () => {
    expect(titleOf('  Where   is\nmy refund?  ')).toBe('Where is my refund?');
  });

  it(`keeps ${PROMPT_TITLE_MAX} characters whole and cuts a longer prompt, trimmed, with an ellipsis`, () => {
    expect(titleOf('t'.repeat(PROMPT_TITLE_MAX))).toBe('t'.repeat(PROMPT_TITLE_MAX));
    expect(titleOf(`${'a'.repeat(PROMPT_TITLE_MAX - 2)} ${'b'.repeat(10)}`)).toBe(
      `${'a'.repeat(PROMPT_TITLE_MAX - 2)}…`,
    );
  });

  it('is left out for a blank prompt, and when the thread has a title', () => {
    expect(titleOf('   ')).toBeUndefined();
    expect(titleOf('Where is my refund?', 'Refunds')).toBeUndefined();
  });

  it('takes the agent of the previous run, unless it had none', () => {
    const run = { runId: 'r1', status: 'completed' as const, activeTurnId: null };
    expect(
      decidePrompt({ status: 'finished', title: null, runs: [{ ...run, agent: 'bot' }] }),
    ).toEqual({ kind: 'start', previousRunId: 'r1', agent: 'bot' });
    expect(
      decidePrompt({ status: 'finished', title: null, runs: [{ ...run, agent: '' }] }),
    ).toEqual({ kind: 'start', previousRunId: 'r1', agent: null });
  });
});
