import { databaseUrlFrom, openMigratedStore, runCli } from './cli.js';

// `npm run db:migrate`: applies the committed migrations to DATABASE_URL (the Workers deployment's database).
await runCli(async () => {
  const store = await openMigratedStore(databaseUrlFrom(process.env, 'db:migrate'));
  await store.close();
  console.log('migrations applied');
});
