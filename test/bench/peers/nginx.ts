import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort } from '../../../agent/runtimes/process.js';
import { waitFor } from '../../helpers/plane.js';
import { withDescendants, type Tracked } from '../proc-cpu.js';
import { spawnLogged } from '../spawned.js';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));

/** Why the nginx path cannot run here, or null when it can. */
export const nginxMissing = () => (NGINX ? null : 'nginx missing (apt-get install -y nginx)');

export interface Peer {
  /** The URL in front of each runtime port given. */
  urls: Map<number, string>;
  processes: Tracked[];
}

/**
 * Debian's nginx as a reverse proxy in front of each runtime (one listener each), configured the way a streaming
 * API is served: no buffering either way, upstream keep-alive. Its own prefix under `root`.
 */
export async function startNginx(root: string, runtimePorts: number[]): Promise<Peer> {
  const prefix = join(root, 'nginx');
  await mkdir(join(prefix, 'logs'), { recursive: true });
  const urls = new Map<number, string>();
  const servers: string[] = [];
  for (const port of runtimePorts) {
    const listen = await freePort();
    urls.set(port, `http://127.0.0.1:${listen}`);
    servers.push(`
  upstream runtime${port} { server 127.0.0.1:${port}; keepalive 1024; }
  server {
    listen 127.0.0.1:${listen};
    location / {
      proxy_pass http://runtime${port};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }`);
  }
  await writeFile(
    join(prefix, 'nginx.conf'),
    `daemon off;
worker_processes 1;
pid ${prefix}/nginx.pid;
error_log ${prefix}/logs/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${prefix}/body; proxy_temp_path ${prefix}/proxy; fastcgi_temp_path ${prefix}/fcgi;
  uwsgi_temp_path ${prefix}/uwsgi; scgi_temp_path ${prefix}/scgi;${servers.join('')}
}
`,
  );
  const nginx = spawnLogged(NGINX!, ['-p', prefix, '-c', join(prefix, 'nginx.conf')], {}, join(prefix, 'logs', 'stderr.log'));
  for (const url of urls.values()) await waitFor(async () => (await fetch(`${url}/health`)).ok, { what: 'nginx' });
  return { urls, processes: [{ name: 'nginx', pids: () => withDescendants(nginx.pid!) }] };
}
