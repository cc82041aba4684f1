/** The binding bodies, strict like every command body. */
import { IsString, Matches, MaxLength, ValidateIf } from 'class-validator';
import { PATH_ID_PATTERN, NotBlank, WellFormed } from '@runledger/domain';

/** A channel's name: `telegram`, `slack`, `whatsapp`… */
export const CHANNEL_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const CHANNEL_FIELD_MAX = 256;

/** Which conversation: (channel, account, chat, topic?). */
export class ChannelKeyBody {
  @IsString()
  @Matches(CHANNEL_PATTERN, { message: `channel must match ${CHANNEL_PATTERN.source}` })
  channel!: string;

  @IsString()
  @NotBlank()
  @WellFormed()
  @MaxLength(CHANNEL_FIELD_MAX)
  account!: string;

  @IsString()
  @NotBlank()
  @WellFormed()
  @MaxLength(CHANNEL_FIELD_MAX)
  chat!: string;

  /** Optional, but not null or blank: a topic is named or absent. */
  @ValidateIf((_body, value) => value !== undefined)
  @IsString()
  @NotBlank()
  @WellFormed()
  @MaxLength(CHANNEL_FIELD_MAX)
  topic?: string;
}

export class BindingBody extends ChannelKeyBody {
  /** Bind to this existing thread instead of creating one (several channels, one thread). */
  @ValidateIf((_body, value) => value !== undefined)
  @IsString()
  @Matches(PATH_ID_PATTERN, { message: `threadId must match ${PATH_ID_PATTERN.source}` })
  threadId?: string;
}
