/**
 * Strict data schemas of the v1 catalogue (docs/events.md is generated from them).
 * Every field is declared; validation forbids the rest. These are the only schemas on the
 * write path: tests and production validate through the same classes.
 */
import 'reflect-metadata';
import { Type } from 'class-transformer';
import {
  Allow,
  ArrayMaxSize,
  IsArray,
  IsBoolean,
  IsIn,
  IsInt,
  IsObject,
  IsOptional,
  IsString,
  Matches,
  MaxLength,
  Min,
  ValidateIf,
  ValidateNested,
  ValidatorConstraint,
  ValidatorConstraintInterface,
  Validate,
  ValidateBy,
  buildMessage,
  type ValidationArguments,
} from 'class-validator';
import {
  DECISIONS,
  END_STATUSES,
  MESSAGE_ROLES,
  RUN_SOURCES,
  TRANSCRIPT_ROLES,
  type Decision,
  type EndStatus,
  type MessageRole,
  type RunSource,
  type TranscriptRole,
} from './event-types';

/** Ids that appear in URL paths (threads) are kept to a conservative, printable alphabet. */
export const PATH_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
export const MAX_ID_LENGTH = 256;
const MAX_LABEL_LENGTH = 1024;

/**
 * A string with something visible in it: `""`, `" \t "` and a zero-width space alike are
 * refused (whitespace and Unicode format characters, `\p{Cf}`, show nothing). A blank id,
 * name or error text reaches a UI as nothing at all.
 */
export const NOT_BLANK_PATTERN = /[^\s\p{Cf}]/u;

export function NotBlank(
  message: string | ((args: ValidationArguments) => string) = '$property must not be blank',
): PropertyDecorator {
  return Matches(NOT_BLANK_PATTERN, { message });
}

/** UTF-16 with every surrogate in a pair: text any store and any client reads back as sent. */
export const WELL_FORMED_PATTERN = /^(?:[^\ud800-\udfff]|[\ud800-\udbff][\udc00-\udfff])*$/;

/**
 * No lone surrogate: the log keeps one (JSON escapes it), but a read model's text column
 * turns it into U+FFFD, so `m\ud800` and `m\ud801` would become one message id twice.
 */
export function WellFormed(): PropertyDecorator {
  return ValidateBy({
    name: 'isWellFormed',
    validator: {
      validate: (value) => typeof value !== 'string' || WELL_FORMED_PATTERN.test(value),
      defaultMessage: buildMessage(
        (each) => `${each}$property must be well-formed Unicode (no lone surrogate)`,
      ),
    },
  });
}

function NonBlankId(): PropertyDecorator {
  return (target, key) => {
    IsString()(target, key);
    NotBlank()(target, key);
    MaxLength(MAX_ID_LENGTH)(target, key);
    WellFormed()(target, key);
  };
}

/**
 * Stamped into `data.truncation` of an event that was reduced to fit EVENT_MAX_BYTES, so a
 * reduced record can never be mistaken for a faithful one. Part of every schema: a reduced
 * event passes the same strict validator as any other (docs/architecture.md, "Why it exists").
 */
export class TruncationStamp {
  @IsInt()
  @Min(0)
  originalByteLength!: number;

  @IsInt()
  @Min(0)
  limitBytes!: number;

  @IsInt()
  @Min(0)
  omittedMessageCount!: number;

  @IsInt()
  @Min(0)
  clampedParts!: number;
}

/** Every event's data may carry the truncation stamp. */
abstract class EventData {
  @IsOptional()
  @IsObject()
  @ValidateNested()
  @Type(() => TruncationStamp)
  truncation?: TruncationStamp;
}

export class RunStartedData extends EventData {
  @IsString()
  @Matches(PATH_ID_PATTERN, { message: 'threadId must match $constraint1' })
  threadId!: string;

  @IsString()
  @NotBlank()
  @MaxLength(MAX_LABEL_LENGTH)
  agent!: string;

  @IsIn(RUN_SOURCES)
  source!: RunSource;

  @IsOptional()
  @IsString()
  @MaxLength(MAX_LABEL_LENGTH)
  title?: string;

  @IsOptional()
  @IsString()
  goal?: string;
}

export class RunFinishedData extends EventData {
  @IsIn(END_STATUSES)
  status!: EndStatus;

  @IsOptional()
  @IsString()
  reason?: string;

  @IsOptional()
  @IsString()
  errorText?: string;
}

export class TurnStartedData extends EventData {
  @NonBlankId()
  turnId!: string;

  @IsIn(RUN_SOURCES)
  source!: RunSource;
}

export class TurnFinishedData extends EventData {
  @NonBlankId()
  turnId!: string;

  @IsIn(END_STATUSES)
  status!: EndStatus;
}

export class TurnSteeredData extends EventData {
  @NonBlankId()
  turnId!: string;

  @IsString()
  @NotBlank()
  instruction!: string;
}

export class MessageAddedData extends EventData {
  @NonBlankId()
  messageId!: string;

  @IsIn(MESSAGE_ROLES)
  role!: MessageRole;

  @IsString()
  text!: string;
}

export class TranscriptAddedData extends EventData {
  @NonBlankId()
  utteranceId!: string;

