import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './functions/store/schema/index.ts',
  out: './functions/store/migrations',
});
