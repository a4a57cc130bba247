#!/usr/bin/env node
// The simulator's stand-in for a run's job (docs/runs.md): prints where in its run it is, sleeps, exits with the
// code it is given. Nothing else: its flags cannot make it run other code, so a node's local policy may allow it by
// its digest alone (functions/hosts/dev/fleet.ts writeSimPolicy).
const flag = (name, fallback) => {
  const at = process.argv.indexOf(name);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
};
const sleepMs = flag('--sleep-ms', 1000);
const exitCode = flag('--exit-code', 0);
const env = ['RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES'].map((name) => `${name}=${process.env[name] ?? ''}`);
console.log(`sim-job uid=${process.getuid?.()} ${env.join(' ')}`);
setTimeout(() => {
  console.log(`sim-job exiting with ${exitCode}`);
  process.exit(exitCode);
}, sleepMs);
