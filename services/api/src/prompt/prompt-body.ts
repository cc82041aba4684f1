/** The prompt's body, strict like every command body. */
import { Allow, IsIn, IsString, MaxLength, ValidateIf } from 'class-validator';
import {
  MAX_ID_LENGTH,
  RUN_SOURCES,
  type RunSource,
  NotBlank,
  WellFormed,
} from '@runledger/domain';

/** Longest prompt text, in characters: a chat message, not a document upload. */
export const PROMPT_TEXT_MAX = 32_000;

export class PromptBody {
  @IsString()
  @NotBlank()
  @MaxLength(PROMPT_TEXT_MAX)
  text!: string;

  /** Where the words came from; default: the binding's channel when it is a run source, else `api`. */
  @ValidateIf((_body, value) => value !== undefined)
  @IsIn(RUN_SOURCES)
  source?: RunSource;

  /** The agent of a run the prompt starts; default: the thread's last run's agent, else `assistant`. */
  @ValidateIf((_body, value) => value !== undefined)
  @IsString()
  @NotBlank()
  @MaxLength(128)
  agent?: string;

  /**
   * The turn's id; default: a fresh one. A client that names it can tell, after a lost
   * answer, whether its retry was refused because its own turn is the active one.
   */
  @ValidateIf((_body, value) => value !== undefined)
  @IsString()
  @NotBlank()
  @MaxLength(MAX_ID_LENGTH)
  // As turn.started's own rule: a bad id is the client's 400, not the server event's 500.
  @WellFormed()
  turnId?: string;

  /** The channel conversation this prompt came through: `{ channel, account, chat, topic? }`. */
  @Allow()
  binding?: unknown;
}
