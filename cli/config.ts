import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { CliError } from './client.js';

/** What `lunanexa login` saves: the control plane and a token, in a file only its owner can read. */
const SavedLogin = z.object({ url: z.string().url(), token: z.string().min(1) });
export type SavedLogin = z.infer<typeof SavedLogin>;

/** LUNANEXA_CONFIG, else `$XDG_CONFIG_HOME/lunanexa/login.json`, else `~/.config/lunanexa/login.json`. */
export function loginPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.LUNANEXA_CONFIG) return env.LUNANEXA_CONFIG;
  return join(env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'lunanexa', 'login.json');
}

export async function readLogin(): Promise<SavedLogin | null> {
  let text: string;
  try {
    text = await readFile(loginPath(), 'utf8');
  } catch {
    return null;
  }
  const parsed = SavedLogin.safeParse(
    (() => {
      try {
        return JSON.parse(text);
      } catch {
        return null;
      }
    })(),
  );
  if (!parsed.success) throw new CliError(`${loginPath()} is not a saved login: run \`lunanexa login\` again or remove it`, 2);
  return parsed.data;
}

/** Written 0600 in a 0700 directory: the file holds a bearer token. */
export async function saveLogin(login: SavedLogin): Promise<string> {
  const path = loginPath();
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  await writeFile(path, `${JSON.stringify(login)}\n`, { mode: 0o600 });
  await chmod(path, 0o600);
  return path;
}

export async function removeLogin(): Promise<boolean> {
  try {
    await rm(loginPath());
    return true;
  } catch {
    return false;
  }
}
