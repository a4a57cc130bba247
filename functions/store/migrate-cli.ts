import { openPgStore } from './pg.js';

// `npm run db:migrate`: applies the committed migrations to DATABASE_URL (the Workers deployment's database).
const url = process.env.DATABASE_URL;
if (!url) {
  console.error('DATABASE_URL is required');
  process.exit(2);
}
const store = await openPgStore(url);
await store.close();
console.log('migrations applied');
