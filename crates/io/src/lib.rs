//! The narrow I/O layer under the WAL and the relation files.
//!
//! Everything walnut writes to disk goes through [`Vfs`] and [`FileIo`]. The durability contract
//! is the one the operating system gives and no more: **bytes passed to `write_at` may be lost,
//! torn (at 512-byte or 4 KiB granularity) or reordered with other unsynced writes until a
//! `sync_data`/`sync_all` of that file returns `Ok`.** A directory entry (create, rename, remove)
//! is durable only after `sync_dir` of its directory returns `Ok`. Code above this layer is
//! written against that contract, so a fault-injecting implementation can simulate any crash
//! the contract allows.
//!
//! A failed sync is never retried by callers: after a failed fsync the kernel may have dropped
//! the dirty pages, so a retry could "succeed" over lost data (PostgreSQL's fsyncgate, 2018).
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to open a file.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenMode {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Bypass the page cache (O_DIRECT). Buffers, offsets and lengths must then be aligned to
    /// 4096 bytes.
    pub direct: bool,
    /// Every write is durable on return (O_DSYNC), as for `wal_sync_method = open_datasync`.
    pub dsync: bool,
    /// Every write and the metadata it changes are durable on return (O_SYNC), as for
    /// `wal_sync_method = open_sync`.
    pub sync: bool,
}

/// One open file. Offsets and lengths are in bytes.
pub trait FileIo: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns the count read (0 at end of file).
    ///
    /// # Errors
    /// The OS error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Writes all of `buf` at `offset`, extending the file if needed. Not durable until synced.
    ///
    /// # Errors
    /// The OS error (ENOSPC as `StorageFull`/raw os error 28).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Makes the file's data (and the size, if it changed) durable: fdatasync(2).
    ///
    /// # Errors
    /// The OS error. The caller must treat it as fatal (PANIC), never retry.
    fn sync_data(&self) -> io::Result<()>;

    /// Makes data and all metadata durable: fsync(2).
    ///
    /// # Errors
    /// As for [`FileIo::sync_data`].
    fn sync_all(&self) -> io::Result<()>;

    /// The file's size in bytes.
    ///
    /// # Errors
    /// The OS error.
    fn len(&self) -> io::Result<u64>;

    /// Truncates or extends (with zeros) the file to `len` bytes. Not durable until synced.
    ///
    /// # Errors
    /// The OS error.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof`.
    ///
    /// # Errors
    /// The OS error or `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_at(&mut buf[done..], offset)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short read"));
            }
            done += n;
            offset += n as u64;
        }
        Ok(())
    }
}

/// The file system as walnut uses it. Paths are absolute or relative to the process's cwd.
pub trait Vfs: Send + Sync {
    /// Opens (or creates, per `mode`) a file for reading and writing.
    ///
    /// # Errors
    /// The OS error (`NotFound` if it does not exist and `mode.create` is false).
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>>;
    /// Removes a file. Durable after `sync_dir` of its directory.
    ///
    /// # Errors
    /// The OS error.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames a file, replacing `to`. Durable after `sync_dir`.
    ///
    /// # Errors
    /// The OS error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries durable.
    ///
    /// # Errors
    /// The OS error.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates a directory and its parents.
    ///
    /// # Errors
    /// The OS error.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names (not paths) of the entries of a directory, unsorted.
    ///
    /// # Errors
    /// The OS error.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// True if `path` exists.
    fn exists(&self, path: &Path) -> bool;
}

/// Alignment O_DIRECT needs for buffers, file offsets and lengths, bytes (the logical block
/// size of every device walnut supports; PostgreSQL's `PG_IO_ALIGN_SIZE`).
pub const DIRECT_IO_ALIGN: usize = 4096;

/// A zero-initialized byte buffer whose start is aligned to [`DIRECT_IO_ALIGN`], for O_DIRECT
/// reads and writes. Safe code only: it over-allocates a `Vec` by one alignment unit and uses
/// the aligned window inside it; the `Vec` is never resized, so the window never moves.
pub struct AlignedBuf {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` zero bytes (`len` is rounded up to a multiple of
    /// [`DIRECT_IO_ALIGN`]).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let len = len.div_ceil(DIRECT_IO_ALIGN).max(1) * DIRECT_IO_ALIGN;
        let storage = vec![0u8; len + DIRECT_IO_ALIGN];
        let misalign = storage.as_ptr() as usize % DIRECT_IO_ALIGN;
        let offset = (DIRECT_IO_ALIGN - misalign) % DIRECT_IO_ALIGN;
        AlignedBuf {
            storage,
            offset,
            len,
        }
    }

    /// Capacity of the aligned window, bytes (a multiple of [`DIRECT_IO_ALIGN`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: the window holds at least one alignment unit.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The aligned window.
    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }

    /// The aligned window, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

/// The real file system, through std and rustix.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealVfs;

struct RealFile {
    file: File,
    path: PathBuf,
}

impl FileIo for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        rustix::fs::fdatasync(&self.file).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("fdatasync {}: {e}", self.path.display()),
            )
        })
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

impl Vfs for RealVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut flags = 0;
        if mode.direct {
            flags |= rustix::fs::OFlags::DIRECT.bits() as i32;
        }
        if mode.dsync {
            flags |= rustix::fs::OFlags::DSYNC.bits() as i32;
        }
        if mode.sync {
            flags |= rustix::fs::OFlags::SYNC.bits() as i32;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(mode.create)
            .custom_flags(flags)
            .open(path)?;
        Ok(Arc::new(RealFile {
            file,
            path: path.to_path_buf(),
        }))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            out.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned() {
        for len in [1, 4096, 5000, 1 << 20] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_IO_ALIGN, 0);
            assert!(b.len() >= len && b.len() % DIRECT_IO_ALIGN == 0);
            assert!(b.as_slice().iter().all(|&x| x == 0));
            b.as_mut_slice()[0] = 7;
            assert_eq!(b.as_slice()[0], 7);
        }
    }

    #[test]
    fn write_read_round_trip() {
        let dir = std::env::temp_dir().join(format!("walnut-io-{}", std::process::id()));
        let vfs = RealVfs;
        vfs.create_dir_all(&dir).unwrap();
        let f = vfs
            .open(
                &dir.join("f"),
                OpenMode {
                    create: true,
                    ..Default::default()
                },
            )
            .unwrap();
        f.write_at(b"hello", 8192).unwrap();
        f.sync_data().unwrap();
        assert_eq!(f.len().unwrap(), 8197);
        let mut buf = [0u8; 5];
        f.read_exact_at(&mut buf, 8192).unwrap();
        assert_eq!(&buf, b"hello");
        let mut past = [0u8; 4];
        assert!(f.read_exact_at(&mut past, 8195).is_err());
        assert_eq!(vfs.list_dir(&dir).unwrap(), vec!["f".to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
