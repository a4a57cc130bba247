-- Assignments written before rollouts existed (0002) lack the template digest and the start-up settings, which
-- signing used to fill in on every read. They get them here, once: the digest exactly as `templateHash`
-- (functions/core/fleet/template.ts) computes it, SHA-256 of the RFC 8785 canonical JSON of model, runtime,
-- artifact, resources and the registry version's id, so the signed state an agent receives does not change and no
-- replica restarts; the start-up settings as the contract's defaults.
-- RFC 8785 canonical JSON of a jsonb value: keys sorted, no whitespace, numbers as ECMAScript writes them.
CREATE FUNCTION "lunanexa_0010_canonical"(v jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  result text;
  n numeric;
  t text;
  int_part text;
  frac_part text;
  digits text;
  e integer;
BEGIN
  CASE jsonb_typeof(v)
    WHEN 'object' THEN
      SELECT '{' || coalesce(string_agg(to_jsonb(o.key)::text || ':' || "lunanexa_0010_canonical"(o.value), ',' ORDER BY o.key COLLATE "C"), '') || '}'
        INTO result FROM jsonb_each(v) AS o;
      RETURN result;
    WHEN 'array' THEN
      SELECT '[' || coalesce(string_agg("lunanexa_0010_canonical"(a.value), ',' ORDER BY a.ord), '') || ']'
        INTO result FROM jsonb_array_elements(v) WITH ORDINALITY AS a(value, ord);
      RETURN result;
    WHEN 'number' THEN
      n := (v #>> '{}')::numeric;
      IF n = 0 THEN RETURN '0'; END IF;
      t := trim_scale(abs(n))::text;
      IF abs(n) >= 0.000001 AND abs(n) < 1e21 THEN
        RETURN CASE WHEN n < 0 THEN '-' ELSE '' END || t;
      END IF;
      -- Exponent form, as ECMAScript writes numbers below 1e-6 and from 1e21 on: 1.5e-7, 1e+21.
      int_part := split_part(t, '.', 1);
      frac_part := split_part(t, '.', 2);
      IF int_part <> '0' THEN
        e := length(int_part) - 1;
        digits := rtrim(int_part || frac_part, '0');
      ELSE
        digits := ltrim(frac_part, '0');
        e := -(length(frac_part) - length(digits) + 1);
        digits := rtrim(digits, '0');
      END IF;
      RETURN CASE WHEN n < 0 THEN '-' ELSE '' END || left(digits, 1)
        || CASE WHEN length(digits) > 1 THEN '.' || substr(digits, 2) ELSE '' END
        || 'e' || CASE WHEN e >= 0 THEN '+' ELSE '-' END || abs(e)::text;
    ELSE
      -- Strings, booleans and null: jsonb writes them as JSON.stringify does.
      RETURN v::text;
  END CASE;
END
$$;--> statement-breakpoint
UPDATE "assignments" SET "spec" = "spec" || jsonb_build_object('templateHash', encode(sha256(convert_to("lunanexa_0010_canonical"(
  (SELECT coalesce(jsonb_object_agg(f.key, f.value), '{}'::jsonb) FROM jsonb_each("spec") AS f WHERE f.key IN ('model', 'runtime', 'artifact', 'resources'))
  || CASE WHEN jsonb_typeof("spec" -> 'version' -> 'versionId') IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('versionId', "spec" -> 'version' -> 'versionId') END
), 'UTF8')), 'hex'))
WHERE NOT ("spec" ? 'templateHash');--> statement-breakpoint
UPDATE "assignments" SET "spec" = "spec" || '{"startup":{"timeoutMs":1800000,"probeIntervalMs":1000,"failureThreshold":3}}'::jsonb
WHERE NOT ("spec" ? 'startup');--> statement-breakpoint
DROP FUNCTION "lunanexa_0010_canonical"(jsonb);
