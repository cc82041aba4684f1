/**
 * Runs before each Kafka test file: KAFKA_BROKERS for the tests (inside this file's sandbox
 * only), from what the global setup started.
 */
import { BROKERS_VARIABLE } from './global-setup';

const brokers = process.env[BROKERS_VARIABLE];
if (brokers) process.env.KAFKA_BROKERS = brokers;
