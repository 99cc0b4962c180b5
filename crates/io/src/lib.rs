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
//!
//! A second, narrower way to make bytes durable exists for the WAL: [`FileIo::write_back`] of
//! the written range followed by [`CacheFlush::flush`] of the file system that holds the file.
//! It is offered ([`Vfs::cache_flusher`]) only where it is known to be durable, and only for
//! writes that change no metadata but timestamps; see `write_back`.
//!
//! Test doubles, behind the cargo feature `testing` (crates turn it on in their
//! dev-dependencies; a release build of the server has neither):
//!
//! - `fault`: a fault-injecting, in-memory file system that builds crash images (unsynced
//!   writes dropped, torn and reordered), and faults injected into the real file system,
//!   armed from the environment for end-to-end tests;
//! - `hook`: one forwarding `Vfs` that a test overrides per call, to count, delay, fail or
//!   stop at a chosen call; with no overrides it makes exactly the calls of the file system it
//!   wraps, so a test through it takes production's path.
//!
//! A method added to [`Vfs`], [`FileIo`] or [`CacheFlush`] needs a hook in `hook`.
#![deny(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(any(test, feature = "testing"))]
pub mod fault;
#[cfg(any(test, feature = "testing"))]
pub mod hook;
#[cfg(target_os = "linux")]
pub mod uring;

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

    /// Writes the buffers `bufs`, one after another, as one contiguous range starting at
    /// `offset` (bytes), extending the file if needed: `pwritev(2)`, so adjacent blocks in
    /// separate buffers go out in one call. Not durable until synced; may be torn between
    /// and within the buffers like any write. The default writes each buffer with
    /// [`FileIo::write_at`].
    ///
    /// # Errors
    /// As [`FileIo::write_at`]; after an error any prefix of the range may have been written.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut off = offset;
        for b in bufs {
            self.write_at(b, off)?;
            off += b.len() as u64;
        }
        Ok(())
    }

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

    /// Sends the file's cached, not yet written bytes in `[offset, offset + len)` to the device
    /// and waits until the device has completed those writes; writes no metadata, and does not
    /// flush the device's volatile write cache. The bytes are durable once a later
    /// [`CacheFlush::flush`] of the flusher that [`Vfs::cache_flusher`] gave for this file's
    /// directory returns `Ok` — provided the writes changed no metadata but timestamps: they
    /// overwrote blocks that were allocated, initialized and synced before (as in a segment
    /// preallocated with zeros). Linux: `sync_file_range(2)` with `SYNC_FILE_RANGE_WAIT_BEFORE |
    /// SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER`.
    ///
    /// The default is [`FileIo::sync_data`], which is stronger.
    ///
    /// # Errors
    /// The OS error, including a writeback error (EIO) reported for the file since it was
    /// opened. The caller must treat it as fatal (PANIC), as for a failed fsync.
    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        self.sync_data()
    }

    /// Asks that the file's cached, not yet written bytes in `[offset, offset + len)` (`len` 0:
    /// to the end of the file) be written to the device now, and waits until they are. A
    /// hint for pacing write-back, with no promise of durability: [`FileIo::sync_data`] is
    /// still needed. It lets a data file's dirty page-cache pages go out in small batches that
    /// the caller paces, instead of all at once at the next fsync (PostgreSQL's
    /// `pg_flush_data`, used by `checkpoint_flush_after`). Linux: `sync_file_range(2)` with
    /// `SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER`.
    ///
    /// The default does nothing (a file with no page cache in front of it).
    ///
    /// # Errors
    /// The OS error, including a writeback error (EIO): the caller must treat it as fatal
    /// (PANIC), as for a failed fsync, since the error may not be reported again.
    fn flush_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// Reserves storage for the bytes `[offset, offset + len)` and, if that reaches past the
    /// end of the file, lengthens the file to `offset + len` bytes: afterwards a write inside
    /// the range cannot fail for lack of space (on file systems that overwrite in place), and
    /// the range reads as zeros where the file held nothing. Bytes the file already holds are
    /// left as they are. Like a write, the new size and the allocation are not durable until
    /// the file is synced: after a crash the file may be shorter. Linux: `fallocate(2)` with
    /// mode 0, as PostgreSQL's `FileFallocate` (`posix_fallocate`) for `mdzeroextend`.
    ///
    /// The default refuses with EOPNOTSUPP, the error of a file system that cannot allocate
    /// without writing; callers then write zeros instead.
    ///
    /// # Errors
    /// The OS error: ENOSPC (raw os error 28) if the space is not there; EOPNOTSUPP or EINVAL
    /// if the file system does not support it, which callers answer by writing zeros.
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }

    /// Bytes of storage allocated to the file (`st_blocks` × 512), to tell a segment written
    /// in full from a sparse one. The default, 0, means "unknown": callers then never rely on
    /// [`FileIo::write_back`] for this file.
    ///
    /// # Errors
    /// The OS error.
    fn allocated_bytes(&self) -> io::Result<u64> {
        Ok(0)
    }

    /// Tells the kernel that the bytes `[offset, offset + len)` will be read soon, so that it
    /// starts reading them into its page cache without waiting (a hint: it may do nothing).
    /// Linux: `posix_fadvise(2)` with `POSIX_FADV_WILLNEED`, as PostgreSQL's `FilePrefetch`
    /// (`smgrprefetch`, used by `recovery_prefetch`). Pointless for a file opened with
    /// O_DIRECT, whose reads bypass the page cache. The default does nothing.
    ///
    /// # Errors
    /// The OS error (EBADF, EINVAL, ESPIPE); callers may ignore it, the read will come anyway.
    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// The file's descriptor, for reads submitted through io_uring ([`crate::uring`]); `None`
    /// (the default) for a file that has none (the in-memory test file systems), whose reads
    /// then go through [`FileIo::read_at`].
    fn raw_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

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

    /// A way to flush the volatile write cache of the device under `dir`'s file system, if
    /// this file system is known to make [`FileIo::write_back`] plus [`CacheFlush::flush`]
    /// durable for overwrites of allocated blocks; `None` otherwise (the default), and then
    /// callers sync with [`FileIo::sync_data`].
    ///
    /// # Errors
    /// The OS error of inspecting `dir`.
    fn cache_flusher(&self, dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        let _ = dir;
        Ok(None)
    }
}

