const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** True while any process of the group that `pid` leads exists (a runtime's workers can outlive its leader). */
export function groupAlive(pid: number): boolean {
  return pidAlive(-pid);
}

/** SIGTERM to the process group `pid` leads, SIGKILL after `graceMs` if any of it is left; resolves once signalled. */
export async function stopGroup(pid: number, graceMs: number): Promise<void> {
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pid, sig);
    } catch {
      // Already gone.
    }
  };
  signal('SIGTERM');
  for (let waited = 0; waited < graceMs && groupAlive(pid); waited += 50) await sleep(50);
  if (groupAlive(pid)) signal('SIGKILL');
}
