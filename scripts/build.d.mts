/** Which bundle to build: dist/worker.mjs, dist/control-plane.mjs (migrations inside), dist/lunanexa-agent.mjs. */
export type BundleName = 'worker' | 'control-plane' | 'agent';

export interface BuiltBundle {
  path: string;
  bytes: number;
  gzipBytes: number;
}

export type BuildOutputs = Partial<Record<BundleName, BuiltBundle>>;

/** Builds the bundles (all three by default) and returns each one's path and size; throws on esbuild errors. */
export declare function build(opts?: { outDir?: string; only?: BundleName[] }): Promise<BuildOutputs>;
