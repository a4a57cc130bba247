import type { GenerationRequest } from './requests.js';

function tokenText(i: number): string {
  return `tok${i} `;
}

export function generatedText(n: number): string {
  let out = '';
  for (let i = 0; i < n; i++) out += tokenText(i);
  return out;
}

export function usageOf(g: GenerationRequest): { prompt_tokens: number; completion_tokens: number; total_tokens: number } {
  return { prompt_tokens: g.promptTokens, completion_tokens: g.maxTokens, total_tokens: g.promptTokens + g.maxTokens };
}

/**
 * The SSE events of one streamed answer. Per-token chunks are built by concatenation around the token text: no
 * JSON.stringify on the hot path. Token text is plain ASCII, so it needs no escaping.
 */
export function streamChunks(g: GenerationRequest, id: string, created: number, modelJson: string) {
  const object = g.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  const head = `data: {"id":"${id}","object":"${object}","created":${created},"model":${modelJson},"system_fingerprint":null,"choices":[`;
  const usageTail = g.includeUsage ? ',"usage":null' : '';
  const tokenPrefix = g.kind === 'chat' ? `${head}{"index":0,"delta":{"content":"` : `${head}{"text":"`;
  const tokenSuffix =
    g.kind === 'chat' ? `"},"logprobs":null,"finish_reason":null}]${usageTail}}\n\n` : `","index":0,"logprobs":null,"finish_reason":null}]${usageTail}}\n\n`;
  return {
    /** Chat answers open with the assistant's role; completions have none. */
    role: g.kind === 'chat' ? `${head}{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${usageTail}}\n\n` : '',
    token: (i: number) => tokenPrefix + tokenText(i) + tokenSuffix,
    /** The finish reason, the usage when asked for, and `[DONE]`. */
    end(): string {
      let out =
        g.kind === 'chat'
          ? `${head}{"index":0,"delta":{},"logprobs":null,"finish_reason":"${g.finishReason}"}]${usageTail}}\n\n`
          : `${head}{"text":"","index":0,"logprobs":null,"finish_reason":"${g.finishReason}"}]${usageTail}}\n\n`;
      if (g.includeUsage) out += `${head}]${',"usage":'}${JSON.stringify(usageOf(g))}}\n\n`;
      return `${out}data: [DONE]\n\n`;
    },
  };
}
