//! Test support shared by the storage crash tests: [`hook_vfs`], a `walnut_io::hook::HookVfs`
//! that hands every call that changes a file or the namespace to a hook before (and around)
//! running it, so that a test can take a crash image at an exact point inside the engine — the
//! Nth I/O of a checkpoint, a B-tree split's allocation, the removal of a dropped table's file
//! — or watch what the engine does to a file (a short write cut back).
//!
//! The hook gets the call ([`Io`]) and a `run` closure that performs it; it must call `run` at
//! most once and return its result (or an error of its own instead). Reads, lengths, listings
//! and cache flushes go straight through, to the inner file system's own methods.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::io;
use std::path::Path;
use std::sync::Arc;
use walnut_io::hook::{FileRef, HookVfs, Hooks};
use walnut_io::{FileIo, OpenMode, Vfs};

/// A call that changes a file's bytes or size, makes something durable, or changes the
/// namespace.
#[derive(Debug)]
pub enum Io<'a> {
    /// `write_at`, or `write_vectored_at` (its buffers concatenated).
    Write {
        path: &'a Path,
        off: u64,
        buf: &'a [u8],
    },
    /// `set_len`.
    SetLen { path: &'a Path, len: u64 },
    /// `allocate` (fallocate of `len` bytes at `off`).
    Allocate { path: &'a Path, off: u64, len: u64 },
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
            | Io::Allocate { path, .. }
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
            Io::Allocate { .. } => "allocate",
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

/// `inner`, with every changing call passed through `hook`.
pub fn hook_vfs(inner: Arc<dyn Vfs>, hook: Arc<Hook>) -> HookVfs {
    HookVfs::new(inner, Arc::new(Changes(hook)))
}

/// [`Hooks`] that hand each changing call to a [`Hook`]; the rest pass through.
struct Changes(Arc<Hook>);

impl Hooks for Changes {
    fn open(&self, vfs: &dyn Vfs, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        let mut file = None;
        let mut open = || {
            file = Some(vfs.open(path, mode)?);
            Ok(())
        };
        if mode.create && !vfs.exists(path) {
            (self.0)(&Io::Create { path }, &mut open)?;
        } else {
            open()?;
        }
        file.ok_or_else(|| io::Error::other("the hook did not run the open"))
    }

    fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        let io = Io::Write {
            path: file.path,
            off: offset,
            buf,
        };
        (self.0)(&io, &mut || file.io.write_at(buf, offset))
    }

    fn write_vectored_at(&self, file: FileRef<'_>, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let whole = bufs.concat();
        let io = Io::Write {
            path: file.path,
            off: offset,
            buf: &whole,
        };
        (self.0)(&io, &mut || file.io.write_vectored_at(bufs, offset))
    }

    fn allocate(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        let io = Io::Allocate {
            path: file.path,
            off: offset,
            len,
        };
        (self.0)(&io, &mut || file.io.allocate(offset, len))
    }

    fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
        (self.0)(&Io::Sync { path: file.path }, &mut || file.io.sync_data())
    }

    fn sync_all(&self, file: FileRef<'_>) -> io::Result<()> {
        (self.0)(&Io::Sync { path: file.path }, &mut || file.io.sync_all())
    }

    fn set_len(&self, file: FileRef<'_>, len: u64) -> io::Result<()> {
        let io = Io::SetLen {
            path: file.path,
            len,
        };
        (self.0)(&io, &mut || file.io.set_len(len))
    }

    fn write_back(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        (self.0)(&Io::Sync { path: file.path }, &mut || {
            file.io.write_back(offset, len)
        })
    }

    fn remove(&self, vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
        (self.0)(&Io::Remove { path }, &mut || vfs.remove(path))
    }

    fn rename(&self, vfs: &dyn Vfs, from: &Path, to: &Path) -> io::Result<()> {
        (self.0)(&Io::Rename { from, to }, &mut || vfs.rename(from, to))
    }

    fn sync_dir(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
        (self.0)(&Io::SyncDir { dir }, &mut || vfs.sync_dir(dir))
    }
}
