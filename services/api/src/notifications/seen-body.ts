/** The seen cursor's body, strict like every command body. */
import { IsInt, Max, Min } from 'class-validator';

export class SeenBody {
  @IsInt()
  @Min(0)
  @Max(Number.MAX_SAFE_INTEGER)
  position!: number;
}
