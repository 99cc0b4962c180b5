//! Faults injected into another file system through [`crate::hook`], and armed from the
//! environment for end-to-end tests.

use super::{eio, enospc};
use crate::hook::{FileRef, HookVfs, Hooks};
use crate::Vfs;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// [`Hooks`] that inject two kinds of fault into another file system (the real one, in a
/// server under test), each optional; every other call goes through unchanged, trait defaults
/// included ([`Inject::over`] wraps the file system in a [`HookVfs`]).
///
/// - **A failed sync:** the `nth` (1-based) `sync_data`/`sync_all`/write-back of a file, or
///   `sync_dir` of a directory, whose path contains a filter fails with EIO or ENOSPC (calls on
///   matching paths are counted together, files' and directories'). The server installs it
///   when `WALNUT_FAULT_SYNC_EIO=FILTER:N` or `WALNUT_FAULT_SYNC_ENOSPC=FILTER:N` is set (see
///   [`vfs_from_env`]), so that an end-to-end test can watch a real process PANIC on a failed
///   fsync and recover.
/// - **A full disk:** while the file `full_while` exists, every `write_at`, `set_len` or `allocate` that
///   would make a file longer fails with ENOSPC, writing nothing; writes within a file's length
///   (and syncs, renames, removals) still succeed, as on a full file system whose files were
///   allocated before it filled. If the trigger file holds text, only files whose path contains
///   it are on the full disk (`/wal/`: a WAL directory on its own volume). The server installs
///   it when `WALNUT_FAULT_DISK_FULL_WHILE=PATH` is set, so that a test can fill and free the
///   disk.
#[derive(Debug, Default)]
pub struct Inject {
    sync_fail: Option<SyncFail>,
    full_while: Option<PathBuf>,
    /// Sync-like calls on paths that match `sync_fail`'s filter so far.
    seen: AtomicU64,
}

/// The sync that [`Inject`] fails: the `nth` (1-based) of those on paths containing `filter`.
#[derive(Clone, Debug)]
struct SyncFail {
    filter: String,
    nth: u64,
    enospc: bool,
}

impl SyncFail {
    fn error(&self, what: &str, path: &Path) -> io::Error {
        if self.enospc {
            enospc()
        } else {
            eio(what, path)
        }
    }
}

impl Inject {
    /// No fault armed.
    pub fn none() -> Inject {
        Inject::default()
    }

    /// Arms the failed sync: the `nth` (1-based) sync of a file or directory whose path
    /// contains `path_filter` fails with EIO. Replaces a sync fault armed before.
    pub fn with_sync_eio(self, path_filter: &str, nth: u64) -> Inject {
        self.with_sync_fail(path_filter, nth, false)
    }

    /// Arms the failed sync with ENOSPC instead of EIO (what a file system that allocates at
    /// writeback reports when it fills). Replaces a sync fault armed before.
    pub fn with_sync_enospc(self, path_filter: &str, nth: u64) -> Inject {
        self.with_sync_fail(path_filter, nth, true)
    }

    fn with_sync_fail(mut self, path_filter: &str, nth: u64, enospc: bool) -> Inject {
        self.sync_fail = Some(SyncFail {
            filter: path_filter.to_string(),
            nth,
            enospc,
        });
        self
    }

    /// Arms the full disk: while the file `trigger` exists (checked at each call), writes
    /// that would lengthen a file fail with ENOSPC; if it holds text, only those of files
    /// whose path contains the text.
    pub fn with_disk_full_while(mut self, trigger: &Path) -> Inject {
        self.full_while = Some(trigger.to_path_buf());
        self
    }

    /// `inner` with these faults.
    pub fn over(self, inner: Arc<dyn Vfs>) -> HookVfs {
        HookVfs::new(inner, Arc::new(self))
    }

    /// Fails this sync-like call (`what`, on `path`) if it is the armed one.
    fn sync(&self, what: &str, path: &Path) -> io::Result<()> {
        let Some(f) = &self.sync_fail else {
            return Ok(());
        };
        if !path.to_string_lossy().contains(f.filter.as_str()) {
            return Ok(());
        }
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == f.nth {
            return Err(f.error(what, path));
        }
        Ok(())
    }

    /// ENOSPC if the disk is "full" for `file` (the trigger exists, and is empty or holds text
    /// that the file's path contains) and the file would grow to `new_end` bytes.
    fn check_growth(&self, file: FileRef<'_>, new_end: u64) -> io::Result<()> {
        let Some(trigger) = &self.full_while else {
            return Ok(());
        };
        let full = match std::fs::read_to_string(trigger) {
            Ok(filter) => {
                let filter = filter.trim();
                filter.is_empty() || file.path.to_string_lossy().contains(filter)
            }
            Err(_) => false,
        };
        if full && new_end > file.io.len()? {
            return Err(enospc());
        }
        Ok(())
    }
}