/// Flushes a device's volatile write cache: every write the device completed before
/// [`CacheFlush::flush`] was called is durable when it returns `Ok` (the block layer's
/// `REQ_PREFLUSH`).
pub trait CacheFlush: Send + Sync {
    /// Issues the cache flush and waits for it.
    ///
    /// # Errors
    /// The OS error. The caller must treat it as fatal (PANIC), never retry it.
    fn flush(&self) -> io::Result<()>;

    /// What the flush goes through, for logs (e.g. `fdatasync of "/"`).
    fn describe(&self) -> String;
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
    /// Whether ext4 journals this file's data (`chattr +j`), looked up on the first
    /// `write_back`: such data is durable only after a journal commit, which `fdatasync` forces.
    journaled_data: std::sync::OnceLock<bool>,
}

/// `sync_file_range(2)` flags: wait for writeback already in progress, start writeback of the
/// dirty pages in the range, and wait for it to complete.
const SYNC_FILE_RANGE_WAIT_ALL: libc::c_uint = libc::SYNC_FILE_RANGE_WAIT_BEFORE
    | libc::SYNC_FILE_RANGE_WRITE
    | libc::SYNC_FILE_RANGE_WAIT_AFTER;

/// `sync_file_range(2)` on `file` (rustix does not wrap it).
#[allow(unsafe_code)]
fn sync_file_range(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let off = libc::off64_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
    let n = libc::off64_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length out of range"))?;
    // SAFETY: `file` owns an open descriptor for the duration of the call; the other arguments
    // are plain integers, and the call touches no memory of ours.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), off, n, SYNC_FILE_RANGE_WAIT_ALL) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl FileIo for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let slices: Vec<io::IoSlice<'_>> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
        let mut done = loop {
            match rustix::io::pwritev(&self.file, &slices, offset) {
                Ok(n) => break n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        // A short pwritev (a full disk, a signal): the rest one buffer at a time, so that the
        // error, if any, is the one `write_at` reports.
        let mut start = 0;
        for b in bufs {
            let end = start + b.len();
            if done < end {
                self.file
                    .write_all_at(&b[done - start..], offset + done as u64)?;
                done = end;
            }
            start = end;
        }
        debug_assert_eq!(done, total);
        Ok(())
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

    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        let journaled = *self.journaled_data.get_or_init(|| {
            // A file system without the flags ioctl journals no file data.
            rustix::fs::ioctl_getflags(&self.file)
                .map(|f| f.contains(rustix::fs::IFlags::JOURNALING))
                .unwrap_or(false)
        });
        if journaled {
            return self.sync_data();
        }
        sync_file_range(&self.file, offset, len).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("sync_file_range {}: {e}", self.path.display()),
            )
        })
    }

    fn flush_range(&self, offset: u64, len: u64) -> io::Result<()> {
        sync_file_range(&self.file, offset, len).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("sync_file_range {}: {e}", self.path.display()),
            )
        })
    }

    fn raw_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Some(self.file.as_fd())
    }

    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        let len = std::num::NonZeroU64::new(len);
        rustix::fs::fadvise(&self.file, offset, len, rustix::fs::Advice::WillNeed)
            .map_err(io::Error::from)
    }

    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        rustix::fs::fallocate(&self.file, rustix::fs::FallocateFlags::empty(), offset, len)
            .map_err(io::Error::from)
    }

    fn allocated_bytes(&self) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(self.file.metadata()?.blocks().saturating_mul(512))
    }
}

