import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { Agent } from 'undici';
import { z } from 'zod';
import { NOISE_MS, agrees, bestSample, correctionMs, sampleFromDateHeader, sampleFromServerTime, skewWarning } from '../../agent/link/clock-offset.js';
import { CLOCK_REMEASURE_MS, createServerClock, type ServerClock } from '../../agent/link/clock.js';
import { createSignedClient } from '../../agent/link/http.js';
import { generateMachineKey } from '../../agent/state.js';
import { signMachineRequest } from '../../shared/machine-jwt.js';

describe('offset estimation', () => {
  it('corrects nothing while the clocks agree within the sample error plus noise, and the whole offset past it', () => {
    expect(correctionMs({ offsetMs: 1, errorMs: 0 })).toBe(0);
    expect(correctionMs({ offsetMs: -(NOISE_MS + 3), errorMs: 5 })).toBe(0);
    expect(correctionMs({ offsetMs: NOISE_MS + 6, errorMs: 5 })).toBe(NOISE_MS + 6);
    expect(correctionMs({ offsetMs: -600_000, errorMs: 2 })).toBe(-600_000);
  });

  it('takes the midpoint of the round trip, with half of it as the error', () => {
    // Sent at 1000, received at 1100 (this machine's clock); the server read 601050 in between.
    expect(sampleFromServerTime(1_000, 1_100, 601_050)).toEqual({ offsetMs: 600_000, errorMs: 50 });
    expect(sampleFromServerTime(1_000, 1_100, 1_050 - 600_000)).toEqual({ offsetMs: -600_000, errorMs: 50 });
    expect(sampleFromServerTime(5_000, 5_000, 5_000)).toEqual({ offsetMs: 0, errorMs: 0 });
  });

  it('survives this machine stepping its clock back during the request', () => {
    expect(sampleFromServerTime(2_000, 1_000, 1_500)).toEqual({ offsetMs: -500, errorMs: 0 });
  });

  it('holds the true offset within its error whatever moment of the round trip the server read its clock at', () => {
    const truth = 7_345;
    for (const rtt of [0, 1, 10, 333, 2_000]) {
      for (const at of [0, 0.25, 0.5, 0.75, 1]) {
        const sentAt = 1_000_000;
        const serverNow = sentAt + rtt * at + truth;
        const sample = sampleFromServerTime(sentAt, sentAt + rtt, serverNow);
        expect(Math.abs(sample.offsetMs - truth)).toBeLessThanOrEqual(sample.errorMs + 0.5);
      }
    }
  });

  it('reads a Date header as an interval: whole seconds, truncated, somewhere in the round trip', () => {
    const date = new Date(Date.UTC(2026, 0, 1, 12, 0, 0)).toUTCString();
    const at = Date.UTC(2026, 0, 1, 12, 0, 0);
    // Local clock 10 min behind; the server read 12:00:00.400 at the local 11:50:00.400.
    const sentAt = at - 600_000 + 300;
    const sample = sampleFromDateHeader(date, sentAt, sentAt + 200)!;
    expect(sample.errorMs).toBe(600);
    // The server's clock read [12:00:00, 12:00:01) between 11:50:00.300 and 11:50:00.500 here: 599.5 s to 600.7 s.
    expect(sample.offsetMs).toBe(600_100);
    expect(Math.abs(sample.offsetMs - 600_000)).toBeLessThanOrEqual(sample.errorMs);
  });

  it('holds the true offset within a Date sample wherever in the second and the round trip the server read its clock', () => {
    const truth = -42_123;
    for (const rtt of [0, 50, 900]) {
      for (const ms of [0, 1, 499, 999]) {
        for (const at of [0, 0.5, 1]) {
          const serverNow = Date.UTC(2026, 5, 1, 8, 30, 15) + ms;
          const localRead = serverNow - truth;
          const sentAt = localRead - rtt * at;
          const sample = sampleFromDateHeader(new Date(serverNow).toUTCString(), sentAt, sentAt + rtt)!;
          expect(Math.abs(sample.offsetMs - truth)).toBeLessThanOrEqual(sample.errorMs);
        }
      }
    }
  });

  it('has no Date sample for a missing or unparsable header', () => {
    expect(sampleFromDateHeader(null, 0, 1)).toBeNull();
    expect(sampleFromDateHeader(undefined, 0, 1)).toBeNull();
    expect(sampleFromDateHeader('', 0, 1)).toBeNull();
    expect(sampleFromDateHeader('not a date', 0, 1)).toBeNull();
  });

  it('keeps the sample with the shortest round trip', () => {
    expect(bestSample([])).toBeNull();
    const samples = [
      { offsetMs: 10, errorMs: 40 },
      { offsetMs: 12, errorMs: 3 },
      { offsetMs: 30, errorMs: 900 },
    ];
    expect(bestSample(samples)).toEqual({ offsetMs: 12, errorMs: 3 });
  });

  it('says whether a sample contradicts an offset, with slack', () => {
    expect(agrees(1_000, { offsetMs: 1_400, errorMs: 500 }, 0)).toBe(true);
    expect(agrees(1_000, { offsetMs: 1_600, errorMs: 500 }, 0)).toBe(false);
    expect(agrees(1_000, { offsetMs: 1_600, errorMs: 500 }, 100)).toBe(true);
    expect(agrees(0, { offsetMs: -600_000, errorMs: 600 }, 1_000)).toBe(false);
  });

  it('warns past the threshold, naming the offset, the side and NTP', () => {
    expect(skewWarning(0, 2_000)).toBeNull();
    expect(skewWarning(2_000, 2_000)).toBeNull();
    expect(skewWarning(-2_000, 2_000)).toBeNull();
    expect(skewWarning(-600_000, 2_000)).toBe(
      "this machine's clock is 600.0 s ahead of the control plane's: the agent signs with the control plane's time and keeps working, but fix this machine's time (NTP)",
    );
    expect(skewWarning(6_250, 2_000)).toMatch(/^this machine's clock is 6\.3 s behind the control plane's: .*\(NTP\)$/);
  });
});