impl Hooks for Inject {
    fn sync_dir(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
        self.sync("fsync directory", dir)?;
        vfs.sync_dir(dir)
    }

    fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_growth(file, offset + buf.len() as u64)?;
        file.io.write_at(buf, offset)
    }

    fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
        self.sync("fdatasync", file.path)?;
        file.io.sync_data()
    }

    fn sync_all(&self, file: FileRef<'_>) -> io::Result<()> {
        self.sync("fsync", file.path)?;
        file.io.sync_all()
    }

    fn set_len(&self, file: FileRef<'_>, len: u64) -> io::Result<()> {
        self.check_growth(file, len)?;
        file.io.set_len(len)
    }

    fn write_vectored_at(&self, file: FileRef<'_>, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        self.check_growth(file, offset + len as u64)?;
        file.io.write_vectored_at(bufs, offset)
    }

    fn allocate(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        self.check_growth(file, offset + len)?;
        file.io.allocate(offset, len)
    }

    fn write_back(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        self.sync("sync_file_range", file.path)?;
        file.io.write_back(offset, len)
    }
}

/// Parses `FILTER:N` (e.g. `wal:100`, the 100th sync of a file whose path contains `wal`).
///
/// # Errors
/// A message if the text is not of that form or N is not a positive integer.
pub fn parse_sync_eio_spec(spec: &str) -> Result<(String, u64), String> {
    let (f, n) = spec
        .rsplit_once(':')
        .ok_or_else(|| format!("expected FILTER:N, not {spec:?}"))?;
    let n: u64 = n
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("expected a positive count in {spec:?}"))?;
    Ok((f.to_string(), n))
}

/// `real`, with the faults the environment arms ([`Inject`]), for a server started by an
/// end-to-end test:
///
/// - `WALNUT_FAULT_SYNC_EIO=FILTER:N`: the Nth sync of a file or directory whose path contains
///   FILTER fails with EIO; `WALNUT_FAULT_SYNC_ENOSPC=FILTER:N` does the same with ENOSPC (if
///   both are set, ENOSPC wins);
/// - `WALNUT_FAULT_DISK_FULL_WHILE=PATH`: while the file PATH exists, every write that would
///   lengthen a file fails with ENOSPC.
///
/// Returns the file system (`real` itself if no variable is set) and one line per armed
/// fault, for the caller to log.
///
/// # Errors
/// A message naming the variable, if one is malformed.
pub fn vfs_from_env(real: Arc<dyn Vfs>) -> Result<(Arc<dyn Vfs>, Vec<String>), String> {
    vfs_from_vars(real, |name| std::env::var_os(name))
}

/// [`vfs_from_env`] with the variables looked up by `var`.
pub(super) fn vfs_from_vars(
    real: Arc<dyn Vfs>,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<(Arc<dyn Vfs>, Vec<String>), String> {
    let text = |name: &str| {
        var(name)
            .map(|v| {
                v.into_string()
                    .map_err(|v| format!("{name}: not UTF-8: {v:?}"))
            })
            .transpose()
    };
    let sync_eio = text("WALNUT_FAULT_SYNC_EIO")?;
    let sync_enospc = text("WALNUT_FAULT_SYNC_ENOSPC")?;
    let full_while = var("WALNUT_FAULT_DISK_FULL_WHILE");
    if sync_eio.is_none() && sync_enospc.is_none() && full_while.is_none() {
        return Ok((real, Vec::new()));
    }
    let mut inject = Inject::none();
    let mut armed = Vec::new();
    for (var, spec, enospc) in [
        ("WALNUT_FAULT_SYNC_EIO", sync_eio, false),
        ("WALNUT_FAULT_SYNC_ENOSPC", sync_enospc, true),
    ] {
        let Some(spec) = spec else { continue };
        let (filter, n) = parse_sync_eio_spec(&spec).map_err(|e| format!("{var}: {e}"))?;
        let errno = if enospc { "ENOSPC" } else { "EIO" };
        armed.push(format!(
            "sync number {n} of a path matching \"{filter}\" will fail with {errno}"
        ));
        inject = if enospc {
            inject.with_sync_enospc(&filter, n)
        } else {
            inject.with_sync_eio(&filter, n)
        };
    }
    if let Some(path) = full_while {
        let path = PathBuf::from(path);
        armed.push(format!(
            "files cannot grow (ENOSPC) while \"{}\" exists",
            path.display()
        ));
        inject = inject.with_disk_full_while(&path);
    }
    Ok((Arc::new(inject.over(real)), armed))
}
