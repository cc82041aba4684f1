/**
 * The Fastify route config of a Nest route, which the hooks that run before Nest read (the
 * onRequest authentication, body limits, bulk-read turns). Nest's own `@RouteConfig` replaces
 * the config whole, so two decorators declaring parts of it would lose one; each part is
 * added here instead, in whichever order the decorators apply.
 */
import { FASTIFY_ROUTE_CONFIG_METADATA } from '@nestjs/platform-fastify/constants';

export const AddRouteConfig =
  (part: Record<string, unknown>): MethodDecorator =>
  (_target, _key, descriptor) => {
    const config = Reflect.getMetadata(
      FASTIFY_ROUTE_CONFIG_METADATA,
      descriptor.value as object,
    ) as Record<string, unknown> | undefined;
    Reflect.defineMetadata(
      FASTIFY_ROUTE_CONFIG_METADATA,
      { ...config, ...part },
      descriptor.value as object,
    );
    return descriptor;
  };