describe('corrected signing', () => {
  const claimsOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString('utf8')) as { iat: number; exp: number };

  it('signs iat and exp in the time it is given', async () => {
    const key = await generateMachineKey();
    const iat = Date.UTC(2030, 0, 1) / 1000;
    const jwt = await signMachineRequest({
      key: key.privateKey,
      kid: 'cred_1',
      machineId: 'mch_1',
      clusterId: 'cls_1',
      method: 'POST',
      path: '/p',
      body: '',
      nowMs: iat * 1000 + 999,
    });
    expect(claimsOf(jwt)).toMatchObject({ iat, exp: iat + 30 });
  });

  it("signs in this machine's time without one", async () => {
    const key = await generateMachineKey();
    const before = Math.floor(Date.now() / 1000);
    const jwt = await signMachineRequest({ key: key.privateKey, kid: 'cred_1', machineId: 'mch_1', clusterId: 'cls_1', method: 'POST', path: '/p', body: '' });
    expect(claimsOf(jwt).iat).toBeGreaterThanOrEqual(before);
    expect(claimsOf(jwt).iat).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
  });

  it("the agent's client signs every request with its clock's time, and shows it every Date header", async () => {
    const key = await generateMachineKey();
    const seen: Array<[string | null, number, number]> = [];
    const plane = await serve((req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ authorization: req.headers.authorization }));
    });
    try {
      const client = createSignedClient({
        baseUrl: plane.url,
        credentials: () => ({ machineId: 'mch_1', clusterId: 'cls_1', credentialId: 'cred_1', key: key.privateKey }),
        dispatcher: new Agent(),
        clock: { now: () => Date.now() + 600_000, observeDate: (...args) => void seen.push(args) },
      });
      const result = await client.request('POST', '/agent/v1/heartbeat', {}, z.object({ authorization: z.string() }));
      expect(result.success).toBe(true);
      const { iat } = claimsOf(result.success ? result.data.authorization.slice('Bearer '.length) : '');
      expect(Math.abs(iat - (Date.now() + 600_000) / 1000)).toBeLessThan(5);
      const headers = await client.signedHeaders('GET', '/agent/v1/stream', '');
      expect(Math.abs(claimsOf(headers.authorization!.slice('Bearer '.length)).iat - (Date.now() + 600_000) / 1000)).toBeLessThan(5);
      expect(seen).toHaveLength(1);
      expect(Date.parse(seen[0]![0]!)).toBeGreaterThan(Date.now() - 5_000);
      expect(seen[0]![1]).toBeLessThanOrEqual(seen[0]![2]);
    } finally {
      await plane.close();
    }
  });
});

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

