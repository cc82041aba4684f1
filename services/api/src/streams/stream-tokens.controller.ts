import { Body, Controller, HttpCode, Post } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import { CurrentActor, CurrentPrincipal, RequireScope } from '../auth/access.decorators';
import type { Actor, Principal } from '../auth/principal';
import { RateLimited } from '../limits/rate-limit.decorators';
import { ApiRoute } from '../openapi/api-route.decorator';
import { StreamTokenRequest, StreamTokenResponse } from '../openapi/schemas';
import { StreamTokens } from './stream-tokens.service';

@ApiTags('streams')
@Controller('v1/stream-tokens')
export class StreamTokensController {
  constructor(private readonly tokens: StreamTokens) {}

  @Post()
  @HttpCode(201)
  @RequireScope('read')
  @RateLimited('call')
  @ApiOperation({
    summary: "A short-lived token for one run's or thread's stream, for a browser's EventSource",
    description:
      'Open the stream with `?token=<token>` instead of an Authorization header (`streamUrl`). The token ' +
      'reads that stream only, for STREAM_TOKEN_TTL_S seconds after it was minted; a reconnect after that ' +
      'needs a new token.',
  })
  @ApiRoute({
    body: StreamTokenRequest,
    ok: { status: 201, description: 'The token', type: StreamTokenResponse },
    errors: [400, 403, 404, 429],
  })
  mint(
    @CurrentPrincipal() principal: Principal,
    @CurrentActor() actor: Actor,
    @Body() body: unknown,
  ) {
    return this.tokens.mint(principal, actor, body);
  }
}
