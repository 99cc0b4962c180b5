//! Test support shared by the storage crash tests: [`HookVfs`], a pass-through [`Vfs`] that
//! hands every call that changes a file or the namespace to a hook before (and around) running
//! it, so that a test can take a crash image at an exact point inside the engine — the Nth I/O
//! of a checkpoint, a B-tree split's allocation, the removal of a dropped table's file — or
//! watch what the engine does to a file (a short write cut back).
//!
//! The hook gets the call ([`Io`]) and a `run` closure that performs it; it must call `run` at
//! most once and return its result (or an error of its own instead). Reads, lengths and
//! listings go straight through.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::io;
use std::path::Path;
use std::sync::Arc;
use walnut_io::{CacheFlush, FileIo, OpenMode, Vfs};

/// A call that changes a file's bytes or size, makes something durable, or changes the
/// namespace.
#[derive(Debug)]
pub enum Io<'a> {
    /// `write_at`.
    Write {
        path: &'a Path,
        off: u64,
        buf: &'a [u8],
    },
    /// `set_len`.
    SetLen { path: &'a Path, len: u64 },
    /// `sync_data`, `sync_all` or `write_back` of a file.
    Sync { path: &'a Path },
    /// `sync_dir`.
    SyncDir { dir: &'a Path },
    /// `open` with `create` of a file that does not exist yet.
    Create { path: &'a Path },
    /// `remove`.
    Remove { path: &'a Path },
    /// `rename`.
    Rename { from: &'a Path, to: &'a Path },
}

impl Io<'_> {
    /// The file or directory the call is on (`from` for a rename).
    pub fn path(&self) -> &Path {
        match self {
            Io::Write { path, .. }
            | Io::SetLen { path, .. }
            | Io::Sync { path }
            | Io::Create { path }
            | Io::Remove { path }
            | Io::Rename { from: path, .. } => path,
            Io::SyncDir { dir } => dir,
        }
    }

    /// A short name of the call, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Io::Write { .. } => "write",
            Io::SetLen { .. } => "set_len",
            Io::Sync { .. } => "fsync",
            Io::SyncDir { .. } => "fsync of a directory",
            Io::Create { .. } => "create",
            Io::Remove { .. } => "remove",
            Io::Rename { .. } => "rename",
        }
    }
}

/// The hook: the call, and `run`, which performs it.
pub type Hook = dyn Fn(&Io<'_>, &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> + Send + Sync;

/// A [`Vfs`] over `inner` that passes every changing call through a [`Hook`].
pub struct HookVfs {
    inner: Arc<dyn Vfs>,
    hook: Arc<Hook>,
}

impl HookVfs {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Vfs>, hook: Arc<Hook>) -> HookVfs {
        HookVfs { inner, hook }
    }
}

struct HookFile {
    inner: Arc<dyn FileIo>,
    path: std::path::PathBuf,
    hook: Arc<Hook>,
}

impl FileIo for HookFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let io = Io::Write {
            path: &self.path,
            off: offset,
            buf,
        };
        (self.hook)(&io, &mut || self.inner.write_at(buf, offset))
    }

    fn sync_data(&self) -> io::Result<()> {
        (self.hook)(&Io::Sync { path: &self.path }, &mut || {
            self.inner.sync_data()
        })
    }

    fn sync_all(&self) -> io::Result<()> {
        (self.hook)(&Io::Sync { path: &self.path }, &mut || {
            self.inner.sync_all()
        })
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let io = Io::SetLen {
            path: &self.path,
            len,
        };
        (self.hook)(&io, &mut || self.inner.set_len(len))
    }

    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        (self.hook)(&Io::Sync { path: &self.path }, &mut || {
            self.inner.write_back(offset, len)
        })
    }

    fn allocated_bytes(&self) -> io::Result<u64> {
        self.inner.allocated_bytes()
    }
}

impl Vfs for HookVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        let mut file = None;
        let mut open = || {
            file = Some(self.inner.open(path, mode)?);
            Ok(())
        };
        if mode.create && !self.inner.exists(path) {
            (self.hook)(&Io::Create { path }, &mut open)?;
        } else {
            open()?;
        }
        let inner = file.ok_or_else(|| io::Error::other("the hook did not run the open"))?;
        Ok(Arc::new(HookFile {
            inner,
            path: path.to_path_buf(),
            hook: self.hook.clone(),
        }))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        (self.hook)(&Io::Remove { path }, &mut || self.inner.remove(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        (self.hook)(&Io::Rename { from, to }, &mut || {
            self.inner.rename(from, to)
        })
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        (self.hook)(&Io::SyncDir { dir }, &mut || self.inner.sync_dir(dir))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn cache_flusher(&self, dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        self.inner.cache_flusher(dir)
    }
}
