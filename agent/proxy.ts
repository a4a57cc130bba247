import { EnvHttpProxyAgent, type Dispatcher } from 'undici';

/** The dispatcher for every outbound request: honours HTTPS_PROXY, HTTP_PROXY and NO_PROXY. */
export function proxyDispatcher(): Dispatcher {
  return new EnvHttpProxyAgent();
}
