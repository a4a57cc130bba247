#!/usr/bin/env node
// The simulator's stand-in for a user's script as a command job (docs/jobs.md, "Commands"): it calls the endpoint it
// is given (ENDPOINT, MODEL, OPENAI_API_KEY) as any OpenAI client would, `--requests` chat completions one after
// another, prints how many were answered (never what), and exits 0 only when all were. Its flags choose a count
// only, so a node's local policy may allow it by its digest alone (functions/hosts/dev/fleet.ts writeSimPolicy).
const at = process.argv.indexOf('--requests');
const requests = at === -1 ? 1 : Number(process.argv[at + 1]);
const { ENDPOINT, MODEL, OPENAI_API_KEY } = process.env;
let answered = 0;
for (let i = 0; i < requests; i++) {
  const answer = await fetch(`${ENDPOINT}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${OPENAI_API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `question ${i}` }], max_tokens: 2 }),
  }).catch(() => null);
  if (answer?.ok) answered++;
  await answer?.body?.cancel();
}
console.log(`sim-client: ${answered} of ${requests} answered by ${MODEL}`);
process.exit(answered === requests ? 0 : 1);