/// `statfs(2)` magic of ext2, ext3 and ext4.
const EXT4_SUPER_MAGIC: i64 = 0xEF53;

/// Flushes the device cache with `fdatasync(2)` of a directory walnut never writes (the root of
/// the file system that holds the data): ext4 always ends `fdatasync` with a cache flush
/// (`blkdev_issue_flush` in `ext4_sync_file`, with or without a journal, unless mounted
/// `nobarrier`), and a clean inode adds no other write.
struct RootDirFlush {
    dir: File,
    path: PathBuf,
}

impl CacheFlush for RootDirFlush {
    fn flush(&self) -> io::Result<()> {
        rustix::fs::fdatasync(&self.dir).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("fdatasync {}: {e}", self.path.display()),
            )
        })
    }

    fn describe(&self) -> String {
        format!("fdatasync of \"{}\"", self.path.display())
    }
}

/// One line of `/proc/self/mountinfo`: mount point, device (major:minor), file system type and
/// super-block options.
#[derive(Debug, PartialEq, Eq)]
struct MountInfo {
    mount_point: PathBuf,
    dev: (u32, u32),
    fs_type: String,
    super_options: Vec<String>,
}

/// Parses one `/proc/self/mountinfo` line (proc(5)); `None` if it is malformed.
fn parse_mountinfo_line(line: &str) -> Option<MountInfo> {
    let (pre, post) = line.split_once(" - ")?;
    let pre: Vec<&str> = pre.split(' ').collect();
    let (maj, min) = pre.get(2)?.split_once(':')?;
    let mount_point = unescape_mount_path(pre.get(4)?);
    let mut post = post.split(' ');
    let fs_type = post.next()?.to_string();
    let _source = post.next()?;
    let super_options = post
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::to_string)
        .collect();
    Some(MountInfo {
        mount_point: PathBuf::from(mount_point),
        dev: (maj.parse().ok()?, min.parse().ok()?),
        fs_type,
        super_options,
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space and so on).
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount that holds `path` (canonical) on device `dev`: the entry with that device whose
/// mount point is the longest prefix of `path`.
fn mount_of<'a>(mounts: &'a [MountInfo], path: &Path, dev: (u32, u32)) -> Option<&'a MountInfo> {
    mounts
        .iter()
        .filter(|m| m.dev == dev && path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())
}

