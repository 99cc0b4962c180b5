//! One forwarding [`Vfs`] that tests override per call (feature `testing`).
//!
//! A test that wants to count, delay, fail, log or stop at a call of the I/O layer does not
//! write a `Vfs` of its own: it implements [`Hooks`], overriding only the calls it changes, and
//! wraps the file system under test in a [`HookVfs`]. Every call of [`Vfs`], of each
//! [`FileIo`] it opens and of each [`CacheFlush`] it offers goes to the hook of the same name,
//! with the inner file system, file (and its path and open mode) or flusher; every hook's
//! default passes the call on unchanged. So a `HookVfs` whose hooks override nothing makes
//! exactly the calls of the file system it wraps — the trait defaults included: the inner
//! file's own `write_back`, `allocate`, `allocated_bytes`, `raw_fd`, `write_vectored_at` and `read_exact_at`, and the inner file system's
//! own `cache_flusher` — and a test through it takes production's sync path unless it says
//! otherwise. (A hand-written wrapper that forgets to forward a defaulted method silently gets
//! the trait's default instead: `write_back` becomes `sync_data`, `allocate` a refusal (so zeros are written), `allocated_bytes` 0, and no
//! cache flusher is offered, so the WAL never takes its `wal_sync_range` path.)
//!
//! ```text
//!   caller ──► HookVfs ──► Hooks::open(inner, path, mode) ──► inner Vfs
//!                 │            (default: inner.open(path, mode))
//!                 └─ wraps the file: HookFile ──► Hooks::sync_data(FileRef) ──► inner file
//! ```
//!
//! `read_exact_at` is a call of its own (the inner file's, which may not loop over `read_at`):
//! a hook that changes what reads return overrides both `read_at` and `read_exact_at`; so is
//! `write_vectored_at`: a hook that changes or counts writes overrides it with `write_at`.
//!
//! When a method is added to [`Vfs`], [`FileIo`] or [`CacheFlush`], it gets a hook here, and
//! the test at the end of this file, which checks that a `HookVfs` with no overrides behaves
//! exactly like the file system it wraps, calls it.

use crate::{CacheFlush, FileIo, OpenMode, Vfs};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file a [`Hooks`] call is on: its path and open mode as given to [`Vfs::open`], and the
/// inner file to pass the call on to.
#[derive(Clone, Copy)]
pub struct FileRef<'a> {
    /// The path the file was opened by.
    pub path: &'a Path,
    /// The mode it was opened with.
    pub mode: OpenMode,
    /// The inner file system's file.
    pub io: &'a dyn FileIo,
}

/// The device cache flusher a [`Hooks::flush`] call is on: the directory it was asked for
/// ([`Vfs::cache_flusher`]) and the inner flusher.
#[derive(Clone, Copy)]
pub struct FlushRef<'a> {
    /// The directory given to [`Vfs::cache_flusher`].
    pub dir: &'a Path,
    /// The inner file system's flusher.
    pub io: &'a dyn CacheFlush,
}

/// What a [`HookVfs`] does at each call. Every method has the name, arguments and errors of
/// the [`Vfs`], [`FileIo`] or [`CacheFlush`] method it stands for, plus what it is called on
/// (the inner file system, a [`FileRef`] or a [`FlushRef`]); every default passes the call on
/// to it unchanged and returns its result. Override only what the test changes.
pub trait Hooks: Send + Sync {
    /// [`Vfs::open`]. The file returned is wrapped, so that its calls come to these hooks too.
    ///
    /// # Errors
    /// The inner file system's, by default.
    fn open(&self, vfs: &dyn Vfs, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        vfs.open(path, mode)
    }

    /// [`Vfs::remove`].
    ///
    /// # Errors
    /// The inner file system's, by default.
    fn remove(&self, vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
        vfs.remove(path)
    }

    /// [`Vfs::rename`].
    ///
    /// # Errors
    /// The inner file system's, by default.
    fn rename(&self, vfs: &dyn Vfs, from: &Path, to: &Path) -> io::Result<()> {
        vfs.rename(from, to)
    }

    /// [`Vfs::sync_dir`].
    ///
    /// # Errors
    /// The inner file system's, by default.
    fn sync_dir(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
        vfs.sync_dir(dir)
    }

