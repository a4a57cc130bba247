import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { appendFile, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LogRing } from '../../agent/runtimes/log-ring.js';

const size = async (path: string) => (await stat(path).catch(() => ({ size: 0 }))).size;

describe('LogRing', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lnx-log-ring-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps a file written far past its bound within the bound on disk, with the newest lines', async () => {
    const bound = 64 * 1024;
    const ring = new LogRing(join(dir, 'asg.log'), bound);
    let written = 0;
    for (let batch = 0; written < 8 * bound; batch += 1) {
      // About 4 KiB per batch: well under half the bound, as a runtime writes between two rotations.
      const lines = `${Array.from({ length: 40 }, (_, i) => `batch ${batch} line ${i} ${'x'.repeat(80)}`).join('\n')}\n`;
      await appendFile(ring.path, lines);
      written += lines.length;
      await ring.rotate();
      expect((await size(ring.path)) + (await size(ring.segmentPath))).toBeLessThanOrEqual(bound);
    }
    expect(await size(ring.segmentPath)).toBeGreaterThan(0);
    expect(await size(ring.segmentPath)).toBeLessThanOrEqual(bound / 2);
    const tail = await ring.tail(1_000);
    expect(tail.at(-1)).toMatch(/^batch \d+ line 39 x+$/);
    // Every line handed out is whole, oldest first, across the segment and the live file.
    expect(tail.every((line) => /^batch \d+ line \d+ x{80}$/.test(line))).toBe(true);
    const numbers = tail.map((line) => Number(line.split(' ')[1]) * 100 + Number(line.split(' ')[3]));
    expect(numbers).toEqual([...numbers].sort((a, b) => a - b));
    expect(await readdir(dir)).toEqual(['asg.log', 'asg.log.1']);
  });

  it('rotates only past half the bound, and keeps the newest half when the runtime outran the rotations', async () => {
    const ring = new LogRing(join(dir, 'asg.log'), 1_000);
    await writeFile(ring.path, `${'a'.repeat(99) + '\n'.repeat(1) + 'b'.repeat(399)}\n`);
    await ring.rotate();
    expect(await size(ring.segmentPath)).toBe(0);
    expect(await size(ring.path)).toBe(500);
    const lines = Array.from({ length: 30 }, (_, i) => `${String(i).padStart(2, '0')} ${'y'.repeat(96)}`);
    await writeFile(ring.path, `${lines.join('\n')}\n`);
    await ring.rotate();
    expect(await size(ring.path)).toBe(0);
    const segment = await readFile(ring.segmentPath, 'utf8');
    expect(segment.length).toBeLessThanOrEqual(500);
    // Cut at a line boundary: the first line of the segment is whole.
    expect(segment.split('\n')[0]).toMatch(/^\d\d y{96}$/);
    expect(segment.trimEnd().split('\n').at(-1)).toBe(lines.at(-1));
  });

  it('reads the same lines twice and never modifies the files', async () => {
    const ring = new LogRing(join(dir, 'asg.log'), 1_000);
    await writeFile(ring.segmentPath, 'old 1\nold 2\n');
    await writeFile(ring.path, 'new 1\nnew 2\npartial');
    const before = [await readFile(ring.path, 'utf8'), await readFile(ring.segmentPath, 'utf8')];
    const first = await ring.tail(10);
    const second = await ring.tail(10);
    expect(first).toEqual(['old 1', 'old 2', 'new 1', 'new 2', 'partial']);
    expect(second).toEqual(first);
    expect(await ring.tail(2)).toEqual(['new 2', 'partial']);
    expect([await readFile(ring.path, 'utf8'), await readFile(ring.segmentPath, 'utf8')]).toEqual(before);
  });

  it('reads a file far past its bound without truncating it (only rotations move content)', async () => {
    const ring = new LogRing(join(dir, 'asg.log'));
    const line = `${'w'.repeat(99)}\n`;
    await writeFile(ring.path, `${line.repeat(60_000)}last\n`);
    const bytes = await size(ring.path);
    expect(bytes).toBeGreaterThan(6_000_000);
    const first = await ring.tail(3);
    expect(first).toEqual(['w'.repeat(99), 'w'.repeat(99), 'last']);
    expect(await ring.tail(3)).toEqual(first);
    expect(await size(ring.path)).toBe(bytes);
  });

  it('joins a line the rotation cut in two, and cuts lines to the upload contract', async () => {
    const ring = new LogRing(join(dir, 'asg.log'), 1_000_000);
    await writeFile(ring.segmentPath, 'first\nhalf of a ');
    await writeFile(ring.path, `line\n${'z'.repeat(5_000)}\n`);
    expect(await ring.tail(10)).toEqual(['first', 'half of a line', 'z'.repeat(4_096)]);
  });

  it('reads nothing from a runtime that wrote nothing, and removes its files when retired', async () => {
    const ring = new LogRing(join(dir, 'asg.log'));
    expect(await ring.tail(5)).toEqual([]);
    await ring.rotate();
    await writeFile(ring.path, 'x\n');
    await writeFile(ring.segmentPath, 'y\n');
    await ring.remove();
    expect(await readdir(dir)).toEqual([]);
  });

  it("still reads a killed process's last lines, and the process's appends land in the live file after a rotation", async () => {
    const ring = new LogRing(join(dir, 'asg.log'), 4_096);
    // As the process adapter does: the runtime holds its own O_APPEND descriptor.
    const fd = openSync(ring.path, 'a', 0o600);
    const child = spawn(
      process.execPath,
      ['-e', `let i = 0; const t = setInterval(() => { console.log('tick ' + i++ + ' ' + 'p'.repeat(100)); }, 2); process.on('SIGTERM', () => {});`],
      { stdio: ['ignore', fd, fd] },
    );
    closeSync(fd);
    const rotations: number[] = [];
    for (let i = 0; i < 40 && rotations.length < 3; i += 1) {
      await new Promise((r) => setTimeout(r, 25));
      const live = await size(ring.path);
      await ring.rotate();
      if (live > 2_048 && (await size(ring.path)) < live) rotations.push(live);
    }
    expect(rotations.length).toBeGreaterThan(0);
    // Lines written after the last rotation (its copy-then-truncate window may drop a line at its edge).
    await new Promise((r) => setTimeout(r, 50));
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const last = await ring.tail(3);
    expect(last).toHaveLength(3);
    expect(last.every((line) => /^tick \d+ p{100}$/.test(line))).toBe(true);
    const numbers = last.map((line) => Number(line.split(' ')[1]));
    expect(numbers[1]).toBe(numbers[0]! + 1);
    expect(numbers[2]).toBe(numbers[1]! + 1);
    expect(await ring.tail(3)).toEqual(last);
    // Appended after a truncation, the live file holds no hole of zero bytes before its lines.
    expect((await readFile(ring.path)).includes(0)).toBe(false);
  });
});
