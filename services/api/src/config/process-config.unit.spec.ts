import { JsonLinesLogger } from './process-config';

describe('JsonLinesLogger', () => {
  it.each(['stdout', 'stderr'] as const)(
    'writes every level as one JSON line on %s, errors included, and nothing elsewhere',
    (stream) => {
      const out = jest.spyOn(process.stdout, 'write').mockImplementation(() => true);
      const err = jest.spyOn(process.stderr, 'write').mockImplementation(() => true);
      try {
        const logger = new JsonLinesLogger('test', stream);
        logger.log({ msg: 'hello' });
        logger.warn('careful');
        logger.error({ msg: 'broken', runId: 'r1' });
        const [written, silent] = stream === 'stdout' ? [out, err] : [err, out];
        expect(silent).not.toHaveBeenCalled();
        const lines = written.mock.calls.map(([chunk]) => JSON.parse(String(chunk)) as object);
        expect(lines).toEqual([
          expect.objectContaining({ level: 'log', message: { msg: 'hello' } }),
          expect.objectContaining({ level: 'warn', message: 'careful' }),
          expect.objectContaining({ level: 'error', message: { msg: 'broken', runId: 'r1' } }),
        ]);
      } finally {
        out.mockRestore();
        err.mockRestore();
      }
    },
  );

  it('keeps to the levels it is given', () => {
    const out = jest.spyOn(process.stdout, 'write').mockImplementation(() => true);
    try {
      const logger = new JsonLinesLogger('test', 'stdout', ['error']);
      logger.log('quiet');
      logger.error('loud');
      expect(out).toHaveBeenCalledTimes(1);
    } finally {
      out.mockRestore();
    }
  });
});
