import type { Dispatcher } from 'undici';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import type { SignedClient } from '../link/http.js';
import type { Uplink } from '../link/uplink.js';
import type { InvokeTarget } from '../supervisor/supervisor.js';
import { callRuntime, produceFrames } from './frames.js';
import { createLoadTally } from './load.js';
import { afterIo, createFramesUpload } from './upload.js';
import { SendWindow } from './window.js';

export interface InvocationRunnerOptions {
  baseUrl: string;
  dispatcher: Dispatcher;
  signedHeaders: SignedClient['signedHeaders'];
  /** The machine's uplink: invocations use it while it is confirmed, the per-invocation upload otherwise. */
  uplink: Uplink;
  /** The runtime an invocation goes to, or why none takes it. */
  runtime: (assignmentId: string) => InvokeTarget;
  /** A runtime's queued or active count changed; `edge`: one of them went from 0 or to 0 (worth a report at once). */
  onLoadChange: (assignmentId: string, edge: boolean) => void;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/**
 * Runs invocations sent on the stream: calls the runtime through its adapter and sends the response back as
 * binary frames (`shared/frame-codec.ts`) on the machine's uplink, or on one upload per invocation when no uplink
 * is confirmed (both resumable by offset), honouring cancel and the deadline.
 * Node streams and `undici.request` throughout: the web-stream layer of `fetch` cost more than the relay's
 * own work on this path.
 */
export function createInvocationRunner(opts: InvocationRunnerOptions) {
  const running = new Map<string, AbortController>();
  /** The windows of paced invocations, credited from the stream. */
  const windows = new Map<string, SendWindow>();
  const tally = createLoadTally(opts.onLoadChange);
  const upload = createFramesUpload(opts);

  /** Sends an invocation's frames up the uplink, as they come, under its backpressure. */
  async function viaUplink(invocationId: string, frames: AsyncIterable<Frame>): Promise<void> {
    for await (const frame of frames) await opts.uplink.send(invocationId, frame);
  }

  return {
    run(invoke: Invoke): void {
      const controller = new AbortController();
      running.set(invoke.invocationId, controller);
      const timer = setTimeout(() => controller.abort('deadline_exceeded'), Math.max(0, invoke.deadline - Date.now()));
      const target = opts.runtime(invoke.assignmentId);
      const tracked = target.ok ? tally.track(invoke) : null;
      const calling = callRuntime(invoke, target, controller.signal, () => tracked?.answered());
      const window = invoke.window ? new SendWindow(invoke.window) : null;
      if (window) windows.set(invoke.invocationId, window);
      const frames = produceFrames(invoke, controller.signal, calling, window);
      // The runtime call is the critical path: its request reaches the socket before the upload is signed and
      // opened (the upload only has to be open by the time the runtime answers). The uplink is open already.
      const uploading = opts.uplink.usable() ? viaUplink(invoke.invocationId, frames) : afterIo().then(() => upload(invoke.invocationId, frames));
      void uploading
        .catch((error: unknown) => {
          // The control plane no longer wants these frames (cancelled, finished elsewhere): stop the runtime call.
          controller.abort('upload_refused');
          opts.log('frames upload failed', { invocationId: invoke.invocationId, error: error instanceof Error ? error.message : String(error) });
        })
        .finally(() => {
          clearTimeout(timer);
          running.delete(invoke.invocationId);
          windows.delete(invoke.invocationId);
          // The upload settled: the runtime's answer was relayed to its end, or the call was aborted.
          tracked?.done();
        });
    },
    /** The link holder's credit: per invocation, what it passed on of the answer so far. */
    credit(credits: Record<string, number>): void {
      for (const [invocationId, total] of Object.entries(credits)) windows.get(invocationId)?.credit(total);
    },
    cancel(invocationId: string, reason: string): void {
      running.get(invocationId)?.abort(reason);
    },
    /** Aborts every invocation in flight (their stream is gone, and with it whoever waited for them). */
    abortAll(reason: string): void {
      for (const controller of running.values()) controller.abort(reason);
    },
    active(): number {
      return running.size;
    },
    load: tally.load,
  };
}
export type InvocationRunner = ReturnType<typeof createInvocationRunner>;
