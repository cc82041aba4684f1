/**
 * Tool exchanges never vanish from a thread (docs/architecture.md, "Why it exists"). Regression cases adapted
 * from the LiveKit agents chat-context incident (livekit/agents#7324, fixed by #7330): an
 * output with no name was filtered out while its call was kept, then the orphaned call was
 * dropped too; a realtime call rejected before it ran left an output with no call.
 * Here `toolCallId` is the only identity: calls and outputs pair by it, and a name is only
 * ever filled in, never required.
 */
import { given, takeFolded, ThreadLog, toolPart, toolParts } from './testing/thread-events';
import { uiMessageProblems } from './testing/ui-messages';
import { messageText } from './message-text';

let log: ThreadLog;

beforeEach(() => {
  log = new ThreadLog();
});

afterEach(async () => {
  for (const state of takeFolded()) {
    expect(await uiMessageProblems(state.messages)).toBeNull();
  }
});

function unnamedFinish(runId: string, toolCallId: string, output: unknown) {
  const finish = log.toolFinished(runId, toolCallId, { output });
  delete (finish.data as { toolName?: string }).toolName;
  return finish;
}

describe('tool pairing by call id', () => {
  it('given a named call, when its output arrives with no name, then they pair by call id into one complete part', () => {
    const state = given(
      log.runStarted('r1'),
      log.message('r1', 'u1', 'user', 'What is the weather in Paris?'),
      log.toolStarted('r1', 'call_weather_1', 'get_weather', { city: 'Paris' }),
    ).when(unnamedFinish('r1', 'call_weather_1', { sky: 'sunny' }));
    expect(toolParts(state)).toEqual([
      {
        type: 'tool-get_weather',
        toolCallId: 'call_weather_1',
        state: 'output-available',
        input: { city: 'Paris' },
        output: { sky: 'sunny' },
      },
    ]);
    // The user's question keeps its answer: nothing around the exchange was dropped.
    expect(state.messages.map(messageText)).toEqual(['What is the weather in Paris?', '']);
  });

  it('given a call rejected before it ran (unknown tool, bad arguments), when only its failed finish is recorded, then the call shows beside its error', () => {
    const state = given(log.runStarted('r1')).when(
      log.toolFinished('r1', 'call_bad_args', {
        toolName: 'create_rma',
        failed: true,
        errorText: 'arguments failed validation: serial is required',
      }),
    );
    expect(toolPart(state, 'call_bad_args')).toEqual({
      type: 'tool-create_rma',
      toolCallId: 'call_bad_args',
      state: 'output-error',
      input: {},
      errorText: 'arguments failed validation: serial is required',
    });
  });

  it('given a rejected call recorded with no name, then it still shows, and its name is filled in once known', () => {
    const history = [
      log.runStarted('r1'),
      log.event('r1', 'tool.finished', {
        toolCallId: 'call_x',
        failed: true,
        errorText: 'no executor for this tool',
      }),
    ];
    const unnamed = given(...history).when();
    expect(toolPart(unnamed, 'call_x')).toMatchObject({
      type: 'tool-unknown',
      state: 'output-error',
    });
    const named = given(...history).when(log.toolStarted('r1', 'call_x', 'lookup_order', { n: 1 }));
    expect(toolPart(named, 'call_x')).toMatchObject({
      type: 'tool-lookup_order',
      state: 'output-error',
      input: { n: 1 },
    });
  });

  it('given a recorded call, when the same call is recorded again (and again after its output), then there is one call', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolStarted('r1', 'c1', 'lookup_order', { order: '123' }),
      log.toolStarted('r1', 'c1', 'lookup_order', { order: '123' }),
      log.toolFinished('r1', 'c1', { toolName: 'lookup_order', output: '{"status":"delivered"}' }),
    ).when(log.toolStarted('r1', 'c1', 'lookup_order', { order: '123' }));
    expect(toolParts(state)).toEqual([
      {
        type: 'tool-lookup_order',
        toolCallId: 'c1',
        state: 'output-available',
        input: { order: '123' },
        output: '{"status":"delivered"}',
      },
    ]);
  });

  it('given interleaved exchanges, when outputs arrive out of order and unnamed, then each pairs with its own call', () => {
    const state = given(
      log.runStarted('r1'),
      log.toolStarted('r1', 'c1', 'lookup_order'),
      log.toolStarted('r1', 'c2', 'check_warranty'),
      unnamedFinish('r1', 'c2', { eligible: true }),
    ).when(unnamedFinish('r1', 'c1', { status: 'delivered' }));
    expect(toolParts(state).map((p) => [p.toolCallId, p.type, p.output])).toEqual([
      ['c1', 'tool-lookup_order', { status: 'delivered' }],
      ['c2', 'tool-check_warranty', { eligible: true }],
    ]);
  });
});
