import { Body, Controller, HttpCode, Param, Post, Query, Req } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import type { FastifyRequest } from 'fastify';
import { RequireScope } from '../auth/access.decorators';
import { RateLimited } from '../limits/rate-limit.decorators';
import { queryInt } from '../runs/runs.controller';
import { clientCaller } from '../http/caller';
import { CommandsService } from './commands.service';
import { ApiMinPosition, ApiRoute } from '../openapi/api-route.decorator';
import {
  ConsumeRequest,
  ConsumeResponse,
  DecisionRequest,
  Resolution,
  SteerRequest,
  SteerResponse,
  StopRequest,
  StopResponse,
} from '../openapi/schemas';

@ApiTags('commands')
@Controller('v1')
export class CommandsController {
  constructor(private readonly commands: CommandsService) {}

  @Post('runs/:runId/steer')
  @HttpCode(201)
  @RequireScope('append')
  @RateLimited('costly')
  @ApiOperation({
    summary: 'Steer the active turn: `{ expectedTurnId, instruction }`',
    description:
      "Appends `turn.steered` only if `expectedTurnId` is the run's active turn, with the run's revision as " +
      'the expected revision. **409 `turn_not_active`** (`activeTurnId`, null when none) is the only answer ' +
      'that permits delivering the instruction as a fresh turn instead. 409 `steer_conflict` means another ' +
      'command changed the run first while the turn is still active: read and decide again; every other ' +
      'error must be surfaced, never turned into a fresh turn.',
  })
  @ApiRoute({
    body: SteerRequest,
    ok: { status: 201, description: 'The instruction is in the active turn', type: SteerResponse },
    errors: [400, 403, 404, 409, 414, 429],
  })
  steer(@Req() request: FastifyRequest, @Param('runId') runId: string, @Body() body: unknown) {
    return this.commands.steer(clientCaller(request), runId, body);
  }

  @Post('runs/:runId/stop')
  @HttpCode(201)
  @RequireScope('append')
  // A plain call: stopping starts and redirects nothing, and stays open after a burst of steers.
  @RateLimited('call')
  @ApiOperation({
    summary:
      'Stop a run: `{ reason? }` (the body is optional) finishes it as cancelled; a finished run answers 409 with its status',
  })
  @ApiRoute({
    body: StopRequest,
    bodyOptional: true,
    ok: { status: 201, description: 'The run finished as cancelled', type: StopResponse },
    errors: [400, 403, 404, 409, 414, 429],
  })
  stop(@Req() request: FastifyRequest, @Param('runId') runId: string, @Body() body: unknown) {
    return this.commands.stop(clientCaller(request), runId, body);
  }

  @Post('runs/:runId/approvals/:approvalId/resolve')
  @HttpCode(201)
  @RequireScope('approve')
  @RateLimited('costly')
  @ApiOperation({
    summary: 'Resolve an approval exactly once: `{ decision: "allow" | "deny" }`',
    description:
      'Policy is evaluated now: an allow it forbids is recorded as a one-time deny with `downgraded: true`. ' +
      'Needs the `approve` scope. The answer carries a signed one-use receipt, for the resolver only: the log ' +
      'keeps its id and digest. A second resolution answers 409 `already_resolved` with the first (without a receipt); ' +
      'an approval asked again for the same tool call answers 409 `approval_superseded` with `supersededBy`; ' +
      'one whose tool call finished while it waited answers 409 `tool_finished`.',
  })
  @ApiRoute({
    body: DecisionRequest,
    ok: { status: 201, description: 'Resolved, with the receipt', type: Resolution },
    errors: [400, 403, 404, 409, 414, 429, 503],
  })
  resolve(
    @Req() request: FastifyRequest,
    @Param('runId') runId: string,
    @Param('approvalId') approvalId: string,
    @Body() body: unknown,
  ) {
    return this.commands.resolve(clientCaller(request), runId, approvalId, body);
  }

  @Post('threads/:threadId/approvals/answer')
  @HttpCode(201)
  @RequireScope('approve')
  @RateLimited('costly')
  @ApiOperation({
    summary: 'Answer "yes"/"no" safely: resolves the only pending approval of the thread',
    description:
      'With several pending: 409 `ambiguous` listing up to 4, and nothing is resolved. Decides on the thread as of `?minPosition=`, else as of everything recorded before the request.',
  })
  @ApiRoute({
    body: DecisionRequest,
    ok: { status: 201, description: 'The only pending approval, resolved', type: Resolution },
    errors: [400, 403, 404, 409, 414, 429, 503],
  })
  @ApiMinPosition()
  answer(
    @Req() request: FastifyRequest,
    @Param('threadId') threadId: string,
    @Body() body: unknown,
    @Query('minPosition') minPosition?: string,
  ) {
    const min =
      minPosition === undefined
        ? undefined
        : queryInt('minPosition', minPosition, 0, 0, Number.MAX_SAFE_INTEGER);
    return this.commands.answer(clientCaller(request), threadId, body, min);
  }

  @Post('receipts/consume')
  @HttpCode(200)
  @RequireScope('append')
  // A plain call: the runtime's check before it acts, not a command that starts or redirects work.
  @RateLimited('call')
  @ApiOperation({
    summary: 'Consume a one-use receipt: `{ receipt, toolName, input }`',
    description:
      'Verifies the signature and expiry, then re-checks what the receipt is bound to, as it is now: the tool, ' +
      'tool call (`toolCallId`, optional) and input digest, the run still going, ' +
      'the approval not superseded, its tool call not finished, and the policy still allowing the tool; any of those failing is 403 ' +
      '`receipt_refused` with its `reason`. Then it is consumed once across all replicas (append to the ' +
      "tenant's `receipt-<tenant>-<id>` with `no_stream`). Any later use: 409 `receipt_already_used`.",
  })
  @ApiRoute({
    body: ConsumeRequest,
    ok: { status: 200, description: 'Consumed, once', type: ConsumeResponse },
    errors: [400, 403, 404, 409, 429, 503],
  })
  consume(@Req() request: FastifyRequest, @Body() body: unknown) {
    return this.commands.consume(clientCaller(request), body);
  }
}
