#!/usr/bin/env node
// `npx lunanexa-agent …` in a checkout: runs the agent's TypeScript source through tsx, so a fresh clone needs
// no build step, and a dist/ bundle left from an older build can never stand in for the code beside it. Nodes
// run the single-file bundle (`npm run build`) instead, which needs neither this file nor tsx.
import { register } from 'tsx/esm/api';

register();
await import('../agent/main.ts');
