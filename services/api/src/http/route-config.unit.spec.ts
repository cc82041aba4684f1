import 'reflect-metadata';
import { FASTIFY_ROUTE_CONFIG_METADATA } from '@nestjs/platform-fastify/constants';
import { AddRouteConfig } from './route-config';

class Routes {
  @AddRouteConfig({ access: { scope: 'read' } })
  @AddRouteConfig({ bulkRead: true })
  above() {}

  @AddRouteConfig({ bulkRead: true })
  @AddRouteConfig({ access: { scope: 'read' } })
  below() {}

  @AddRouteConfig({ access: { scope: 'read' } })
  alone() {}
}

it.each(['above', 'below'] as const)(
  'keeps every part of the route config, whichever decorator applies first (%s)',
  (route) => {
    expect(Reflect.getMetadata(FASTIFY_ROUTE_CONFIG_METADATA, Routes.prototype[route])).toEqual({
      access: { scope: 'read' },
      bulkRead: true,
    });
  },
);

it('gives a route only the parts declared on it', () => {
  expect(Reflect.getMetadata(FASTIFY_ROUTE_CONFIG_METADATA, Routes.prototype.alone)).toEqual({
    access: { scope: 'read' },
  });
});
