/**
 * A tool result quoted to a voice model (docs/architecture.md, "Why it exists"): whole up to 12,000 characters;
 * above that, cut, and the cut says so with a hint that leads with "ask again for less".
 */
import fc from 'fast-check';
import { given, takeFolded, ThreadLog } from './testing/thread-events';
import { uiMessageProblems } from './testing/ui-messages';
import { emptyThread } from './thread-fold';
import type { ToolPart } from './thread-state';
import {
  continuationHint,
  toolPartResult,
  toolResultForVoice,
  VOICE_TOOL_RESULT_MAX_CHARS,
} from './voice-tool-result';

let log: ThreadLog;

beforeEach(() => {
  log = new ThreadLog();
});

afterEach(async () => {
  for (const state of takeFolded()) {
    expect(await uiMessageProblems(state.messages)).toBeNull();
  }
});

function finishedWith(output: unknown) {
  return given(log.runStarted('r1'), log.toolStarted('r1', 'tc1', 'search')).when(
    log.toolFinished('r1', 'tc1', { toolName: 'search', output }),
  );
}

describe('toolResultForVoice', () => {
  it('given a string output, then it is the text as it is', () => {
    expect(toolResultForVoice(finishedWith('{"looks":"like json"}'), 'tc1')).toEqual({
      toolCallId: 'tc1',
      toolName: 'search',
      state: 'output-available',
      text: '{"looks":"like json"}',
      truncated: false,
      totalChars: 21,
      offset: 0,
    });
  });

  it('given other JSON output, then it is indented JSON', () => {
    const result = toolResultForVoice(finishedWith({ hits: [1, 2] }), 'tc1');
    expect(result?.text).toBe(JSON.stringify({ hits: [1, 2] }, null, 2));
  });

  it('given a failed call, then it is the errorText', () => {
    const state = given(log.runStarted('r1'), log.toolStarted('r1', 'tc1')).when(
      log.toolFinished('r1', 'tc1', { failed: true, errorText: 'schema rejected the arguments' }),
    );
    expect(toolResultForVoice(state, 'tc1')).toMatchObject({
      state: 'output-error',
      text: 'schema rejected the arguments',
      truncated: false,
    });
  });

  it('given a denied call, then it says so; given a running call, then there is no text yet', () => {
    const denied = given(log.runStarted('r1'), log.approvalRequested('r1', 'ap1', 'tc1')).when(
      log.approvalResolved('r1', 'ap1', 'deny'),
    );
    expect(toolResultForVoice(denied, 'tc1')).toMatchObject({
      state: 'output-denied',
      text: 'The call was denied.',
    });
    const other = new ThreadLog();
    const running = given(other.runStarted('r1')).when(other.toolStarted('r1', 'tc1'));
    expect(toolResultForVoice(running, 'tc1')).toMatchObject({
      state: 'input-available',
      text: '',
    });
  });

  it('answers null for a call the thread does not have', () => {
    expect(toolResultForVoice(finishedWith('x'), 'nope')).toBeNull();
  });

  it(`keeps a result of exactly ${VOICE_TOOL_RESULT_MAX_CHARS} characters whole`, () => {
    const result = toolResultForVoice(finishedWith('a'.repeat(12_000)), 'tc1');
    expect(result).toMatchObject({ truncated: false, totalChars: 12_000 });
    expect(result?.text).toHaveLength(12_000);
  });

  it('cuts a longer result at 12,000 characters with a hint that leads with the general remedy', () => {
    const output = 'a'.repeat(12_000) + 'b'.repeat(3_456);
    const result = toolResultForVoice(finishedWith(output), 'tc1');
    expect(result).toMatchObject({ truncated: true, totalChars: 15_456 });
    const text = result?.text ?? '';
    expect(text.startsWith('a'.repeat(12_000) + '\n')).toBe(true);
    expect(text).not.toContain('b');
    const hint = text.slice(12_001);
    expect(hint).toBe(
      '[Result cut at 12,000 of 15,456 characters; ask again for less: a narrower query or filter. ' +
        'Or ask for the rest, starting at character 12,000.]',
    );
    expect(hint.indexOf('ask again for less')).toBeLessThan(hint.indexOf('ask for the rest'));
  });

  it('cuts JSON output measured as the indented text the model would read', () => {
    const output = { rows: Array.from({ length: 2_000 }, (_, i) => ({ id: i })) };
    const whole = JSON.stringify(output, null, 2);
    const result = toolResultForVoice(finishedWith(output), 'tc1');
    expect(result?.totalChars).toBe(whole.length);
    expect(result?.text.startsWith(whole.slice(0, 12_000))).toBe(true);
    expect(result?.text).toContain('ask again for less: a narrower query or filter');
  });

  it('never cuts inside a surrogate pair', () => {
    const output = 'a'.repeat(11_999) + '😀' + 'z'.repeat(100);
    const result = toolResultForVoice(finishedWith(output), 'tc1');
    expect(result?.text.startsWith('a'.repeat(11_999) + '\n[Result cut at 11,999 of 12,101')).toBe(
      true,
    );
  });

  it('finds the call of a given run when call ids repeat across runs, else the latest', () => {
    const state = given(
      log.runStarted('r1'),
      log.runStarted('r2'),
      log.toolFinished('r1', 'call_0', { output: 'first run' }),
      log.toolFinished('r2', 'call_0', { output: 'second run' }),
    ).when();
    expect(toolResultForVoice(state, 'call_0')?.text).toBe('second run');
    expect(toolResultForVoice(state, 'call_0', { runId: 'r1' })?.text).toBe('first run');
  });

  it('takes its ceiling as an option, sized to the session', () => {
    const result = toolResultForVoice(finishedWith('abcdef'), 'tc1', { maxChars: 4 });
    expect(result?.text).toBe(`abcd\n${continuationHint(4, 6)}`);
  });

  it('answers the rest from the offset the hint names', () => {
    const state = finishedWith('abcdefghij');
    expect(toolResultForVoice(state, 'tc1', { maxChars: 4, offset: 4 })).toMatchObject({
      text: `efgh\n${continuationHint(8, 10)}`,
      offset: 4,
      truncated: true,
    });
    expect(toolResultForVoice(state, 'tc1', { maxChars: 4, offset: 8 })).toMatchObject({
      text: 'ij',
      truncated: false,
    });
    expect(toolResultForVoice(state, 'tc1', { offset: 99 })).toMatchObject({
      text: '',
      offset: 10,
      totalChars: 10,
    });
  });

  it('indents a small output, and writes a deeply nested large one compactly: never many times its size', () => {
    let nested: unknown = Array.from({ length: 100_000 }, () => 0);
    for (let depth = 0; depth < 60; depth += 1) nested = [nested];
    const compact = JSON.stringify(nested);
    const large = toolResultForVoice(finishedWith(nested), 'tc1', { maxChars: 100 });
    expect(large?.totalChars).toBe(compact.length);
    const small = toolResultForVoice(finishedWith({ a: 1 }), 'tc1');
    expect(small?.text).toBe('{\n  "a": 1\n}');
  });

  it('starts an offset that falls inside a surrogate pair at the pair, never on half a character', () => {
    const state = finishedWith('ab😀cd');
    expect(toolResultForVoice(state, 'tc1', { offset: 3 })).toMatchObject({
      text: '😀cd',
      offset: 2,
    });
  });

  it('reads back the whole text, surrogate pairs intact, by following the hints page by page', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: fc.constantFrom('a', 'é', '😀', '\n'), maxLength: 60 }),
        fc.integer({ min: 2, max: 9 }),
        (output, maxChars) => {
          const state = given(log.runStarted('r1')).when(
            log.toolFinished('r1', 'p1', { toolName: 'read', output }),
          );
          let text = '';
          let offset = 0;
          for (let page = 0; page <= output.length; page += 1) {
            const result = toolResultForVoice(state, 'p1', { maxChars, offset })!;
            if (!result.truncated) {
              text += result.text;
              break;
            }
            const next = /starting at character ([\d,]+)\.\]$/.exec(result.text)![1];
            const cut = Number(next.replace(/,/g, ''));
            text += result.text.slice(0, cut - offset);
            offset = cut;
          }
          expect(text).toBe(output);
        },
      ),
    );
  });

  it.each([
    ['the first', '\ud800\udc00'],
    ['the last', '\udbff\udfff'],
  ])('never cuts inside %s surrogate pair of Unicode', (_which, pair) => {
    const result = toolResultForVoice(finishedWith(`abc${pair}z`), 'tc1', { maxChars: 4 });
    expect(result?.text).toBe(`abc\n${continuationHint(3, 6)}`);
  });

  it('cuts after a character just below the surrogates whole', () => {
    const result = toolResultForVoice(finishedWith('abc\ud7ffz'), 'tc1', { maxChars: 4 });
    expect(result?.text).toBe(`abc\ud7ff\n${continuationHint(4, 5)}`);
  });

  it('groups thousands in the hint at every order of magnitude', () => {
    expect(continuationHint(999, 1_234_567)).toBe(
      '[Result cut at 999 of 1,234,567 characters; ask again for less: a narrower query or filter. ' +
        'Or ask for the rest, starting at character 999.]',
    );
  });

  it('names the call, its state and where the text starts', () => {
    expect(toolResultForVoice(finishedWith('done'), 'tc1')).toEqual({
      toolCallId: 'tc1',
      toolName: 'search',
      state: 'output-available',
      text: 'done',
      truncated: false,
      totalChars: 4,
      offset: 0,
    });
  });

  it('cuts a page after the offset where that page ends, never inside a pair there', () => {
    const whole = `abcd${'😀'}xyz`;
    const result = toolResultForVoice(finishedWith(whole), 'tc1', { maxChars: 5, offset: 1 });
    expect(result?.text).toBe(`bcd😀\n${continuationHint(6, whole.length)}`);
  });

  it('cuts after a character above the surrogates whole', () => {
    const result = toolResultForVoice(finishedWith('abc\ue000z'), 'tc1', { maxChars: 4 });
    expect(result?.text).toBe(`abc\ue000\n${continuationHint(4, 5)}`);
  });

  describe('of a part as stored', () => {
    const part = (over: Partial<ToolPart>): ToolPart => ({
      type: 'tool-deploy',
      toolCallId: 'tc1',
      state: 'output-available',
      input: {},
      ...over,
    });

    it('reads an output that is missing as null, and a missing error text as nothing', () => {
      expect(toolPartResult(part({})).text).toBe('null');
      expect(toolPartResult(part({ state: 'output-error' })).text).toBe('');
    });

    it('says why a call was denied when the denial gives a reason', () => {
      const denied = (approval?: ToolPart['approval']) =>
        toolPartResult(part({ state: 'output-denied', approval })).text;
      expect(denied({ id: 'ap1', approved: false, reason: 'not on Fridays' })).toBe(
        'The call was denied: not on Fridays',
      );
      expect(denied({ id: 'ap1', approved: false })).toBe('The call was denied.');
      expect(denied(undefined)).toBe('The call was denied.');
    });

    it('finds a call in a message with no run recorded as a call of the run with the empty id', () => {
      const state = emptyThread('tenant-1', 'thread-1');
      state.messages.push({
        id: 'm1',
        role: 'assistant',
        parts: [part({ output: 'ok' })],
      });
      expect(toolResultForVoice(state, 'tc1', { runId: '' })?.text).toBe('ok');
      expect(toolResultForVoice(state, 'tc1', { runId: 'r1' })).toBeNull();
    });
  });
});
