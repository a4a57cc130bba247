import { AGENT_PLACEHOLDERS, type EnvValue, type RuntimeTemplateSpec, type TemplateParam } from '../../../shared/contracts/runtime-template.js';
import { forbiddenEnvName } from './env-names.js';

/**
 * Rendering a runtime template with a deployment's parameters into the argv the agent runs. Pure.
 *
 * Why it is safe: the agent runs argv directly (no shell), a template argument stays one argv element whatever
 * a value holds, and every value is checked against its declared type first. A string value can hold no control
 * character (NUL, newline), cannot start with `-` (so an element it begins is never read as an option), and
 * cannot form a placeholder (the agent's `{port}`, `{model_path}`... are filled by the agent alone).
 */

export type ParamValue = string | number | boolean;

/** Why a template or a deployment's runtime is refused: `path` names the field, e.g. `runtime.params.dtype`. */
export interface RenderIssue {
  path: string;
  message: string;
}

export type Rendered<T> = { ok: true; value: T } | { ok: false; issues: RenderIssue[] };

/** Longest argv element the signed assignment carries (shared/contracts/desired.ts `TemplateRuntime`). */
const MAX_RENDERED_ARG = 4096;

const PLACEHOLDER = /\{([a-z][a-z0-9_]{0,62})\}/g;
const CONTROL = /[\u0000-\u001f\u007f]/;

export type ArgToken = { literal: string } | { placeholder: string };

/** An argument template split into literal text and `{name}` placeholders; other braces are literal text. */
export function tokenizeArg(arg: string): ArgToken[] {
  const tokens: ArgToken[] = [];
  let at = 0;
  for (const match of arg.matchAll(PLACEHOLDER)) {
    if (match.index > at) tokens.push({ literal: arg.slice(at, match.index) });
    tokens.push({ placeholder: match[1]! });
    at = match.index + match[0].length;
  }
  if (at < arg.length) tokens.push({ literal: arg.slice(at) });
  return tokens;
}

/** The placeholders of `text`, in order. */
export function placeholdersIn(text: string): string[] {
  return [...text.matchAll(PLACEHOLDER)].map((m) => m[1]!);
}

export function isAgentPlaceholder(name: string): boolean {
  return (AGENT_PLACEHOLDERS as readonly string[]).includes(name);
}

/**
 * The pattern as a regular expression that must match the whole value: wrapped in `^(?:...)$` as well, so a
 * top-level alternation (`^a|b$`) cannot match a part of the value. A string when it does not compile.
 */
