export * from './event-sink.port';
export * from './kafka.event-sink';
export * from './mirror.follower';
export * from './mirror.store';
export * from './run-event.codec';
export * from './gen/runledger/v1/run_event_pb';
export * from './mirror.module';
export * from './mirror.service';
