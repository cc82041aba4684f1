/**
 * The shared contract against a real EventStoreDB / KurrentDB server, when one is given by
 * EVENTSTORE_URL. Nothing here is stubbed: without a server the suite is skipped, loudly.
 */
import { describeEventStoreContract } from './event-store.contract';
import { EsdbEventStore } from './esdb.event-store';

const url = process.env.EVENTSTORE_URL;

if (url) {
  describeEventStoreContract('EventStoreDB', () => Promise.resolve(EsdbEventStore.connect(url)), {
    timeoutMs: 30_000,
  });
} else {
  console.warn(
    'EventStoreDB contract skipped: EVENTSTORE_URL is not set. Start a server (e.g. ' +
      'docker run -p 2113:2113 docker.kurrent.io/kurrent-latest/kurrentdb --insecure) and run ' +
      "EVENTSTORE_URL='kurrentdb://localhost:2113?tls=false' npx jest --selectProjects int -- esdb (see docs/operations.md, Tests)",
  );
  describe.skip('EventStore contract: EventStoreDB (set EVENTSTORE_URL to run)', () => {
    it('runs against a live server', () => undefined);
  });
}
