import type { MachineView } from '../../shared/contracts/machine.js';
import type { Api } from './api.js';
import { sleep } from './measure.js';

/** What a poll saw of one machine. */
export interface MachineSight {
  name: string;
  state: MachineView['state'];
  attached: boolean;
  routable: boolean;
  lastHeartbeatAt: string | null;
}

/** One poll of `GET /api/v1/machines`: when it was sent, and what it answered (null: no answer). */
export interface Poll {
  at: number;
  machines: MachineSight[] | null;
}

const sight = (m: MachineView): MachineSight => ({
  name: m.name,
  state: m.state,
  attached: m.streamAttached,
  routable: m.runtimes.some((r) => r.routable),
  lastHeartbeatAt: m.lastHeartbeatAt,
});

/**
 * Polls the machine list (every page) every `intervalMs` for as long as a fault and its healing last, keeping
 * what each poll saw, so that a scenario can tell when each machine was first seen stale, down, unroutable
 * or back. Polls that fail (the store is away) are kept as such.
 */
export function watchMachines(api: Api, intervalMs: number) {
  const polls: Poll[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const at = performance.now();
      polls.push({
        at,
        machines: await api.machines().then(
          (list) => list.map(sight),
          () => null,
        ),
      });
      await sleep(Math.max(0, intervalMs - (performance.now() - at)));
    }
  })();
  return {
    polls,
    async stop(): Promise<Poll[]> {
      running = false;
      await loop;
      return polls;
    },
  };
}

/** The first poll sent at or after `fromMs` in which `machine` matched `test`. */
export function firstSeen(polls: readonly Poll[], fromMs: number, machine: string, test: (m: MachineSight) => boolean): Poll | null {
  return polls.find((p) => p.at >= fromMs && p.machines?.some((m) => m.name === machine && test(m))) ?? null;
}

/** Names of the machines that any poll from `fromMs` on showed in `state`. */
export function everIn(polls: readonly Poll[], fromMs: number, state: MachineView['state']): Set<string> {
  const names = new Set<string>();
  for (const p of polls) if (p.at >= fromMs) for (const m of p.machines ?? []) if (m.state === state) names.add(m.name);
  return names;
}

/** Liveness states `machine` went through from `fromMs` on, in order, each once: "ready -> stale -> down -> ready". */
export function statePath(polls: readonly Poll[], fromMs: number, machine: string): string {
  const path: string[] = [];
  for (const p of polls) {
    const m = p.at >= fromMs ? p.machines?.find((x) => x.name === machine) : undefined;
    if (m && path.at(-1) !== m.state) path.push(m.state);
  }
  return path.join(' -> ');
}
