import type { RuntimeTemplateSpec } from '../../../shared/contracts/runtime-template.js';
import { forbiddenEnvName } from './env-names.js';
import { compilePattern, isAgentPlaceholder, paramValueProblem, tokenizeArg, type RenderIssue } from './render.js';

/** `^...$` with the final `$` not escaped. */
function anchored(pattern: string): boolean {
  return pattern.startsWith('^') && /(^|[^\\])(\\\\)*\$$/.test(pattern);
}

/**
 * What is wrong with a template an admin registers (empty when nothing): every placeholder of its arguments is a
 * declared param or an agent placeholder, every param is used, string patterns compile and are anchored, defaults
 * satisfy their own type, flags stand alone, and the environment it allows cannot hijack the runtime. Pure.
 */
export function checkTemplate(spec: RuntimeTemplateSpec): RenderIssue[] {
  const issues: RenderIssue[] = [];
  if (/\/\.{0,2}\/|\/\.{1,2}$|\/$/.test(spec.executable)) {
    issues.push({ path: 'executable', message: 'executable must be a normalised absolute path (no "//", "/./", "/../" or trailing "/")' });
  }
  const used = new Set<string>();
  spec.args.forEach((arg, index) => {
    if (/[\u0000-\u001f\u007f]/.test(arg)) issues.push({ path: `args.${index}`, message: `argument ${index} contains a control character` });
    const tokens = tokenizeArg(arg);
    for (const token of tokens) {
      if (!('placeholder' in token)) continue;
      const name = token.placeholder;
      const param = spec.params[name];
      if (param) {
        used.add(name);
        if (param.type === 'boolean' && param.flag && tokens.length !== 1) {
          issues.push({ path: `args.${index}`, message: `the flag param {${name}} must be a whole argument on its own` });
        }
      } else if (!isAgentPlaceholder(name)) {
        issues.push({
          path: `args.${index}`,
          message: `unknown placeholder {${name}}: declare it in params, or use an agent placeholder (port, model_path, served_name, gpu_indices, instance)`,
        });
      }
    }
  });
  for (const [name, param] of Object.entries(spec.params)) {
    const path = `params.${name}`;
    if (isAgentPlaceholder(name)) {
      issues.push({ path, message: `param ${name} has the name of an agent placeholder, which only the agent fills` });
      continue;
    }
    if (!used.has(name)) issues.push({ path, message: `param ${name} is declared but no argument uses it` });
    if (param.type === 'string') {
      const compiled = compilePattern(param.pattern);
      if (typeof compiled === 'string') issues.push({ path: `${path}.pattern`, message: `pattern does not compile: ${compiled}` });
      else if (!anchored(param.pattern)) issues.push({ path: `${path}.pattern`, message: 'pattern must be anchored: start with ^ and end with $' });
    }
    if ((param.type === 'integer' || param.type === 'number') && param.min > param.max) {
      issues.push({ path, message: `param ${name}: min ${param.min} is above max ${param.max}` });
    }
    if (param.default !== undefined) {
      const problem = paramValueProblem(param, param.default);
      if (problem) issues.push({ path: `${path}.default`, message: `the default of ${name} ${problem}` });
    }
  }
  const seen = new Set<string>();
  spec.env.forEach((name, index) => {
    if (seen.has(name)) issues.push({ path: `env.${index}`, message: `environment variable ${name} is listed twice` });
    seen.add(name);
    const forbidden = forbiddenEnvName(name);
    if (forbidden) issues.push({ path: `env.${index}`, message: `environment variable ${name} cannot be allowed: ${forbidden}` });
  });
  return issues;
}
