-- Analyst roles (app/store/analysts.py): the fixed-text checks; role and grant statements name
-- identifiers, so they are built in the store module from validated names.

-- name: reporting_schema_missing
SELECT to_regnamespace($1) IS NULL;

-- name: connecting_role
SELECT current_user::text;

-- name: group_exists
SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1);

-- name: existing_role
-- A role may be reused only when it is an analyst already: no attribute beyond LOGIN, and
-- membership in the analyst group alone.
SELECT r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls AS privileged,
       ARRAY(SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
             WHERE m.member = r.oid ORDER BY g.rolname) AS groups
FROM pg_roles r WHERE r.rolname = $1;

-- name: quoted_database
SELECT quote_ident(current_database());

-- name: guarded_functions
-- Every signature of the catalog functions matching $1 (see _GUARDED_CATALOG_FUNCTIONS).
SELECT p.oid::regprocedure::text AS fn FROM pg_proc p
WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname ~ $1
ORDER BY 1;

-- name: tables_owner
-- The role the controller runs as: the owner of its tables.
SELECT quote_ident(tableowner) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'streams';

-- name: forbidden_privileges
-- Everything role $1 could do beyond reading the views of schema $2 and the tables of schema $5
-- (the pipeline's marts), one line each: privileges on anything outside the catalogs, CREATE
-- anywhere, TEMPORARY, the guarded catalog functions ($3), memberships other than the group
-- ($4), and any view of $2 it could not read.
WITH me AS (SELECT $1::text AS role)
SELECT format('%s on database %s', p, current_database()) AS leak
FROM me, unnest(ARRAY['CREATE', 'TEMPORARY']) p
WHERE has_database_privilege(me.role, current_database(), p)
UNION ALL
SELECT format('CREATE on schema %s', n.nspname)
FROM me, pg_namespace n
WHERE has_schema_privilege(me.role, n.oid, 'CREATE')
UNION ALL
SELECT format('%s on %s', p, c.oid::regclass)
FROM me, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
     unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) p
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
  AND NOT (n.nspname IN ($2, $5) AND p = 'SELECT')
  AND has_any_column_privilege(me.role, c.oid, p)
UNION ALL
SELECT format('%s on %s', p, c.oid::regclass)
FROM me, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
     unnest(ARRAY['DELETE', 'TRUNCATE', 'TRIGGER']) p
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
  AND has_table_privilege(me.role, c.oid, p)
UNION ALL
SELECT format('%s on sequence %s', p, c.oid::regclass)
FROM me, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
     unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) p
WHERE c.relkind = 'S'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
  AND has_sequence_privilege(me.role, c.oid, p)
UNION ALL
SELECT format('EXECUTE on %s', f.oid::regprocedure)
FROM me, pg_proc f JOIN pg_namespace n ON n.oid = f.pronamespace
WHERE ((n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%')
       OR (n.nspname = 'pg_catalog' AND f.proname ~ $3))
  AND has_function_privilege(me.role, f.oid, 'EXECUTE')
UNION ALL
SELECT format('member of %s', g.rolname)
FROM me, pg_roles r JOIN pg_auth_members m ON m.member = r.oid JOIN pg_roles g ON g.oid = m.roleid
WHERE r.rolname = me.role AND g.rolname <> $4
UNION ALL
SELECT format('no SELECT on %s', c.oid::regclass)
FROM me, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $2 AND c.relkind IN ('v', 'm', 'r') AND NOT has_table_privilege(me.role, c.oid, 'SELECT')
