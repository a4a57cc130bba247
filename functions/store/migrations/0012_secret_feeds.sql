-- What a runtime secret may feed (security review 2, M1): the (template, env name) pairs an admin lists. Secrets
-- written before this migration get none, so they feed nothing until an admin writes them again with `feeds`;
-- deployments that name them stop rendering (held, with the reason) and their replicas no longer receive the value.
ALTER TABLE "runtime_secrets" ADD COLUMN "feeds" jsonb DEFAULT '[]'::jsonb NOT NULL;
