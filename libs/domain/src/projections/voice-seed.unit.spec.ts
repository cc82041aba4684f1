/**
 * The voice seed and the one decoder of a message's words (docs/architecture.md, "Why it exists"): the newest
 * spoken and typed turns within 20 turns and 4,000 tokens, words only, text kept verbatim.
 */
import { given, takeFolded, ThreadLog } from './testing/thread-events';
import { uiMessageProblems } from './testing/ui-messages';
import { isToolPart, messageText } from './message-text';
import type { ProjectedEvent, UIMessage } from './thread-state';
import {
  CUT_TURN_MARKER,
  estimateTokens,
  VOICE_SEED_MAX_TOKENS,
  VOICE_SEED_MAX_TURNS,
  voiceSeed,
  voiceSeedOf,
} from './voice-seed';

let log: ThreadLog;

beforeEach(() => {
  log = new ThreadLog();
});

afterEach(async () => {
  for (const state of takeFolded()) {
    expect(await uiMessageProblems(state.messages)).toBeNull();
  }
});

function conversation(count: number, text: (i: number) => string): ProjectedEvent[] {
  const events = [log.runStarted('r1')];
  for (let i = 0; i < count; i += 1) {
    events.push(log.message('r1', `m${i}`, i % 2 === 0 ? 'user' : 'assistant', text(i)));
  }
  return events;
}

describe('messageText', () => {
  const message = (parts: UIMessage['parts']): UIMessage => ({ id: 'x', role: 'assistant', parts });

  it('joins the text parts, in order, by a newline', () => {
    expect(
      messageText(
        message([
          { type: 'text', text: 'Let me check.' },
          {
            type: 'tool-lookup',
            toolCallId: 't',
            state: 'output-available',
            input: {},
            output: 'x',
          },
          { type: 'text', text: 'It shipped.' },
        ]),
      ),
    ).toBe('Let me check.\nIt shipped.');
  });

  it('takes as a tool part only a tool- part with a call id', () => {
    const parts = [
      { type: 'tool-search', toolCallId: 'c1', state: 'input-available' },
      { type: 'dynamic-tool', toolCallId: 'c2', state: 'input-available' },
      { type: 'tool-search', state: 'input-available' },
      { type: 'text', text: 'tool-search' },
    ] as unknown as UIMessage['parts'];
    expect(parts.map(isToolPart)).toEqual([true, false, false, false]);
  });

  it('answers "" for a tool-only message', () => {
    expect(
      messageText(
        message([{ type: 'tool-lookup', toolCallId: 't', state: 'input-available', input: {} }]),
      ),
    ).toBe('');
  });

  it('returns text that looks like JSON or an envelope exactly as it is', () => {
    for (const text of ['{"parts":[{"type":"text","text":"hi"}]}', '[1,2]', '"quoted"', 'null']) {
      expect(messageText(message([{ type: 'text', text }]))).toBe(text);
    }
  });
});

