import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration and e2e suites spawn real processes; two cores do not profit from more.
    maxWorkers: 2,
    // Test files of a worker share its module graph rather than each importing the whole app again: the suites keep no
    // state in modules they share (each starts its own planes and stores), and on two cores the imports alone cost
    // minutes of CI (measured: integration 301 s -> 214 s, unit 42 s -> 21 s).
    isolate: false,
    // The digest repeats what failed as the run's last lines, where CI's tail of the output keeps it.
    reporters: ['default', './test/reporters/failure-digest.ts'],
  },
});
