#!/usr/bin/env node
// A job's runner (docs/jobs.md, "The runner"), as a backend starts it: its TypeScript source through tsx, as the
// agent's bin does in a checkout.
import { register } from 'tsx/esm/api';

register();
await import('../runner/main.ts');
