import type { Reporter, TestModule } from 'vitest/node';

type Failure = { name?: string; message?: string; stack?: string; type?: string };

const firstLines = (text: string | undefined, n: number) => (text ?? '').split('\n').slice(0, n).join('\n    ');

/**
 * Prints, as the very last lines of a run, what failed: each failed test with its first error, and each unhandled
 * error with its type, message and first frames. CI keeps the tail of a run's output; the default reporter prints
 * the details far above it, where a long suite's tail no longer reaches.
 */
export default class FailureDigest implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>) {
    const lines: string[] = [];
    for (const module of testModules) {
      for (const test of module.children.allTests('failed')) {
        const error = test.result().errors?.[0] as Failure | undefined;
        lines.push(`failed: ${module.moduleId.replace(`${process.cwd()}/`, '')} > ${test.fullName}: ${firstLines(error?.message, 2)}`);
      }
    }
    for (const raw of unhandledErrors) {
      const error = raw as Failure;
      lines.push(`unhandled ${error.type ?? 'error'}: ${error.name ?? 'Error'}: ${firstLines(error.message, 3)}\n    ${firstLines(error.stack, 8)}`);
    }
    if (lines.length === 0) return;
    process.stdout.write(`\nFailure digest (${lines.length}):\n${lines.map((l) => `- ${l}`).join('\n')}\n`);
  }
}
