//! The SQL of the PostgreSQL fences, once for both drivers (tokio-postgres and sqlx).

/// Every statement a PostgreSQL fence runs on its table. `table` was checked
/// ([`super::FenceOptions::checked_table`]): it is a plain identifier, safe to splice.
#[derive(Debug, Clone)]
pub(crate) struct PgSql {
    /// Takes turns among the creators of the table: `$1` is [`advisory_key`].
    pub(crate) advisory_lock: &'static str,
    pub(crate) create_table: String,
    /// Whether the table has the `issuer` column: `$1` is the table name.
    pub(crate) has_issuer: &'static str,
    pub(crate) add_issuer: String,
    /// `$1` resource, `$2` token, `$3` issuer.
    pub(crate) insert_row: String,
    /// `$1` resource.
    pub(crate) lock_row: String,
    /// `$1` resource, `$2` token, `$3` issuer.
    pub(crate) update_token: String,
    /// `$1` resource.
    pub(crate) select_token: String,
}

impl PgSql {
    pub(crate) fn new(table: &str) -> PgSql {
        PgSql {
            advisory_lock: "SELECT pg_advisory_xact_lock($1)",
            // `issuer`: the lock the row is bound to (see the module docs).
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                     resource TEXT PRIMARY KEY,
                     token BIGINT NOT NULL,
                     issuer TEXT
                 )"
            ),
            has_issuer: "SELECT EXISTS (SELECT 1 FROM pg_attribute \
                 WHERE attrelid = to_regclass($1) AND attname = 'issuer' AND NOT attisdropped)",
            add_issuer: format!("ALTER TABLE {table} ADD COLUMN issuer TEXT"),
            insert_row: format!(
                "INSERT INTO {table} (resource, token, issuer) VALUES ($1, $2, $3) \
                 ON CONFLICT (resource) DO NOTHING"
            ),
            lock_row: format!("SELECT token, issuer FROM {table} WHERE resource = $1 FOR UPDATE"),
            update_token: format!(
                "UPDATE {table} SET token = $2, issuer = COALESCE(issuer, $3) WHERE resource = $1"
            ),
            select_token: format!("SELECT token FROM {table} WHERE resource = $1"),
        }
    }
}

/// The advisory-lock key that serializes the creation of `table`: FNV-1a of its name, so every
/// process derives the same key without a shared registry.
pub(crate) fn advisory_key(table: &str) -> i64 {
    let hash = format!("fencelock:{table}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    i64::from_ne_bytes(hash.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_are_stable_and_differ_per_table() {
        assert_eq!(
            advisory_key("fencelock_fence"),
            advisory_key("fencelock_fence")
        );
        assert_ne!(advisory_key("fencelock_fence"), advisory_key("other_fence"));
    }
}
