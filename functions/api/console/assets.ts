import type { Hono } from 'hono';
import type { ConsoleEnv } from './session.js';
import { CONSOLE_CSS } from './assets/console-css.js';
import { CONSOLE_JS } from './assets/console-js.js';

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><circle cx="16" cy="16" r="14" fill="#0b57d0"/><path d="M16 2a14 14 0 0 0 0 28a10 14 0 0 1 0-28z" fill="#e6edf3"/></svg>`;

/**
 * The console's static files. They live in the code (not on disk) so that the Workers bundle serves them too;
 * each URL carries a digest of its content, so a browser may keep it for a year and a new release is fetched anew.
 */
type AssetName = 'console.css' | 'console.js' | 'icon.svg';

const ASSETS: Record<AssetName, { type: string; body: string }> = {
  'console.css': { type: 'text/css; charset=utf-8', body: CONSOLE_CSS },
  'console.js': { type: 'text/javascript; charset=utf-8', body: CONSOLE_JS },
  'icon.svg': { type: 'image/svg+xml', body: ICON_SVG },
};

/** FNV-1a (32 bits), hex: a cache-busting version, not a security digest. */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i += 1) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0).toString(16).padStart(8, '0');
}

const VERSIONS = Object.fromEntries(Object.entries(ASSETS).map(([name, asset]) => [name, fnv1a(asset.body)])) as Record<AssetName, string>;

/** The URL a page links an asset with. */
export function assetUrl(name: AssetName): string {
  return `/console/assets/${name}?v=${VERSIONS[name]}`;
}

/** `GET /console/assets/<name>`: served to anyone (nothing in them is secret), cached by version. */
export function registerAssets(app: Hono<ConsoleEnv>): void {
  app.get('/console/assets/:name', (c) => {
    const name = c.req.param('name');
    if (!Object.hasOwn(ASSETS, name)) return c.text('not found', 404);
    const asset = ASSETS[name as AssetName];
    const current = c.req.query('v') === VERSIONS[name as AssetName];
    return c.body(asset.body, 200, {
      'content-type': asset.type,
      'cache-control': current ? 'public, max-age=31536000, immutable' : 'no-cache',
    });
  });
}