describe('voiceSeed', () => {
  it('given typed messages and transcripts, then it replays them oldest first with their roles', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'm1', 'user', 'Where is my refund?'),
      log.transcript('r1', 'u1', 'assistant', 'Let me check that.'),
      log.transcript('r1', 'u2', 'user', 'Order 1042.'),
    ).when();
    expect(voiceSeed(state)).toEqual({
      turns: [
        { role: 'user', text: 'Where is my refund?' },
        { role: 'assistant', text: 'Let me check that.' },
        { role: 'user', text: 'Order 1042.' },
      ],
      tokenEstimate:
        estimateTokens('Where is my refund?') + estimateTokens('Let me check that.') + 3,
      activeTools: [],
    });
  });

  it('given an empty thread, then the seed is empty', () => {
    expect(voiceSeed(given().when())).toEqual({ turns: [], tokenEstimate: 0, activeTools: [] });
  });

  it(`given more than ${VOICE_SEED_MAX_TURNS} turns, then it keeps the newest ${VOICE_SEED_MAX_TURNS}`, () => {
    const state = given(...conversation(30, (i) => `turn ${i}`)).when();
    const seed = voiceSeed(state);
    expect(seed.turns).toHaveLength(VOICE_SEED_MAX_TURNS);
    expect(seed.turns[0].text).toBe('turn 10');
    expect(seed.turns[VOICE_SEED_MAX_TURNS - 1].text).toBe('turn 29');
  });

  it(`given long turns, then it keeps the newest that fit in ${VOICE_SEED_MAX_TOKENS} tokens, each estimated as ceil(chars / 4)`, () => {
    // 1,001 tokens each (4,001 chars): three fit (3,003), a fourth would not (4,004).
    const state = given(...conversation(6, (i) => `${i}`.padEnd(4001, '.'))).when();
    const seed = voiceSeed(state);
    expect(seed.turns.map((turn) => turn.text[0])).toEqual(['3', '4', '5']);
    expect(seed.tokenEstimate).toBe(3003);
  });

  it('counts the estimate per turn: turns of 1 char cost a token each', () => {
    const state = given(...conversation(5, () => 'x')).when();
    expect(voiceSeed(state).tokenEstimate).toBe(5);
  });

  it('given turns exactly at the budget, then they all fit', () => {
    const state = given(...conversation(4, (i) => `${i}`.padEnd(4000, '.'))).when();
    const seed = voiceSeed(state);
    expect(seed.turns).toHaveLength(4);
    expect(seed.tokenEstimate).toBe(VOICE_SEED_MAX_TOKENS);
  });

  it('stops at the first turn that does not fit, rather than skipping to older ones', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'old', 'user', 'short and old'),
      log.message('r1', 'big', 'assistant', 'b'.repeat(12_004)),
      log.message('r1', 'new', 'user', 'n'.repeat(4_000)),
    ).when();
    expect(voiceSeed(state).turns.map((t) => t.text[0])).toEqual(['n']);
  });

  it('given the newest turn alone over the budget, then it keeps its last characters that fit, marked as cut', () => {
    const text = `START${'x'.repeat(20_000)}THE END`;
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'm0', 'user', 'earlier'),
      log.message('r1', 'm1', 'assistant', text),
    ).when();
    const seed = voiceSeed(state);
    expect(seed.turns).toHaveLength(1);
    const [turn] = seed.turns;
    expect(turn.role).toBe('assistant');
    expect(turn.text.startsWith(CUT_TURN_MARKER)).toBe(true);
    expect(turn.text.endsWith('THE END')).toBe(true);
    expect(turn.text).toHaveLength(VOICE_SEED_MAX_TOKENS * 4);
    expect(text.endsWith(turn.text.slice(CUT_TURN_MARKER.length))).toBe(true);
    expect(seed.tokenEstimate).toBe(VOICE_SEED_MAX_TOKENS);
  });

  it('never starts a cut turn inside a surrogate pair', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'm1', 'user', '😀'.repeat(9000)),
    ).when();
    const [turn] = voiceSeed(state).turns;
    const kept = turn.text.slice(CUT_TURN_MARKER.length);
    expect(kept).toBe('😀'.repeat(kept.length / 2));
  });

  it('starts a cut turn at a character above the surrogates', () => {
    const text = '\ue000'.repeat(20);
    const [turn] = voiceSeedOf([{ id: 'm1', role: 'user', parts: [{ type: 'text', text }] }], [], {
      maxTokens: 2,
    }).turns;
    expect(turn.text).toBe(`${CUT_TURN_MARKER}${text.slice(0, 2 * 4 - CUT_TURN_MARKER.length)}`);
  });

  it('drops rows without text: tool rows, blank and empty messages, and system messages', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 's1', 'system', 'You are a support agent.'),
      log.message('r1', 'm1', 'user', 'Look it up'),
      log.toolStarted('r1', 'tc1'),
      log.toolFinished('r1', 'tc1', { output: 'SECRET TOOL OUTPUT' }),
      log.message('r1', 'm2', 'user', '   '),
      log.message('r1', 'm3', 'assistant', ''),
      log.transcript('r1', 'u1', 'assistant', 'It shipped.'),
    ).when();
    expect(voiceSeed(state).turns).toEqual([
      { role: 'user', text: 'Look it up' },
      { role: 'assistant', text: 'It shipped.' },
    ]);
  });

  it('never replays a tool output, even when a tool part shares the assistant message that speaks', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'a1', 'assistant', 'Checking.'),
      log.toolStarted('r1', 'tc1'),
      log.toolFinished('r1', 'tc1', { output: { secret: 'TOOL OUTPUT' } }),
    ).when();
    expect(state.messages).toHaveLength(1);
    expect(voiceSeed(state).turns).toEqual([{ role: 'assistant', text: 'Checking.' }]);
    expect(JSON.stringify(voiceSeed(state))).not.toContain('TOOL OUTPUT');
  });

  it('replays text that looks like a JSON envelope verbatim', () => {
    const text = '{"type":"message","content":[{"type":"text","text":"hi"}]}';
    const state = given(log.runStarted('r1'), log.message('r1', 'm1', 'user', text)).when();
    expect(voiceSeed(state).turns).toEqual([{ role: 'user', text }]);
  });

  it('takes its bounds as options', () => {
    const state = given(...conversation(10, (i) => `t${i}`)).when();
    expect(voiceSeed(state, { maxTurns: 2 }).turns.map((t) => t.text)).toEqual(['t8', 't9']);
    expect(voiceSeed(state, { maxTokens: 3 }).turns.map((t) => t.text)).toEqual(['t7', 't8', 't9']);
  });

  it.each([
    ['the first', '\ud800\udc00'],
    ['the last', '\udbff\udfff'],
  ])('never starts a cut turn inside %s surrogate pair of Unicode', (_which, pair) => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'm1', 'user', `${pair.repeat(3)}xx`),
    ).when();
    expect(voiceSeed(state, { maxTokens: 1 }).turns).toEqual([
      { role: 'user', text: `${CUT_TURN_MARKER}xx` },
    ]);
  });

  it('given no token budget at all, then nothing is replayed, not even a cut turn', () => {
    const state = given(log.runStarted('r1'), log.message('r1', 'm1', 'user', 'hello')).when();
    expect(voiceSeed(state, { maxTokens: 0 })).toEqual({
      turns: [],
      tokenEstimate: 0,
      activeTools: [],
    });
  });

  it('given no turn budget, then nothing is replayed', () => {
    const state = given(log.runStarted('r1'), log.message('r1', 'm1', 'user', 'hello')).when();
    expect(voiceSeed(state, { maxTurns: 0 })).toEqual({
      turns: [],
      tokenEstimate: 0,
      activeTools: [],
    });
  });
});

