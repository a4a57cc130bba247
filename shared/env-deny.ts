/**
 * Environment variables no runtime may receive (docs/security.md): each makes the dynamic loader, an interpreter,
 * a library or a shell load or run code of the caller's choosing, which would turn "a value" back into "a command".
 * The control plane refuses them in templates and deployments; the agent refuses them again at launch, whatever its
 * local policy lists, so that neither a template registered before a name joined the list nor a forged or
 * compromised control plane gets one through. A deny-list is never complete: the way forward is an allow-list of
 * known names per runtime.
 */
const CODE_LOADING_ENV = new Set([
  // shells
  'IFS',
  'ENV',
  'SHELLOPTS',
  'BASHOPTS',
  'PS0',
  'PS1',
  'PS2',
  'PS3',
  'PS4',
  'ZDOTDIR',
  // the C library and the dynamic loader
  'GCONV_PATH',
  'GLIBC_TUNABLES',
  'HOSTALIASES',
  'LOCPATH',
  'NLSPATH',
  'RESOLV_HOST_CONF',
  // Python's startup, warnings (which import modules) and paths
  'PYTHONPATH',
  'PYTHONHOME',
  'PYTHONSTARTUP',
  'PYTHONINSPECT',
  'PYTHONUSERBASE',
  'PYTHONBREAKPOINT',
  'PYTHONEXECUTABLE',
  'PYTHONWARNINGS',
  'PYTHONPYCACHEPREFIX',
  'PYTHONPLATLIBDIR',
  // other interpreters and virtual machines
  'NODE_OPTIONS',
  'NODE_PATH',
  'NODE_REPL_EXTERNAL_MODULE',
  'PERL5OPT',
  'PERL5LIB',
  'PERLLIB',
  'PERL5DB',
  'RUBYOPT',
  'RUBYLIB',
  'JAVA_TOOL_OPTIONS',
  '_JAVA_OPTIONS',
  'JDK_JAVA_OPTIONS',
  'CLASSPATH',
  'TCLLIBPATH',
  // NCCL's and UCX's configuration files and modules (plugins: below)
  'NCCL_CONF_FILE',
  'UCX_MODULE_DIR',
  // commands that programs run for you
  'EDITOR',
  'VISUAL',
  'PAGER',
  'LESSOPEN',
  'LESSCLOSE',
  'BROWSER',
  'CC',
  'CXX',
]);

/** Whole families: prefixes and name patterns. */
const CODE_LOADING_ENV_PATTERNS: readonly RegExp[] = [
  /^LD_/, // the dynamic loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT...
  /^DYLD_/, // macOS's
  /^BASH_/, // BASH_ENV, BASH_FUNC_*, BASH_LOADABLES_PATH
  /^OPENSSL_/, // OPENSSL_CONF, OPENSSL_MODULES (providers), OPENSSL_ENGINES
  /^GIT_/, // GIT_SSH_COMMAND, GIT_ASKPASS, GIT_EXEC_PATH, GIT_CONFIG_*...
  /^LUA_/, // LUA_INIT runs code, LUA_PATH and LUA_CPATH load it
  /_PLUGINS?(_|$)/, // NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN, QT_PLUGIN_PATH, VLLM_PLUGINS...
  /_COMMAND$/, // PROMPT_COMMAND, GIT_SSH_COMMAND and any other hook
  /_ASKPASS(_|$)/, // SSH_ASKPASS, SUDO_ASKPASS
  /PRELOAD/,
  /INJECTION(32|64)?_PATH$/, // CUDA_INJECTION64_PATH, NVTX_INJECTION64_PATH: a library loaded into the process
];

/** Why no runtime may receive `name`, or null. Pure. */
export function codeLoadingEnvReason(name: string): string | null {
  return CODE_LOADING_ENV.has(name) || CODE_LOADING_ENV_PATTERNS.some((pattern) => pattern.test(name))
    ? 'it makes the loader, an interpreter or a shell run other code'
    : null;
}
