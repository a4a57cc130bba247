import { z } from 'zod';

/**
 * Why one row produced no answer, as OpenAI's batch output writes it (`error` of an output line). A row's error
 * fails that row only: the job goes on with the next.
 */
export const RowError = z.object({ code: z.string().min(1), message: z.string() });
export type RowError = z.infer<typeof RowError>;

/** The first issue of a refused value, where it lies and why, short enough for an output line. */
export function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return 'invalid';
  return issue.path.length ? `${issue.path.map(String).join('.')}: ${issue.message}` : issue.message;
}

/** A value of the user's, quoted in a message: cut, so that an error line never repeats a huge input. */
export function quote(value: unknown): string {
  const text = typeof value === 'string' ? JSON.stringify(value) : String(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