  @IsIn(TRANSCRIPT_ROLES)
  role!: TranscriptRole;

  @IsString()
  @NotBlank()
  text!: string;
}

/** A model message's content: a string, or parts that each name their `type`. */
@ValidatorConstraint({ name: 'isMessageContent' })
class MessageContentConstraint implements ValidatorConstraintInterface {
  validate(value: unknown): boolean {
    if (typeof value === 'string') return true;
    if (!Array.isArray(value)) return false;
    return value.every(
      (part) =>
        part !== null &&
        typeof part === 'object' &&
        !Array.isArray(part) &&
        typeof (part as { type?: unknown }).type === 'string' &&
        ((part as { type: string }).type !== 'text' ||
          typeof (part as { text?: unknown }).text === 'string'),
    );
  }

  defaultMessage(): string {
    return 'content must be a string or an array of parts, each an object with a string type (text parts with a string text)';
  }
}

export const MODEL_MESSAGE_ROLES = ['system', 'user', 'assistant', 'tool'] as const;

export class ModelMessage {
  @IsIn(MODEL_MESSAGE_ROLES)
  role!: (typeof MODEL_MESSAGE_ROLES)[number];

  @Validate(MessageContentConstraint)
  content!: string | ModelMessagePart[];

  @IsOptional()
  @IsString()
  name?: string;

  @IsOptional()
  @IsString()
  toolCallId?: string;
}

export interface ModelMessagePart {
  type: string;
  text?: string;
  [key: string]: unknown;
}

export class ModelCallData extends EventData {
  @NonBlankId()
  callId!: string;

  @IsString()
  @NotBlank()
  @MaxLength(MAX_LABEL_LENGTH)
  model!: string;

  @IsArray()
  @ValidateNested({ each: true })
  @Type(() => ModelMessage)
  messages!: ModelMessage[];

  @IsOptional()
  @IsArray()
  @IsObject({ each: true })
  tools?: Record<string, unknown>[];
}

export class ToolStartedData extends EventData {
  @NonBlankId()
  toolCallId!: string;

  @IsString()
  @NotBlank()
  @MaxLength(MAX_LABEL_LENGTH)
  toolName!: string;

  @IsObject()
  input!: Record<string, unknown>;
}

/**
 * A failed call's errorText that is absent (null, blank) is required; any other problem is
 * named as it is.
 */
function errorTextRule(otherwise: string): (args: ValidationArguments) => string {
  return (args) => {
    const value: unknown = args.value;
    const absent =
      value === undefined ||
      value === null ||
      (typeof value === 'string' && !NOT_BLANK_PATTERN.test(value));
    return (args.object as ToolFinishedData).failed === true && absent
      ? 'errorText is required when failed is true'
      : otherwise;
  };
}

export class ToolFinishedData extends EventData {
  @NonBlankId()
  toolCallId!: string;

  @IsOptional()
  @IsString()
  @NotBlank()
  @MaxLength(MAX_LABEL_LENGTH)
  toolName?: string;

  @Allow()
  output?: unknown;

  @IsBoolean()
  failed!: boolean;

  // Optional unless the call failed; sent as null it is absent, as every optional field is.
  @ValidateIf((o: ToolFinishedData) => o.failed === true || o.errorText != null)
  @IsString({ message: errorTextRule('errorText must be a string') })
  @NotBlank(errorTextRule('errorText must not be blank'))
  errorText?: string;
}

export class ApprovalRequestedData extends EventData {
  @NonBlankId()
  approvalId!: string;

  @NonBlankId()
  toolCallId!: string;

  @IsString()
  @NotBlank()
  @MaxLength(MAX_LABEL_LENGTH)
  toolName!: string;

  @IsObject()
  input!: Record<string, unknown>;

  @IsOptional()
  @IsString()
  question?: string;

  @IsOptional()
  @IsArray()
  @ArrayMaxSize(64)
  @IsString({ each: true })
  options?: string[];
}

export class ApprovalResolvedData extends EventData {
  @NonBlankId()
  approvalId!: string;

  @IsIn(DECISIONS)
  decision!: Decision;

  /** The receipt's id (`rid`); the bearer token itself goes to the resolver only. */
  @IsString()
  @NotBlank()
  receipt!: string;

  /** SHA-256 of the bearer receipt: proves which token was issued without holding it. */
  @IsOptional()
  @IsString()
  @Matches(/^[0-9a-f]{64}$/)
  receiptDigest?: string;

  @IsOptional()
  @IsString()
  decidedBy?: string;

  @IsOptional()
  @IsBoolean()
  downgraded?: boolean;

  /** SHA-256 of the policy file the decision was evaluated against. */
  @IsOptional()
  @IsString()
  policyRevision?: string;
}

export class AppendRejectedData extends EventData {
  @IsString()
  @NotBlank()
  reason!: string;

  @IsInt()
  @Min(0)
  declaredBytes!: number;

  @IsOptional()
  @IsInt()
  @Min(0)
  limitBytes?: number;

  /** Refusals this one marker stands for (coalesced per key, run and window); absent: one. */
  @IsOptional()
  @IsInt()
  @Min(2)
  count?: number;
}
