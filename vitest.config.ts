import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration and e2e suites spawn real processes; two cores do not profit from more.
    maxWorkers: 2,
    reporters: ['default'],
  },
});
