/**
 * What every runledger process does first: read the configuration, stopping with a message
 * that names the variable when a value is bad, and log as JSON lines at LOG_LEVEL.
 */
import { ConsoleLogger } from '@nestjs/common';
import { ConfigError, loadConfig, type AppConfig } from './config';

const LEVELS = ['error', 'warn', 'log', 'debug', 'verbose'] as const;

export function loadConfigOrExit(program: string): AppConfig {
  try {
    return loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`${program}: ${error.message}`);
      process.exit(1);
    }
    throw error;
  }
}

export function jsonLogger(program: string, config: AppConfig): ConsoleLogger {
  return new ConsoleLogger(program, {
    json: true,
    logLevels: LEVELS.slice(0, LEVELS.indexOf(config.logLevel) + 1),
  });
}
