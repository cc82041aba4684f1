import base from './stryker.config.mjs';
export default { ...base, mutate: ['libs/domain/src/time-slices.ts:85-137'], incremental: false, reporters: ['clear-text'], thresholds: { high: 90, low: 85, break: null } };
