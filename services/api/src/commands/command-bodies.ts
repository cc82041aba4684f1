/** The command bodies, strict like every event schema. */
import { Allow, IsIn, IsString, MaxLength, ValidateIf } from 'class-validator';
import { DECISIONS, type Decision, NotBlank } from '@runledger/domain';
import { PROMPT_TEXT_MAX } from '../prompt/prompt-body';

export class SteerBody {
  @IsString()
  @NotBlank()
  @MaxLength(256)
  expectedTurnId!: string;

  /** A message to the agent, held to a prompt's length: unbounded, it reached the log whole. */
  @IsString()
  @NotBlank()
  @MaxLength(PROMPT_TEXT_MAX)
  instruction!: string;
}

export class StopBody {
  /** Optional, like `run.finished`'s own reason; but not null (IsOptional would let null by). */
  @ValidateIf((_body, value) => value !== undefined)
  @IsString()
  @NotBlank()
  @MaxLength(4096)
  reason?: string;
}

export class DecisionBody {
  @IsIn(DECISIONS)
  decision!: Decision;
}

export class ConsumeBody {
  @IsString()
  @NotBlank()
  receipt!: string;

  @IsString()
  @NotBlank()
  @MaxLength(1024)
  toolName!: string;

  /** Optional: when given, it must be the tool call the receipt was issued for. */
  @ValidateIf((_body, value) => value !== undefined)
  @IsString()
  @NotBlank()
  @MaxLength(256)
  toolCallId?: string;

  @Allow()
  input!: unknown;
}