async function serve(handler: Handler): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const server = createServer(handler);
  const port = await new Promise<number>((done) => server.listen(0, '127.0.0.1', () => done((server.address() as { port: number }).port)));
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

describe('the server clock', () => {
  const closers: Array<() => Promise<void>> = [];
  afterEach(async () => {
    while (closers.length) await closers.pop()!();
  });

  /** A control plane whose clock runs `aheadMs` ahead of this machine's; `time: false` has no time endpoint (an older one). */
  async function plane(aheadMs: number, opts: { time?: boolean } = {}) {
    const hits: string[] = [];
    const server = await serve((req, res) => {
      hits.push(`${req.method} ${req.url}`);
      const now = Date.now() + aheadMs;
      // The Date header of the plane's own clock (node writes this machine's).
      res.setHeader('date', new Date(now).toUTCString());
      if (req.url === '/agent/v1/time' && opts.time !== false) {
        res.setHeader('content-type', 'application/json');
        res.setHeader('cache-control', 'no-store');
        res.end(JSON.stringify({ now }));
      } else {
        res.statusCode = 404;
        res.end('{"error":{"code":"not_found","message":"no route"}}');
      }
    });
    closers.push(server.close);
    return { ...server, hits };
  }

  /** The offset the clock applies: its now() against this machine's. */
  const offsetOf = (clock: ServerClock) => clock.now() - Date.now();

  function clockFor(url: string) {
    const logs: Array<{ event: string; fields: Record<string, unknown> }> = [];
    const dispatcher = new Agent();
    closers.push(() => dispatcher.close());
    const clock = createServerClock({ baseUrl: url, dispatcher, log: (event, fields = {}) => void logs.push({ event, fields }) });
    return { clock, logs };
  }

  it('measures a control plane 10 min ahead from its time endpoint, warns, and corrects now() and deadlines', async () => {
    const cp = await plane(600_000);
    const { clock, logs } = clockFor(cp.url);
    await clock.measure('start');
    expect(cp.hits).toEqual(['GET /agent/v1/time', 'GET /agent/v1/time', 'GET /agent/v1/time']);
    expect(Math.abs(offsetOf(clock) - 600_000)).toBeLessThan(250);
    expect(clock.toLocal(Date.now() + 600_000 + 30_000) - Date.now()).toBeGreaterThan(29_000);
    expect(logs).toHaveLength(1);
    expect(logs[0]!.event).toBe('clock skew');
    expect(logs[0]!.fields).toMatchObject({ source: 'time endpoint', reason: 'start' });
    expect(logs[0]!.fields.warning).toMatch(/^this machine's clock is 600\.\d s behind the control plane's: .* fix this machine's time \(NTP\)$/);
  });

  it('measures a control plane 10 min behind', async () => {
    const cp = await plane(-600_000);
    const { clock, logs } = clockFor(cp.url);
    await clock.measure('start');
    expect(Math.abs(offsetOf(clock) + 600_000)).toBeLessThan(250);
    expect(logs[0]!.fields.warning).toMatch(/600\.\d s ahead of the control plane's/);
  });

  it('says nothing of a clock within 2 s', async () => {
    const cp = await plane(1_000);
    const { clock, logs } = clockFor(cp.url);
    await clock.measure('start');
    expect(Math.abs(offsetOf(clock) - 1_000)).toBeLessThan(250);
    expect(logs).toEqual([]);
  });

  it('falls back to the Date header of a control plane without the time endpoint', async () => {
    const cp = await plane(600_000, { time: false });
    const { clock, logs } = clockFor(cp.url);
    await clock.measure('start');
    expect(Math.abs(offsetOf(clock) - 600_000)).toBeLessThan(1_500);
    expect(logs[0]!.fields).toMatchObject({ source: 'Date header' });
  });

  it('says when it cannot measure, keeps working with no offset, and does not wait out more than one failure', async () => {
    const gone = await serve(() => {});
    await gone.close();
    const { clock, logs } = clockFor(gone.url);
    await clock.measure('start');
    expect(Math.abs(offsetOf(clock))).toBeLessThan(5);
    expect(logs).toEqual([{ event: 'clock offset not measured', fields: expect.objectContaining({ reason: 'start', error: expect.any(String) }) }]);
  });

  it('measures once for a burst of refusals, and is due again after 10 min', async () => {
    const cp = await plane(600_000);
    const { clock } = clockFor(cp.url);
    expect(clock.due()).toBe(true);
    await clock.measure('start');
    expect(clock.due()).toBe(false);
    expect(CLOCK_REMEASURE_MS).toBe(600_000);
    await Promise.all([clock.resync('refused'), clock.resync('refused again')]);
    expect(cp.hits).toHaveLength(3);
  });

  it('measures again on a refusal once the last measurement is 2 s old', async () => {
    const cp = await plane(600_000);
    const { clock } = clockFor(cp.url);
    await clock.measure('start');
    await new Promise((r) => setTimeout(r, 2_100));
    await clock.resync('refused');
    expect(cp.hits).toHaveLength(6);
  });

  it('adopts a Date header that contradicts an offset it could not measure precisely', async () => {
    const gone = await serve(() => {});
    await gone.close();
    const { clock, logs } = clockFor(gone.url);
    await clock.measure('start');
    const sentAt = Date.now();
    clock.observeDate(new Date(sentAt - 600_000).toUTCString(), sentAt, sentAt + 10);
    expect(Math.abs(offsetOf(clock) + 600_000)).toBeLessThan(1_500);
    expect(logs.at(-1)).toMatchObject({ event: 'clock skew', fields: { source: 'Date header' } });
    // One that agrees changes nothing.
    const offset = clock.toLocal(0);
    clock.observeDate(new Date(Date.now() - 600_000).toUTCString(), Date.now(), Date.now());
    expect(clock.toLocal(0)).toBe(offset);
  });

  it('measures again when a Date header contradicts a precise offset (this machine stepped its clock), at most every 30 s', async () => {
    const cp = await plane(0);
    const { clock } = clockFor(cp.url);
    await clock.measure('start');
    expect(cp.hits).toHaveLength(3);
    const now = Date.now();
    // Agrees within a second and the round trip: nothing to do.
    clock.observeDate(new Date(now).toUTCString(), now, now + 5);
    await new Promise((r) => setTimeout(r, 50));
    expect(cp.hits).toHaveLength(3);
    clock.observeDate(new Date(now + 60_000).toUTCString(), now, now + 5);
    await clock.resync('settled');
    expect(cp.hits).toHaveLength(6);
    // The measurement stands: the plane's clock did not move.
    expect(Math.abs(offsetOf(clock))).toBeLessThan(250);
    clock.observeDate(new Date(now + 60_000).toUTCString(), now, now + 5);
    await new Promise((r) => setTimeout(r, 50));
    expect(cp.hits).toHaveLength(6);
  });
});
