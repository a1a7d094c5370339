//! The article's inventory (sections 4.4 and 7.2): one row of stock per SKU in SQLite, written
//! through fencelock's fenced storage, or blindly, as the article's first version does.

use std::path::Path;

use fencelock::fence::SqliteFence;

/// The stock table in one SQLite file.
#[derive(Debug, Clone)]
pub(crate) struct Shop {
    fence: SqliteFence,
}

impl Shop {
    /// Opens (creating it if missing) the database at `path` and the stock table.
    ///
    /// # Errors
    ///
    /// A storage error if the file cannot be opened or the table cannot be created.
    pub(crate) fn open(path: &Path) -> fencelock::Result<Shop> {
        let fence = SqliteFence::open(path)?;
        fence
            .unfenced(|conn| {
                conn.execute_batch(
                    "CREATE TABLE IF NOT EXISTS inventory (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL)",
                )
            })
            .map_err(|e| storage("creating the inventory table", e))?;
        Ok(Shop { fence })
    }

    /// Sets the stock of `sku` (setup: not fenced).
    ///
    /// # Errors
    ///
    /// A storage error if SQLite fails.
    pub(crate) fn set_stock(&self, sku: &str, stock: i64) -> fencelock::Result<()> {
        self.fence
            .unfenced(|conn| {
                conn.execute(
                    "INSERT INTO inventory (sku, stock) VALUES (?1, ?2)
                     ON CONFLICT (sku) DO UPDATE SET stock = excluded.stock",
                    (sku, stock),
                )
            })
            .map(|_| ())
            .map_err(|e| storage("setting the stock", e))
    }

    /// The stock of `sku` (a plain read: reads need no fencing, only writes do).
    ///
    /// # Errors
    ///
    /// A storage error if SQLite fails or the SKU is unknown.
    pub(crate) fn stock(&self, sku: &str) -> fencelock::Result<i64> {
        self.fence
            .unfenced(|conn| {
                conn.query_row("SELECT stock FROM inventory WHERE sku = ?1", [sku], |row| {
                    row.get(0)
                })
            })
            .map_err(|e| storage("reading the stock", e))
    }

    /// Writes the new stock of `sku` as a fenced write carrying `token`: refused with
    /// `StaleToken` if the storage already accepted a newer token for this SKU.
    ///
    /// # Errors
    ///
    /// [`fencelock::Error::StaleToken`] for a stale token; a storage error if SQLite fails.
    pub(crate) async fn write_fenced(
        &self,
        sku: &str,
        new_stock: i64,
        token: u64,
    ) -> fencelock::Result<()> {
        let owned = sku.to_owned();
        self.fence
            .write_async(&fence_resource(sku), token, move |tx| {
                tx.execute(
                    "UPDATE inventory SET stock = ?2 WHERE sku = ?1",
                    (owned.as_str(), new_stock),
                )?;
                Ok(())
            })
            .await
    }

    /// Writes the new stock of `sku` blindly: what a lock without fencing leaves you with.
    ///
    /// # Errors
    ///
    /// A storage error if SQLite fails.
    pub(crate) fn write_unfenced(&self, sku: &str, new_stock: i64) -> fencelock::Result<()> {
        self.fence
            .unfenced(|conn| {
                conn.execute(
                    "UPDATE inventory SET stock = ?2 WHERE sku = ?1",
                    (sku, new_stock),
                )
            })
            .map(|_| ())
            .map_err(|e| storage("writing the stock", e))
    }
}

/// The lock's resource name for a SKU: the article's `lock:sku:<sku>`.
pub(crate) fn lock_resource(sku: &str) -> String {
    format!("lock:sku:{sku}")
}

/// The fenced storage's resource name for a SKU.
fn fence_resource(sku: &str) -> String {
    format!("sku:{sku}")
}

fn storage(context: &str, e: impl std::error::Error + Send + Sync + 'static) -> fencelock::Error {
    fencelock::Error::storage(context, e)
}
