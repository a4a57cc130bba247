import { z } from 'zod';

/**
 * Where a job's runner runs (docs/jobs.md, "Backends"): `local`, a process beside the control plane; `slurm`, a
 * batch job of the site's Slurm; `agent`, a worker on one of the fleet's nodes, through a job template its local
 * policy allows. Here rather than in shared/batch/ so that contracts (a swarm's job defaults) can name it:
 * shared/batch/ imports contracts, never the other way.
 */
export const JobBackend = z.enum(['local', 'slurm', 'agent']);
export type JobBackend = z.infer<typeof JobBackend>;
