//! Durable file operations, each named for the guarantee it gives (after Neon's
//! `libs/utils/src/crashsafe.rs`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Fsyncs a directory so that entries created, renamed or removed in it survive a power loss.
///
/// # Errors
/// Any I/O error from opening or syncing the directory.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` atomically and durably: write `path.tmp`, fsync it, rename over
/// `path`, fsync the parent directory. After a crash `path` holds either the old or the new
/// contents, never a mix.
///
/// # Errors
/// Any I/O error; `path` is then unchanged (a stale `path.tmp` may remain and is overwritten by
/// the next call).
pub fn durable_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    fsync_dir(path.parent().unwrap_or(Path::new(".")))
}