describe('voiceSeed: tool labels', () => {
  it('lists a running tool with its label beside the turns, and never as a turn', () => {
    const state = given(
      log.runStarted('r1'),
      log.transcript('r1', 'u1', 'user', 'What is on the roadmap?'),
      log.toolStarted('r1', 'tc1', 'read_page', { title: '  Roadmap  ' }),
    ).when();
    const seed = voiceSeed(state);
    expect(seed.activeTools).toEqual([
      { toolCallId: 'tc1', toolName: 'read_page', label: 'Reading page: Roadmap' },
    ]);
    expect(seed.turns).toEqual([{ role: 'user', text: 'What is on the roadmap?' }]);
    expect(seed.turns.map((t) => t.text).join('\n')).not.toContain('Reading page');
    expect(seed.tokenEstimate).toBe(estimateTokens('What is on the roadmap?'));
  });

  it('drops the label once the assistant speaks again; the spoken words are the turn', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolStarted('r1', 'tc1', 'search', { query: 'calendar' }),
      log.transcript('r1', 'a1', 'assistant', 'You are free at noon.'),
    ).when();
    const seed = voiceSeed(state);
    expect(seed.activeTools).toEqual([]);
    expect(seed.turns).toEqual([{ role: 'assistant', text: 'You are free at noon.' }]);
    expect(JSON.stringify(seed)).not.toContain('Searching');
  });
});
