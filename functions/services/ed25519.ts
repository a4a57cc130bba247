import { createPublicKey, verify as verifyNode } from 'node:crypto';

/** Checks Ed25519 signatures of one public key. */
export interface Ed25519Verifier {
  verify(data: Uint8Array<ArrayBuffer>, signature: Uint8Array<ArrayBuffer>): Promise<boolean>;
}

type PublicJwk = { kty: string; crv: string; x: string };

/** RFC 8032 section 7.1, test 1: the empty message under a known key. */
const KNOWN = {
  jwk: { kty: 'OKP', crv: 'Ed25519', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo' },
  signature: Buffer.from(
    'e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b',
    'hex',
  ),
};

/**
 * Whether node:crypto checks Ed25519 correctly here: it must accept the known answer and refuse it altered.
 * Workers' node:crypto accepts the calls but does not (it refuses valid signatures), so it is tested, not assumed.
 */
const nodeVerifies: boolean = (() => {
  try {
    const key = createPublicKey({ key: KNOWN.jwk, format: 'jwk' });
    const altered = Buffer.from(KNOWN.signature);
    altered[0]! ^= 1;
    return verifyNode(null, new Uint8Array(0), key, KNOWN.signature) && !verifyNode(null, new Uint8Array(0), key, altered);
  } catch {
    // Silent by design: a node:crypto that throws on the known answer is one that does not verify; WebCrypto is used.
    return false;
  }
})();

/**
 * A verifier for an Ed25519 public JWK. node:crypto where it verifies correctly (a synchronous check costs tens
 * of microseconds, while a WebCrypto job hops to the thread pool and back, about a millisecond per agent
 * request on the relay's hot path); WebCrypto elsewhere.
 */
export async function ed25519Verifier(jwk: PublicJwk): Promise<Ed25519Verifier> {
  const { kty, crv, x } = jwk;
  if (nodeVerifies) {
    const key = createPublicKey({ key: { kty, crv, x }, format: 'jwk' });
    return { verify: async (data, signature) => signature.length === 64 && verifyNode(null, data, key, signature) };
  }
  const key = await crypto.subtle.importKey('jwk', { kty, crv, x }, { name: 'Ed25519' }, false, ['verify']);
  return { verify: async (data, signature) => signature.length === 64 && (await crypto.subtle.verify({ name: 'Ed25519' }, key, signature, data)) };
}
