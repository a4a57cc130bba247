/**
 * `@lunanexa/sdk`: swarms (an endpoint and the jobs that use it) over the control plane's HTTP API (sdk/README.md).
 */
export { Swarm, SwarmJobHandle, JobError, type SwarmCommandInput, type SwarmConfigInput, type SwarmJobInput, type SwarmOptions } from './swarm.js';
export { DeploymentServing, type DeploymentInput, type Serving, type ServingState, type WaitOptions } from './serving.js';
export { LunaNexaError, type ConnectionOptions } from './http.js';
export type { SwarmView } from '../shared/contracts/swarm.js';
export type { JobView } from '../shared/batch/job.js';
