#!/usr/bin/env node
// `npx lunanexa …` in a checkout: runs the CLI's TypeScript source through tsx, so a fresh clone needs no build.
import { register } from 'tsx/esm/api';

register();
await import('../cli/main.ts');
