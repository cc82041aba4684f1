import { ConsoleLogger, type LogLevel } from '@nestjs/common';

/**
 * What the CLI logs on the way (an unreadable event a replay meets): JSON lines on stderr,
 * whatever their level, as a log collector takes them; stdout carries the command's output.
 */
export class StderrJsonLogger extends ConsoleLogger {
  constructor() {
    super('runledger', { json: true, colors: false });
  }

  protected override printMessages(
    messages: unknown[],
    context?: string,
    logLevel?: LogLevel,
    _writeStreamType?: 'stdout' | 'stderr',
    errorStack?: unknown,
  ): void {
    super.printMessages(messages, context, logLevel, 'stderr', errorStack);
  }
}
