import { describe, expect, it } from 'vitest';
import { AgentPolicy, policyRefusal } from '../../agent/policy.js';
import { renderEnv } from '../../functions/core/registry/render.js';
import { checkTemplate } from '../../functions/core/registry/template-check.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { RuntimeTemplateSpec } from '../../shared/contracts/runtime-template.js';

/**
 * No template may let a deployment set a variable that makes the runtime load or run code of the caller's choosing
 * (the second security review's L11): the control plane refuses it when a template is registered and when a
 * deployment renders, and the agent refuses it at launch even where its local policy lists it.
 */

const spec = (env: string[]) =>
  RuntimeTemplateSpec.parse({
    executable: '/opt/vllm/bin/vllm',
    executableSha256: 'b'.repeat(64),
    args: ['serve', '{model_path}', '--port', '{port}'],
    params: {},
    env,
  });

const assignment = (env: Record<string, string>): Assignment => ({
  assignmentId: 'asg_env',
  deploymentId: 'dep_env',
  deploymentName: 'env',
  model: 'env',
  deploymentGeneration: 1,
  runtime: {
    kind: 'template',
    template: 'vllm',
    executable: '/opt/vllm/bin/vllm',
    executableSha256: 'a'.repeat(64),
    args: [],
    env,
    healthPath: '/health',
  },
  artifact: null,
  restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
  resources: { gpus: 0, memoryMiB: 1 },
  startup: { timeoutMs: 60_000, probeIntervalMs: 500, failureThreshold: 3 },
  templateHash: 'h',
});

/** A node whose admin listed `name` for the template. */
const nodeAllowing = (name: string) => AgentPolicy.parse({ templates: { vllm: { executable: '/opt/vllm/bin/vllm', env: [name] } } });

/** Named by the review, accepted by the control plane before this fix. */
const NAMED = ['OPENSSL_CONF', 'OPENSSL_MODULES', 'NCCL_NET_PLUGIN', 'GIT_SSH_COMMAND', 'PYTHONWARNINGS', 'PYTHONPYCACHEPREFIX', 'GLIBC_TUNABLES'];

/** Members of the families those belong to. */
const FAMILIES = [
  // OpenSSL configuration, providers and engines
  'OPENSSL_ENGINES',
  'OPENSSL_CONF_INCLUDE',
  // NCCL, UCX and other plugin loaders
  'NCCL_TUNER_PLUGIN',
  'NCCL_PROFILER_PLUGIN',
  'NCCL_NET_PLUGIN_LIB',
  'NCCL_CONF_FILE',
  'UCX_MODULE_DIR',
  'QT_PLUGIN_PATH',
  'GST_PLUGIN_PATH',
  'VLLM_PLUGINS',
  // git's commands and hooks
  'GIT_SSH',
  'GIT_ASKPASS',
  'GIT_EXEC_PATH',
  'GIT_CONFIG_GLOBAL',
  'GIT_CONFIG_COUNT',
  'GIT_PROXY_COMMAND',
  'GIT_EXTERNAL_DIFF',
  'SSH_ASKPASS',
  // Python's startup, warnings and paths
  'PYTHONPATH',
  'PYTHONHOME',
  'PYTHONSTARTUP',
  'PYTHONUSERBASE',
  'PYTHONBREAKPOINT',
  'PYTHONPLATLIBDIR',
  'PYTHONEXECUTABLE',
  'PYTHONINSPECT',
  // the dynamic loader and the C library
  'LD_PRELOAD',
  'LD_AUDIT',
  'LD_LIBRARY_PATH',
  'DYLD_INSERT_LIBRARIES',
  'GCONV_PATH',
  'HOSTALIASES',
  'LOCPATH',
  'NLSPATH',
  'CUDA_INJECTION64_PATH',
  'NVTX_INJECTION64_PATH',
  // other interpreters and virtual machines
  'NODE_OPTIONS',
  'NODE_PATH',
  'PERL5OPT',
  'PERL5LIB',
  'PERL5DB',
  'RUBYOPT',
  'RUBYLIB',
  'JAVA_TOOL_OPTIONS',
  'JDK_JAVA_OPTIONS',
  'CLASSPATH',
  'LUA_INIT',
  'LUA_CPATH',
  // shells and the commands programs run for you
  'BASH_ENV',
  'BASH_LOADABLES_PATH',
  'ENV',
  'IFS',
  'SHELLOPTS',
  'PROMPT_COMMAND',
  'PS4',
  'ZDOTDIR',
  'EDITOR',
  'PAGER',
  'LESSOPEN',
  'CC',
];

/** What templates use and must keep using. */
const ALLOWED = [
  'HF_TOKEN',
  'HF_HOME',
  'HF_HUB_OFFLINE',
  'VLLM_LOGGING_LEVEL',
  'NCCL_DEBUG',
  'NCCL_IB_DISABLE',
  'PYTHONUNBUFFERED',
  'PYTHONHASHSEED',
  'OMP_NUM_THREADS',
  'TOKENIZERS_PARALLELISM',
];

describe('the template environment deny-list', () => {
  it.each([...NAMED, ...FAMILIES])('the control plane refuses a template that lists %s', (name) => {
    expect(checkTemplate(spec([name]))).toEqual([
      { path: 'env.0', message: `environment variable ${name} cannot be allowed: it makes the loader, an interpreter or a shell run other code` },
    ]);
  });

  it('keeps the names templates use', () => {
    expect(checkTemplate(spec(ALLOWED))).toEqual([]);
  });

  it('a template stored before the rule no longer renders a deployment setting one of them', () => {
    expect(renderEnv(spec(['HF_TOKEN', 'PYTHONWARNINGS']), { HF_TOKEN: { value: 'x' }, PYTHONWARNINGS: { value: 'ignore::x.y.Z' } })).toEqual({
      ok: false,
      issues: [
        {
          path: 'runtime.env.PYTHONWARNINGS',
          message: 'environment variable PYTHONWARNINGS cannot be set: it makes the loader, an interpreter or a shell run other code',
        },
      ],
    });
    expect(renderEnv(spec(['HF_TOKEN', 'PYTHONWARNINGS']), { HF_TOKEN: { value: 'x' } })).toMatchObject({ ok: true });
  });

  it.each([...NAMED, ...FAMILIES])('the agent refuses at launch an assignment setting %s, even when its local policy lists it', (name) => {
    expect(policyRefusal(nodeAllowing(name), assignment({ [name]: '/tmp/x' }))).toBe(
      `template "vllm" may not set environment variable ${name}: it makes the loader, an interpreter or a shell run other code`,
    );
  });

  it('the agent launches the names templates use', () => {
    for (const name of ALLOWED) expect(policyRefusal(nodeAllowing(name), assignment({ [name]: '1' }))).toBeNull();
  });

  it('the agent and the control plane refuse the same names', () => {
    const names = [
      ...NAMED,
      ...FAMILIES,
      ...ALLOWED,
      'HTTPS_PROXY',
      'SSL_CERT_FILE',
      'TMPDIR',
      'LUNANEXA_X',
      'NCCL_SOCKET_IFNAME',
      'MY_PLUGINLESS',
      'GITHUB_TOKEN',
    ];
    for (const name of names) {
      const controlPlane = checkTemplate(spec([name])).length > 0;
      const agent = policyRefusal(nodeAllowing(name), assignment({ [name]: '1' })) !== null;
      expect({ name, agent }).toEqual({ name, agent: controlPlane });
    }
  });
});