/// Why `RealVfs` offers no cache flusher for a mount, or `None` if it does.
fn cache_flush_refusal(m: &MountInfo, f_type: i64) -> Option<String> {
    if f_type != EXT4_SUPER_MAGIC || !matches!(m.fs_type.as_str(), "ext2" | "ext3" | "ext4") {
        return Some(format!("file system {} is not ext2/3/4", m.fs_type));
    }
    for opt in &m.super_options {
        if opt == "data=journal"
            || opt.starts_with("dax")
            || opt == "nobarrier"
            || opt == "barrier=0"
        {
            return Some(format!("mounted with {opt}"));
        }
    }
    None
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
            journaled_data: std::sync::OnceLock::new(),
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

    /// On ext2/3/4 (not mounted `data=journal`, `dax` or `nobarrier`): `fdatasync` of the
    /// mount's root directory, which walnut never writes. Elsewhere `None`: on other file
    /// systems a clean `fdatasync` is not known to flush the device cache (btrfs may skip it),
    /// or `fdatasync` of the file already costs no metadata write (XFS, journaled ext4 with
    /// timestamp-only changes).
    fn cache_flusher(&self, dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        use std::os::unix::fs::MetadataExt;
        let dir = std::fs::canonicalize(dir)?;
        let st = rustix::fs::statfs(&dir).map_err(io::Error::from)?;
        let dev = std::fs::metadata(&dir)?.dev();
        let dev = (rustix::fs::major(dev), rustix::fs::minor(dev));
        let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return Ok(None);
        };
        let mounts: Vec<MountInfo> = text.lines().filter_map(parse_mountinfo_line).collect();
        let Some(m) = mount_of(&mounts, &dir, dev) else {
            return Ok(None);
        };
        #[allow(clippy::unnecessary_cast)] // f_type is i64 or i32 by target
        if cache_flush_refusal(m, st.f_type as i64).is_some() {
            return Ok(None);
        }
        let root = File::open(&m.mount_point)?;
        Ok(Some(Arc::new(RootDirFlush {
            dir: root,
            path: m.mount_point.clone(),
        })))
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

    #[test]
    fn mountinfo_lines_parse() {
        let l = "36 35 98:0 /mnt1 /mnt/my\\040disk rw,noatime master:1 - ext4 /dev/root rw,errors=continue,data=journal";
        let m = parse_mountinfo_line(l).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/mnt/my disk"));
        assert_eq!(m.dev, (98, 0));
        assert_eq!(m.fs_type, "ext4");
        assert!(m.super_options.iter().any(|o| o == "data=journal"));
        assert_eq!(
            cache_flush_refusal(&m, EXT4_SUPER_MAGIC).as_deref(),
            Some("mounted with data=journal")
        );
        let l = "1 0 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,barrier";
        let root = parse_mountinfo_line(l).unwrap();
        assert_eq!(cache_flush_refusal(&root, EXT4_SUPER_MAGIC), None);
        assert!(
            cache_flush_refusal(&root, 0x5846_5342).is_some(),
            "XFS magic"
        );
        let l = "2 1 0:30 / /tmp rw - tmpfs tmpfs rw";
        let tmp = parse_mountinfo_line(l).unwrap();
        assert!(cache_flush_refusal(&tmp, 0x0102_1994).is_some());
        assert!(parse_mountinfo_line("garbage").is_none());
        assert!(parse_mountinfo_line("1 2 x / / rw - ext4 /dev/x rw").is_none());
        // The longest mount point on the same device wins; other devices never do.
        let mounts = vec![root, tmp, {
            let mut m = parse_mountinfo_line(l).unwrap();
            m.mount_point = PathBuf::from("/var");
            m.dev = (254, 0);
            m
        }];
        assert_eq!(
            mount_of(&mounts, Path::new("/var/lib/x"), (254, 0))
                .unwrap()
                .mount_point,
            PathBuf::from("/var")
        );
        assert_eq!(
            mount_of(&mounts, Path::new("/srv"), (254, 0))
                .unwrap()
                .mount_point,
            PathBuf::from("/")
        );
        assert!(mount_of(&mounts, Path::new("/tmp/a"), (254, 1)).is_none());
        assert_eq!(unescape_mount_path("a\\134b\\"), "a\\b\\");
    }

    #[test]
    fn write_back_then_cache_flush_round_trip() {
        let dir = tempfile_dir("wb");
        let vfs = RealVfs;
        let f = vfs
            .open(
                &dir.join("seg"),
                OpenMode {
                    create: true,
                    ..Default::default()
                },
            )
            .unwrap();
        f.write_at(&vec![0u8; 1 << 20], 0).unwrap();
        f.sync_all().unwrap();
        assert!(f.allocated_bytes().unwrap() >= 1 << 20 || cfg!(not(target_os = "linux")));
        f.write_at(b"walnut", 4096).unwrap();
        f.write_back(4096, 6).unwrap();
        // Wherever the flusher is offered, it must work; where it is not, callers fdatasync.
        if let Some(fl) = vfs.cache_flusher(&dir).unwrap() {
            fl.flush().unwrap();
            assert!(fl.describe().starts_with("fdatasync of"));
        }
        let mut buf = [0u8; 6];
        f.read_exact_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf, b"walnut");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn allocate_lengthens_the_file_with_zeros_and_keeps_its_bytes() {
        let dir = tempfile_dir("alloc");
        let f = RealVfs
            .open(
                &dir.join("rel"),
                OpenMode {
                    create: true,
                    ..Default::default()
                },
            )
            .unwrap();
        f.write_at(&[7u8; 8192], 0).unwrap();
        match f.allocate(0, 10 * 8192) {
            Ok(()) => {
                assert_eq!(f.len().unwrap(), 10 * 8192);
                let mut buf = vec![1u8; 10 * 8192];
                f.read_exact_at(&mut buf, 0).unwrap();
                assert!(buf[..8192].iter().all(|&b| b == 7), "kept its bytes");
                assert!(buf[8192..].iter().all(|&b| b == 0), "new space is zeros");
            }
            // A file system without fallocate (callers then write zeros).
            Err(e) => assert!(
                matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)),
                "{e}"
            ),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_vectored_at_writes_the_buffers_back_to_back() {
        let dir = tempfile_dir("wv");
        let f = RealVfs
            .open(
                &dir.join("rel"),
                OpenMode {
                    create: true,
                    ..Default::default()
                },
            )
            .unwrap();
        let (a, b, c) = (vec![1u8; 8192], vec![2u8; 8192], vec![3u8; 100]);
        f.write_vectored_at(&[&a, &b, &c], 4096).unwrap();
        assert_eq!(f.len().unwrap(), 4096 + 2 * 8192 + 100);
        let mut buf = vec![0u8; 2 * 8192 + 100];
        f.read_exact_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf[..8192], &a[..]);
        assert_eq!(&buf[8192..16384], &b[..]);
        assert_eq!(&buf[16384..], &c[..]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("walnut-io-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