    /// [`Vfs::create_dir_all`].
    ///
    /// # Errors
    /// The inner file system's, by default.
    fn create_dir_all(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
        vfs.create_dir_all(dir)
    }

    /// [`Vfs::list_dir`].
    ///
    /// # Errors
    /// The inner file system's, by default.
    fn list_dir(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<Vec<String>> {
        vfs.list_dir(dir)
    }

    /// [`Vfs::exists`].
    fn exists(&self, vfs: &dyn Vfs, path: &Path) -> bool {
        vfs.exists(path)
    }

    /// [`Vfs::cache_flusher`]. The flusher returned is wrapped, so that its flushes come to
    /// [`Hooks::flush`].
    ///
    /// # Errors
    /// The inner file system's, by default.
    fn cache_flusher(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        vfs.cache_flusher(dir)
    }

    /// [`FileIo::read_at`] (bytes read; 0 at end of file). Not called for
    /// [`FileIo::read_exact_at`], which has a hook of its own.
    ///
    /// # Errors
    /// The inner file's, by default.
    fn read_at(&self, file: FileRef<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        file.io.read_at(buf, offset)
    }

    /// [`FileIo::read_exact_at`]: by default the inner file's own, not a loop over
    /// [`Hooks::read_at`].
    ///
    /// # Errors
    /// The inner file's, by default.
    fn read_exact_at(&self, file: FileRef<'_>, buf: &mut [u8], offset: u64) -> io::Result<()> {
        file.io.read_exact_at(buf, offset)
    }

    /// [`FileIo::write_at`].
    ///
    /// # Errors
    /// The inner file's, by default.
    fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        file.io.write_at(buf, offset)
    }

    /// [`FileIo::write_vectored_at`]: by default the inner file's own, not a loop over
    /// [`Hooks::write_at`].
    ///
    /// # Errors
    /// The inner file's, by default.
    fn write_vectored_at(&self, file: FileRef<'_>, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        file.io.write_vectored_at(bufs, offset)
    }

    /// [`FileIo::sync_data`].
    ///
    /// # Errors
    /// The inner file's, by default.
    fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
        file.io.sync_data()
    }

    /// [`FileIo::sync_all`].
    ///
    /// # Errors
    /// The inner file's, by default.
    fn sync_all(&self, file: FileRef<'_>) -> io::Result<()> {
        file.io.sync_all()
    }

    /// [`FileIo::len`] (bytes).
    ///
    /// # Errors
    /// The inner file's, by default.
    fn len(&self, file: FileRef<'_>) -> io::Result<u64> {
        file.io.len()
    }

    /// [`FileIo::set_len`] (bytes).
    ///
    /// # Errors
    /// The inner file's, by default.
    fn set_len(&self, file: FileRef<'_>, len: u64) -> io::Result<()> {
        file.io.set_len(len)
    }

    /// [`FileIo::write_back`] of `[offset, offset + len)` (bytes): by default the inner file's
    /// own, not [`Hooks::sync_data`].
    ///
    /// # Errors
    /// The inner file's, by default.
    fn write_back(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        file.io.write_back(offset, len)
    }

    /// [`FileIo::flush_range`].
    ///
    /// # Errors
    /// The inner file's, by default.
    fn flush_range(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        file.io.flush_range(offset, len)
    }

    /// [`FileIo::allocate`] of `[offset, offset + len)` (bytes): by default the inner file's
    /// own, not the trait's refusal.
    ///
    /// # Errors
    /// The inner file's, by default.
    fn allocate(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        file.io.allocate(offset, len)
    }

    /// [`FileIo::raw_fd`]: by default the inner file's. Reads a caller submits through the
    /// descriptor (io_uring) bypass [`Hooks::read_at`]; a hook that must see every read
    /// returns `None`.
    fn raw_fd<'a>(&self, file: FileRef<'a>) -> Option<std::os::fd::BorrowedFd<'a>> {
        file.io.raw_fd()
    }

    /// [`FileIo::allocated_bytes`]: by default the inner file's own.
    ///
    /// # Errors
    /// The inner file's, by default.
    fn allocated_bytes(&self, file: FileRef<'_>) -> io::Result<u64> {
        file.io.allocated_bytes()
    }

    /// [`CacheFlush::flush`] of a flusher that [`Hooks::cache_flusher`] returned.
    ///
    /// # Errors
    /// The inner flusher's, by default.
    fn flush(&self, flusher: FlushRef<'_>) -> io::Result<()> {
        flusher.io.flush()
    }
}

