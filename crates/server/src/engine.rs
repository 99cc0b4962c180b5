//! Glue between the storage engine and the SQL layer: opens a data directory and exposes it as
//! `walnut_sql::storage::Engine`. OWNED BY THE STORAGE AUTHOR (front-end code calls only these
//! two functions).

use std::path::Path;
use std::sync::Arc;
use walnut_common::Result;

/// Creates a new data directory at `dir` (`walnut initdb`): directory layout, empty catalog,
/// first WAL segment, control file, and a default `walnut.conf`.
///
/// # Errors
/// 42P04-like bad input if `dir` exists and is not empty; I/O errors.
pub fn initdb(dir: &Path) -> Result<()> {
    let _ = dir;
    Err(walnut_common::Error::unsupported("initdb (storage not wired yet)"))
}

/// Opens the data directory (running crash recovery if needed) with the server-level settings
/// `settings` (GUC name -> value text: shared_buffers, checkpoint_timeout, max_wal_size,
/// full_page_writes, wal_writer_delay, ...), and starts the background checkpointer and WAL
/// writer.
///
/// # Errors
/// I/O and corruption errors from recovery; 22023 for invalid settings.
pub fn open_engine(
    dir: &Path,
    settings: &[(String, String)],
) -> Result<Arc<dyn walnut_sql::storage::Engine>> {
    let _ = (dir, settings);
    Err(walnut_common::Error::unsupported("open_engine (storage not wired yet)"))
}
