import { databaseUrlsFrom, openMigratedStore, runCli } from './cli.js';

// `npm run db:migrate`: applies the committed migrations to DATABASE_URL (the Workers deployment's database), as
// LUNANEXA_DATABASE_OWNER_URL's role when set, which then grants DATABASE_URL's role what the plane needs.
await runCli(async () => {
  const store = await openMigratedStore(databaseUrlsFrom(process.env, 'db:migrate'));
  await store.close();
  console.log('migrations applied');
});
