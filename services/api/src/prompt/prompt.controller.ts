import { Body, Controller, HttpCode, Param, Post, Req } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import type { FastifyRequest } from 'fastify';
import { RequireScope } from '../auth/access.decorators';
import { clientCaller } from '../http/caller';
import { RateLimited } from '../limits/rate-limit.decorators';
import { PromptService } from './prompt.service';
import { ApiRoute } from '../openapi/api-route.decorator';
import { PromptAnswer, PromptRequest } from '../openapi/schemas';

@ApiTags('threads')
@Controller('v1/threads/:threadId/prompt')
export class PromptController {
  constructor(private readonly prompts: PromptService) {}

  @Post()
  @HttpCode(201)
  @RequireScope('append')
  // Starts work: costly, like steer.
  @RateLimited('costly')
  @ApiOperation({
    summary: "Start a turn with the user's words: `{ text, source?, agent?, turnId?, binding? }`",
    description:
      "Records `message.added` (role user) and `turn.started` on the thread's open run, or on a run it starts " +
      '(`run.started` first) when none is open. 201 `{ threadId, runId, turnId, messageId, runStarted, position }`. ' +
      "**409 `turn_active`** with `activeTurnId`, `runId` and the thread's `status` when a turn is in progress: " +
      'nothing is recorded (no queueing, no steering). With `binding` (`{ channel, account, chat, topic? }`, bound ' +
      'to this thread) the events carry `metadata.channel`. Every event carries `metadata.user`.',
  })
  @ApiRoute({
    body: PromptRequest,
    ok: { status: 201, description: 'The turn started', type: PromptAnswer },
    errors: [400, 403, 404, 409, 414, 429, 503],
  })
  prompt(
    @Req() request: FastifyRequest,
    @Param('threadId') threadId: string,
    @Body() body: unknown,
  ) {
    return this.prompts.prompt(clientCaller(request), threadId, body);
  }
}