/// Hooks that override nothing: a [`HookVfs`] with them is the file system it wraps.
#[derive(Clone, Copy, Debug, Default)]
pub struct PassThrough;

impl Hooks for PassThrough {}

/// A [`Vfs`] over `inner` that sends every call, and every call of the files and flushers it
/// hands out, through [`Hooks`].
#[derive(Clone)]
pub struct HookVfs {
    inner: Arc<dyn Vfs>,
    hooks: Arc<dyn Hooks>,
}

impl HookVfs {
    /// Wraps `inner`; `hooks` decide each call.
    pub fn new(inner: Arc<dyn Vfs>, hooks: Arc<dyn Hooks>) -> HookVfs {
        HookVfs { inner, hooks }
    }

    /// The file system this one wraps.
    pub fn inner(&self) -> &Arc<dyn Vfs> {
        &self.inner
    }
}

/// A file opened through a [`HookVfs`].
struct HookFile {
    io: Arc<dyn FileIo>,
    path: PathBuf,
    mode: OpenMode,
    hooks: Arc<dyn Hooks>,
}

impl HookFile {
    fn at(&self) -> FileRef<'_> {
        FileRef {
            path: &self.path,
            mode: self.mode,
            io: &*self.io,
        }
    }
}

/// A cache flusher offered through a [`HookVfs`].
struct HookFlush {
    io: Arc<dyn CacheFlush>,
    dir: PathBuf,
    hooks: Arc<dyn Hooks>,
}

impl Vfs for HookVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        let io = self.hooks.open(&*self.inner, path, mode)?;
        Ok(Arc::new(HookFile {
            io,
            path: path.to_path_buf(),
            mode,
            hooks: self.hooks.clone(),
        }))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.hooks.remove(&*self.inner, path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.hooks.rename(&*self.inner, from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.hooks.sync_dir(&*self.inner, dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.hooks.create_dir_all(&*self.inner, dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.hooks.list_dir(&*self.inner, dir)
    }

    fn exists(&self, path: &Path) -> bool {
        self.hooks.exists(&*self.inner, path)
    }

    fn cache_flusher(&self, dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        let flusher = self.hooks.cache_flusher(&*self.inner, dir)?;
        Ok(flusher.map(|io| {
            Arc::new(HookFlush {
                io,
                dir: dir.to_path_buf(),
                hooks: self.hooks.clone(),
            }) as Arc<dyn CacheFlush>
        }))
    }
}

impl FileIo for HookFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.hooks.read_at(self.at(), buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.hooks.write_at(self.at(), buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.hooks.write_vectored_at(self.at(), bufs, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.hooks.sync_data(self.at())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.hooks.sync_all(self.at())
    }

    fn len(&self) -> io::Result<u64> {
        self.hooks.len(self.at())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.hooks.set_len(self.at(), len)
    }

    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hooks.write_back(self.at(), offset, len)
    }

    fn flush_range(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hooks.flush_range(self.at(), offset, len)
    }

    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hooks.allocate(self.at(), offset, len)
    }

    fn raw_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.hooks.raw_fd(self.at())
    }

    /// A hint with no effect on what the file holds: passed to the inner file, not hooked.
    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        self.io.will_need(offset, len)
    }

    fn allocated_bytes(&self) -> io::Result<u64> {
        self.hooks.allocated_bytes(self.at())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.hooks.read_exact_at(self.at(), buf, offset)
    }
}

impl CacheFlush for HookFlush {
    fn flush(&self) -> io::Result<()> {
        self.hooks.flush(FlushRef {
            dir: &self.dir,
            io: &*self.io,
        })
    }

    /// The inner flusher's description: it names what the flush goes through, which the
    /// hooks do not change.
    fn describe(&self) -> String {
        self.io.describe()
    }
}

#[cfg(test)]
mod tests;
