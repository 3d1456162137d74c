-- Accounts (`pgcontroller auth user ...`, and the authentication of gRPC and REST calls).
-- Each block's name is the store method that runs it. Every change is conditional on the
-- version the caller read.

-- name: get_account
SELECT name, password_hash, acl, version, created_at, updated_at FROM accounts WHERE name = $1;

-- name: list_accounts
SELECT name, password_hash, acl, version, created_at, updated_at FROM accounts ORDER BY name;

-- name: add_account
INSERT INTO accounts (name, password_hash, acl, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
ON CONFLICT (name) DO NOTHING
RETURNING version;

-- name: update_account
-- A NULL hash or ACL keeps the stored one.
UPDATE accounts
SET password_hash = coalesce($3, password_hash), acl = coalesce($4, acl),
    updated_at = $5, version = version + 1
WHERE name = $1 AND version = $2
RETURNING version;

-- name: remove_account
DELETE FROM accounts WHERE name = $1 AND version = $2 RETURNING name;