export function compilePattern(pattern: string): RegExp | string {
  try {
    return new RegExp(`^(?:${pattern})$`, 'u');
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/** Why `value` is not a valid value of `param`, or null when it is. */
export function paramValueProblem(param: TemplateParam, value: ParamValue): string | null {
  switch (param.type) {
    case 'string': {
      if (typeof value !== 'string') return `must be a string, not ${typeof value}`;
      if (CONTROL.test(value)) return 'must not contain control characters (NUL, newline, tab...)';
      if (value.startsWith('-')) return 'must not start with "-" (it would read as an option)';
      if (placeholdersIn(value).length > 0) return `must not contain a placeholder such as {${placeholdersIn(value)[0]}}`;
      const pattern = compilePattern(param.pattern);
      if (typeof pattern === 'string') return `the template's pattern does not compile: ${pattern}`;
      if (!pattern.test(value)) return `must match ${param.pattern}`;
      return null;
    }
    case 'integer':
      if (typeof value !== 'number' || !Number.isSafeInteger(value)) return `must be an integer, not ${JSON.stringify(value)}`;
      if (value < param.min || value > param.max) return `must be between ${param.min} and ${param.max}, not ${value}`;
      return null;
    case 'number':
      if (typeof value !== 'number' || !Number.isFinite(value)) return `must be a number, not ${JSON.stringify(value)}`;
      if (value < param.min || value > param.max) return `must be between ${param.min} and ${param.max}, not ${value}`;
      return null;
    case 'boolean':
      return typeof value === 'boolean' ? null : `must be true or false, not ${JSON.stringify(value)}`;
  }
}

/** The values every declared parameter takes: given, else the default; unknown and missing ones are issues. */
function paramValues(template: RuntimeTemplateSpec, given: Record<string, ParamValue>): Rendered<Record<string, ParamValue>> {
  const issues: RenderIssue[] = [];
  const declared = Object.keys(template.params).sort();
  for (const name of Object.keys(given).sort()) {
    if (!Object.hasOwn(template.params, name)) {
      issues.push({
        path: `runtime.params.${name}`,
        message: `unknown param "${name}": the template declares ${declared.length ? declared.join(', ') : 'none'}`,
      });
    }
  }
  const values: Record<string, ParamValue> = {};
  for (const name of declared) {
    const param = template.params[name]!;
    const value = Object.hasOwn(given, name) ? given[name] : param.default;
    if (value === undefined) {
      issues.push({ path: `runtime.params.${name}`, message: `missing param "${name}" (the template gives it no default)` });
      continue;
    }
    const problem = paramValueProblem(param, value);
    if (problem) issues.push({ path: `runtime.params.${name}`, message: `param "${name}" ${problem}` });
    else values[name] = value;
  }
  return issues.length ? { ok: false, issues } : { ok: true, value: values };
}

/**
 * The argv (after the executable) of `template` with `given` filled in. Agent placeholders stay as they are for
 * the agent. A boolean parameter with a `flag` written as a whole argument becomes that flag, or no argument.
 */
export function renderArgs(template: RuntimeTemplateSpec, given: Record<string, ParamValue>): Rendered<string[]> {
  const values = paramValues(template, given);
  if (!values.ok) return values;
  const args: string[] = [];
  const issues: RenderIssue[] = [];
  template.args.forEach((arg, index) => {
    const tokens = tokenizeArg(arg);
    const only = tokens.length === 1 && 'placeholder' in tokens[0]! ? template.params[tokens[0].placeholder] : undefined;
    if (only?.type === 'boolean' && only.flag) {
      if (values.value[(tokens[0] as { placeholder: string }).placeholder] === true) args.push(only.flag);
      return;
    }
    let rendered = '';
    const agentPlaceholders: string[] = [];
    for (const token of tokens) {
      if ('literal' in token) rendered += token.literal;
      else if (Object.hasOwn(values.value, token.placeholder)) rendered += String(values.value[token.placeholder]);
      else if (isAgentPlaceholder(token.placeholder)) {
        rendered += `{${token.placeholder}}`;
        agentPlaceholders.push(token.placeholder);
      } else {
        issues.push({ path: `args.${index}`, message: `the template's placeholder {${token.placeholder}} is neither a param nor an agent placeholder` });
        return;
      }
    }
    // A value next to the template's own braces could still spell a placeholder (`{` + "port" + `}`): the agent
    // must find exactly the placeholders the template put there.
    if (placeholdersIn(rendered).join(',') !== agentPlaceholders.join(',')) {
      issues.push({ path: `args.${index}`, message: `argument ${index} would hold a placeholder no template wrote: ${rendered}` });
      return;
    }
    if (rendered.length > MAX_RENDERED_ARG) {
      issues.push({ path: `args.${index}`, message: `argument ${index} is ${rendered.length} characters once rendered (at most ${MAX_RENDERED_ARG})` });
      return;
    }
    args.push(rendered);
  });
  return issues.length ? { ok: false, issues } : { ok: true, value: args };
}

/** A deployment's environment split into plain values and runtime-secret references (env name -> secret name). */
export interface RenderedEnv {
  plain: Record<string, string>;
  secrets: Record<string, string>;
}

/**
 * Checks a deployment's environment against the names its template allows, and against the names no template may
 * allow (a template registered before a name joined them still lists it).
 */
export function renderEnv(template: RuntimeTemplateSpec, env: Record<string, EnvValue>): Rendered<RenderedEnv> {
  const issues: RenderIssue[] = [];
  const plain: Record<string, string> = {};
  const secrets: Record<string, string> = {};
  for (const name of Object.keys(env).sort()) {
    const value = env[name]!;
    const forbidden = forbiddenEnvName(name);
    if (!template.env.includes(name)) {
      const allowed = template.env.length ? template.env.join(', ') : 'none';
      issues.push({ path: `runtime.env.${name}`, message: `environment variable ${name} is not one the template allows (it allows ${allowed})` });
    } else if (forbidden) {
      issues.push({ path: `runtime.env.${name}`, message: `environment variable ${name} cannot be set: ${forbidden}` });
    } else if ('secret' in value) {
      secrets[name] = value.secret;
    } else if (value.value.includes('\0')) {
      issues.push({ path: `runtime.env.${name}`, message: `environment variable ${name} must not contain NUL` });
    } else {
      plain[name] = value.value;
    }
  }
  return issues.length ? { ok: false, issues } : { ok: true, value: { plain, secrets } };
}
