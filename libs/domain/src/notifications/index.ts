export * from './notification-fold';
