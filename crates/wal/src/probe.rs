//! The flush-rate probe: what one durable WAL flush costs on the disk that holds a directory.
//!
//! It is walnut's version of PostgreSQL's `pg_test_fsync` (`src/bin/pg_test_fsync`), shaped
//! like a WAL flush rather than like pg_test_fsync's rewrite of offset 0:
//!
//! 1. create [`PROBE_FILE_NAME`] in the directory and fill it with [`PROBE_FILE_BYTES`] of
//!    zeros, then `sync_all` it, so the timed flushes overwrite allocated blocks and change no
//!    metadata but the modification time (as a preallocated WAL segment does);
//! 2. reopen it with the method's flags (`SyncMethod::open_mode`, O_DIRECT if asked);
//! 3. until the duration has passed (at least once): write `write_bytes` at the next offset,
//!    wrapping to 0 at the end of the file, and make it durable the method's way:
//!
//!    | method          | one flush                                  |
//!    |-----------------|--------------------------------------------|
//!    | `fdatasync`     | `write_at`, then `sync_data` (fdatasync(2)) |
//!    | `fsync`         | `write_at`, then `sync_all` (fsync(2))      |
//!    | `open_datasync` | `write_at` on an O_DSYNC file               |
//!    | `open_sync`     | `write_at` on an O_SYNC file                |
//!
//!    With `range` (the `wal_sync_range` path, `fdatasync` only), the sync is instead
//!    `write_back` of the written range and a flush of the device cache
//!    ([`walnut_io::Vfs::cache_flusher`]); a directory whose file system offers no cache
//!    flusher gives `Unsupported`. With an `interval`, the probe sleeps that long after each
//!    flush (untimed), as a paced workload would: on some file systems the cost of a flush
//!    depends on whether the clock ticked since the last one (ext4 without a journal writes the
//!    inode with its new modification time at most once per tick).
//! 4. remove the file, whether the probe succeeded or not.
//!
//! Each flush is timed on its own; the result gives the rate over the whole run and the mean,
//! median, 99th percentile and maximum of the per-flush latencies. The written bytes are
//! pseudo-random, so compressing or deduplicating storage cannot skip them.
//!
//! On Linux all four methods are durable, so the choice among them is by cost alone, and speed
//! is not the first measure of it. The server's start-up probe (`probe_sync_method` in the
//! server's `engine.rs`) first keeps the methods whose flushes cost the fewest disk write
//! requests, within 0.1 per flush of the fewest (counted from the disk's own statistics; on an
//! IOPS-limited disk they decide the flush rate, and a method that also writes the segment's
//! inode, three requests instead of two, gets a third fewer flushes, which short latency samples
//! under a throttle do not show reliably), and only among those takes the fastest with
//! [`choose_sync_method`]; by speed alone only where the counts cannot be read (no
//! `/sys/dev/block` statistics for the disk). [`choose_sync_method`] keeps the earliest result
//! (in [`SyncMethod::ALL`] order, `fdatasync` first) unless a later one is faster by
//! [`CHOOSE_MARGIN`].

use crate::SyncMethod;
use hdrhistogram::Histogram;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use walnut_io::{AlignedBuf, CacheFlush, FileIo, OpenMode, Vfs, DIRECT_IO_ALIGN};

/// Name of the temporary file the probe creates in the directory it measures. An existing file
/// of this name is overwritten and then removed.
pub const PROBE_FILE_NAME: &str = "walnut_probe.tmp";

/// Size of the preallocated probe file, bytes (one WAL segment's worth). The file is larger
/// when a single write is larger.
pub const PROBE_FILE_BYTES: u64 = 16 << 20;

/// Bytes written per `write_at` while preallocating.
const FILL_CHUNK_BYTES: usize = 1 << 20;

// `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace says 1.80).
#[allow(clippy::manual_is_multiple_of)]
const _: () = assert!(
    PROBE_FILE_BYTES % DIRECT_IO_ALIGN as u64 == 0
        && PROBE_FILE_BYTES % FILL_CHUNK_BYTES as u64 == 0
);

/// Largest latency the histogram tracks, ns (one hour); longer flushes count as this.
const LATENCY_NS_MAX: u64 = 3_600_000_000_000;

/// Result of one probe run: one sync method, buffered or direct.
#[derive(Clone, Debug)]
pub struct ProbeResult {
    /// Method probed.
    pub method: SyncMethod,
    /// The `wal_sync_range` path was probed (write-back plus a device cache flush).
    pub range: bool,
    /// True if the file was written with O_DIRECT (`io_direct = wal`).
    pub direct: bool,
    /// Durable flushes per second over the whole run (count divided by elapsed time).
    pub flushes_per_sec: f64,
    /// Mean latency of one flush (write plus sync), µs.
    pub mean_us: f64,
    /// Median latency of one flush, µs (histogram value, within 0.1%).
    pub p50_us: f64,
    /// 99th-percentile latency of one flush, µs (histogram value, within 0.1%).
    pub p99_us: f64,
    /// Largest latency of one flush, µs (histogram value, within 0.1%).
    pub max_us: f64,
    /// Number of timed flushes, at least 1.
    pub flushes: u64,
    /// Bytes written per flush: the requested size, rounded up to a multiple of 4096 when
    /// `direct`.
    pub write_bytes: usize,
}

/// Measures how many durable WAL-like flushes per second the disk holding `dir` sustains with
/// `method`, writing `write_bytes` per flush (rounded up to a multiple of 4096 bytes when
/// `direct`), for `duration` (at least one flush is timed, so a zero duration still measures).
///
/// Creates [`PROBE_FILE_NAME`] in `dir` (overwriting a file of that name), preallocates it with
/// [`PROBE_FILE_BYTES`] of zeros and removes it before returning, on success and on error. See
/// the module documentation for the exact steps.
///
/// # Errors
/// - `InvalidInput` if `write_bytes` is 0;
/// - `Unsupported` if `direct` and the file system refuses O_DIRECT (EINVAL on open or on an
///   aligned write, as on tmpfs);
/// - any other error of creating, writing, syncing or removing the file (e.g. `NotFound` if
///   `dir` does not exist, `StorageFull`), with the file's path in the message.
pub fn probe_flush_rate(
    vfs: &dyn Vfs,
    dir: &Path,
    method: SyncMethod,
    direct: bool,
    write_bytes: usize,
    duration: Duration,
) -> io::Result<ProbeResult> {
    probe(
        vfs,
        dir,
        &ProbeSpec {
            method,
            direct,
            range: false,
            write_bytes,
            duration,
            interval: Duration::ZERO,
        },
    )
}

/// What [`probe`] measures.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec {
    /// The sync method.
    pub method: SyncMethod,
    /// O_DIRECT writes (`io_direct = wal`).
    pub direct: bool,
    /// The `wal_sync_range` path; only with [`SyncMethod::Fdatasync`].
    pub range: bool,
    /// Bytes per write (rounded up to 4096 when `direct`); at least 1.
    pub write_bytes: usize,
    /// How long to measure (at least one flush is timed).
    pub duration: Duration,
    /// Untimed pause after each flush; zero for back-to-back flushes.
    pub interval: Duration,
}

/// [`probe_flush_rate`] with every option: see [`ProbeSpec`] and the module documentation.
/// With an `interval`, `flushes_per_sec` counts only the time spent flushing.
///
/// # Errors
/// As [`probe_flush_rate`]; also `InvalidInput` for `range` with a method other than
/// `fdatasync`, and `Unsupported` for `range` where the file system offers no cache flusher.
pub fn probe(vfs: &dyn Vfs, dir: &Path, spec: &ProbeSpec) -> io::Result<ProbeResult> {
    let ProbeSpec {
        method,
        direct,
        range,
        write_bytes,
        duration,
        interval,
    } = *spec;
    if range && method != SyncMethod::Fdatasync {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "flush probe: the range path exists only for fdatasync",
        ));
    }
    let flusher = if range {
        Some(vfs.cache_flusher(dir)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "wal_sync_range is not available on this file system",
            )
        })?)
    } else {
        None
    };
    if write_bytes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "flush probe: write size must be at least 1 byte",
        ));
    }
    let write_len = if direct {
        write_bytes.div_ceil(DIRECT_IO_ALIGN) * DIRECT_IO_ALIGN
    } else {
        write_bytes
    };
    let file = ProbeFile {
        vfs,
        path: dir.join(PROBE_FILE_NAME),
        removed: false,
    };
    let measured = measure(
        vfs,
        &file.path,
        method,
        direct,
        flusher.as_deref(),
        write_len,
        duration,
        interval,
    );
    let removed = file.remove();
    let result = measured?;
    removed?;
    Ok(result)
}

/// A method must beat the earlier candidates by this factor to be chosen: on most disks the
/// four methods are within noise of each other, and a stable choice beats a random one.
pub const CHOOSE_MARGIN: f64 = 1.10;

/// The method that gives the most flushes per second, or `None` if no result measured any
/// flush. Buffered results are compared when there are any; direct results only when every
/// given result is direct. A later result replaces the best so far only if it is faster by
/// [`CHOOSE_MARGIN`], so with results in [`SyncMethod::ALL`] order `fdatasync`, PostgreSQL's
/// Linux default, wins unless another method is clearly faster.
pub fn choose_sync_method(results: &[ProbeResult]) -> Option<SyncMethod> {
    let direct = results.iter().all(|r| r.direct);
    let mut best: Option<&ProbeResult> = None;
    for r in results.iter().filter(|r| r.direct == direct) {
        if !(r.flushes_per_sec.is_finite() && r.flushes_per_sec > 0.0) {
            continue;
        }
        match best {
            Some(b) if b.flushes_per_sec * CHOOSE_MARGIN >= r.flushes_per_sec => {}
            _ => best = Some(r),
        }
    }
    best.map(|r| r.method)
}

/// The probe file's path; removes the file when dropped unless [`ProbeFile::remove`] did, so a
/// panic does not leave it behind either.
struct ProbeFile<'a> {
    vfs: &'a dyn Vfs,
    path: PathBuf,
    removed: bool,
}

impl ProbeFile<'_> {
    /// Removes the file; a file that was never created is not an error.
    fn remove(mut self) -> io::Result<()> {
        self.removed = true;
        match self.vfs.remove(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(with_path(e, "remove", &self.path))
            }
            _ => Ok(()),
        }
    }
}

impl Drop for ProbeFile<'_> {
    fn drop(&mut self) {
        if !self.removed {
            // Best effort: the error that got us here is the one worth reporting.
            let _ = self.vfs.remove(&self.path);
        }
    }
}

/// Steps 1 to 3 of the probe; every file handle is closed on return.
#[allow(clippy::too_many_arguments)]
fn measure(
    vfs: &dyn Vfs,
    path: &Path,
    method: SyncMethod,
    direct: bool,
    flusher: Option<&dyn CacheFlush>,
    write_len: usize,
    duration: Duration,
    interval: Duration,
) -> io::Result<ProbeResult> {
    let file_len = PROBE_FILE_BYTES.max(align_up(write_len as u64));
    preallocate(vfs, path, file_len)?;
    let file = open_for_flush(vfs, path, method, direct)?;
    let mut buf = AlignedBuf::zeroed(write_len);
    fill_pseudo_random(buf.as_mut_slice());
    let data = &buf.as_slice()[..write_len];
    let mut latency_ns =
        Histogram::<u64>::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("constant bounds are valid");
    let mut latency_ns_sum: u128 = 0;
    let mut flushes = 0u64;
    let mut offset = 0u64;
    let mut paused = Duration::ZERO;
    let start = Instant::now();
    loop {
        let flush_start = Instant::now();
        flush_once(file.as_ref(), method, direct, flusher, data, offset, path)?;
        let elapsed = flush_start.elapsed();
        if !interval.is_zero() {
            let p = Instant::now();
            std::thread::sleep(interval);
            paused += p.elapsed();
        }
        latency_ns_sum += elapsed.as_nanos();
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        latency_ns.saturating_record(ns.max(1));
        flushes += 1;
        offset = next_offset(offset, write_len as u64, file_len);
        if start.elapsed() >= duration {
            break;
        }
    }
    let total_secs = start.elapsed().saturating_sub(paused).as_secs_f64();
    assert!(
        flushes >= 1 && flushes == latency_ns.len(),
        "the loop times at least one flush"
    );
    let us = |ns: u64| ns as f64 / 1_000.0;
    Ok(ProbeResult {
        method,
        range: flusher.is_some(),
        direct,
        flushes_per_sec: flushes as f64 / total_secs.max(f64::MIN_POSITIVE),
        mean_us: latency_ns_sum as f64 / flushes as f64 / 1_000.0,
        p50_us: us(latency_ns.value_at_quantile(0.50)),
        p99_us: us(latency_ns.value_at_quantile(0.99)),
        max_us: us(latency_ns.max()),
        flushes,
        write_bytes: write_len,
    })
}

/// Creates the file at `path` holding `file_len` zero bytes, durably (`sync_all`), through a
/// buffered handle that is closed on return.
fn preallocate(vfs: &dyn Vfs, path: &Path, file_len: u64) -> io::Result<()> {
    let mode = OpenMode {
        create: true,
        ..OpenMode::default()
    };
    let file = vfs
        .open(path, mode)
        .map_err(|e| with_path(e, "create", path))?;
    file.set_len(0)
        .map_err(|e| with_path(e, "truncate", path))?;
    let zeros = vec![0u8; FILL_CHUNK_BYTES];
    let mut offset = 0u64;
    while offset < file_len {
        let n = (file_len - offset).min(FILL_CHUNK_BYTES as u64) as usize;
        file.write_at(&zeros[..n], offset)
            .map_err(|e| with_path(e, "preallocate", path))?;
        offset += n as u64;
    }
    file.sync_all().map_err(|e| with_path(e, "fsync", path))
}

/// Opens the preallocated file the way WAL segments are opened for `method` and `direct`.
fn open_for_flush(
    vfs: &dyn Vfs,
    path: &Path,
    method: SyncMethod,
    direct: bool,
) -> io::Result<std::sync::Arc<dyn FileIo>> {
    vfs.open(path, method.open_mode(direct)).map_err(|e| {
        if direct && e.kind() == io::ErrorKind::InvalidInput {
            direct_unsupported(e, "open", path)
        } else {
            with_path(e, "open", path)
        }
    })
}

/// One timed flush: the write and, for `fdatasync`/`fsync`, the sync call (with a `flusher`:
/// write-back of the range and a device cache flush).
fn flush_once(
    file: &dyn FileIo,
    method: SyncMethod,
    direct: bool,
    flusher: Option<&dyn CacheFlush>,
    data: &[u8],
    offset: u64,
    path: &Path,
) -> io::Result<()> {
    file.write_at(data, offset).map_err(|e| {
        if direct && e.kind() == io::ErrorKind::InvalidInput {
            direct_unsupported(e, "write", path)
        } else {
            with_path(e, "write", path)
        }
    })?;
    if let Some(f) = flusher {
        file.write_back(offset, data.len() as u64)
            .map_err(|e| with_path(e, "write back", path))?;
        return f.flush().map_err(|e| with_path(e, "flush cache", path));
    }
    match method {
        SyncMethod::Fdatasync => file
            .sync_data()
            .map_err(|e| with_path(e, "fdatasync", path)),
        SyncMethod::Fsync => file.sync_all().map_err(|e| with_path(e, "fsync", path)),
        SyncMethod::OpenDatasync | SyncMethod::OpenSync => Ok(()),
    }
}

/// Where the write after one at `offset` goes: right after it, or back at 0 when it would not
/// fit in the `file_len`-byte file. Requires `write_len <= file_len`.
fn next_offset(offset: u64, write_len: u64, file_len: u64) -> u64 {
    assert!(write_len > 0 && write_len <= file_len);
    let next = offset + write_len;
    if next + write_len > file_len {
        0
    } else {
        next
    }
}

/// `len` rounded up to a multiple of [`DIRECT_IO_ALIGN`].
fn align_up(len: u64) -> u64 {
    len.div_ceil(DIRECT_IO_ALIGN as u64) * DIRECT_IO_ALIGN as u64
}

/// Fills `buf` with a fixed xorshift64 sequence: incompressible, and the same every run.
fn fill_pseudo_random(buf: &mut [u8]) {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for chunk in buf.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}

/// `e` with the operation and path in its message; the kind is kept.
fn with_path(e: io::Error, op: &str, path: &Path) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("flush probe: {op} {}: {e}", path.display()),
    )
}

/// The `Unsupported` error for a file system that rejects O_DIRECT.
fn direct_unsupported(e: io::Error, op: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "O_DIRECT is not supported by the file system holding {} ({op} failed: {e})",
            path.parent().unwrap_or(path).display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use walnut_io::hook::{FileRef, HookVfs, Hooks};
    use walnut_io::RealVfs;

    const SHORT: Duration = Duration::from_millis(50);

    fn check(r: &ProbeResult, method: SyncMethod, direct: bool) {
        assert_eq!(r.method, method);
        assert_eq!(r.direct, direct);
        assert!(r.flushes >= 1);
        assert!(r.flushes_per_sec > 0.0 && r.flushes_per_sec.is_finite());
        assert!(r.mean_us > 0.0 && r.mean_us.is_finite());
        assert!(r.p50_us > 0.0 && r.p50_us <= r.p99_us && r.p99_us <= r.max_us);
    }

    fn assert_probe_file_gone(dir: &Path) {
        assert!(!dir.join(PROBE_FILE_NAME).exists());
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0);
    }

    #[test]
    fn probe_buffered_all_methods() {
        let dir = tempfile::tempdir().unwrap();
        for method in SyncMethod::ALL {
            let r = probe_flush_rate(&RealVfs, dir.path(), method, false, 8192, SHORT).unwrap();
            check(&r, method, false);
            assert_eq!(r.write_bytes, 8192);
            assert_probe_file_gone(dir.path());
        }
    }

    #[test]
    fn probe_direct_all_methods_or_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        for method in SyncMethod::ALL {
            match probe_flush_rate(&RealVfs, dir.path(), method, true, 5000, SHORT) {
                Ok(r) => {
                    check(&r, method, true);
                    assert_eq!(r.write_bytes, 8192, "5000 bytes round up to 8192");
                }
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    eprintln!("skipping direct {method}: {e}");
                }
                Err(e) => panic!("direct {method}: {e}"),
            }
            assert_probe_file_gone(dir.path());
        }
    }

    #[test]
    fn probe_rejects_zero_size_and_missing_dir() {
        let dir = tempfile::tempdir().unwrap();
        let e =
            probe_flush_rate(&RealVfs, dir.path(), SyncMethod::Fsync, false, 0, SHORT).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let missing = dir.path().join("missing");
        let e = probe_flush_rate(&RealVfs, &missing, SyncMethod::Fsync, false, 8192, SHORT)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_probe_file_gone(dir.path());
    }

    /// Hooks over the real file system that record open modes and count sync calls, and can
    /// make `sync_data` fail or refuse O_DIRECT with EINVAL (as tmpfs did before Linux 6.6).
    #[derive(Default)]
    struct Recording {
        modes: Mutex<Vec<OpenMode>>,
        counts: Arc<Counts>,
        fail_sync_data: bool,
        reject_direct: bool,
        /// Offer a cache flusher that counts its flushes (the `wal_sync_range` path), or
        /// none, on whatever file system the test runs on.
        offer_flusher: bool,
    }

    /// `hooks`, and the real file system through them.
    fn recording(hooks: Recording) -> (Arc<Recording>, HookVfs) {
        let hooks = Arc::new(hooks);
        let vfs = HookVfs::new(Arc::new(RealVfs), hooks.clone());
        (hooks, vfs)
    }

    #[derive(Default)]
    struct Counts {
        writes: AtomicU64,
        sync_data: AtomicU64,
        sync_all: AtomicU64,
        write_backs: AtomicU64,
        cache_flushes: AtomicU64,
        /// A write-back happened after the last cache flush (a flush must follow every one).
        unflushed_write_back: std::sync::atomic::AtomicBool,
    }

    struct CountingFlush(Arc<Counts>);

    impl CacheFlush for CountingFlush {
        fn flush(&self) -> io::Result<()> {
            self.0.cache_flushes.fetch_add(1, Ordering::Relaxed);
            self.0.unflushed_write_back.store(false, Ordering::Relaxed);
            Ok(())
        }
        fn describe(&self) -> String {
            "counting".into()
        }
    }

    impl Hooks for Recording {
        fn open(&self, vfs: &dyn Vfs, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
            self.modes.lock().unwrap().push(mode);
            if self.reject_direct && mode.direct {
                return Err(io::Error::from_raw_os_error(22)); // EINVAL
            }
            vfs.open(path, mode)
        }
        fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
            self.counts.writes.fetch_add(1, Ordering::Relaxed);
            file.io.write_at(buf, offset)
        }
        fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
            self.counts.sync_data.fetch_add(1, Ordering::Relaxed);
            if self.fail_sync_data {
                return Err(io::Error::other("injected fdatasync failure"));
            }
            file.io.sync_data()
        }
        fn sync_all(&self, file: FileRef<'_>) -> io::Result<()> {
            self.counts.sync_all.fetch_add(1, Ordering::Relaxed);
            file.io.sync_all()
        }
        fn write_back(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
            self.counts.write_backs.fetch_add(1, Ordering::Relaxed);
            self.counts
                .unflushed_write_back
                .store(true, Ordering::Relaxed);
            file.io.write_back(offset, len)
        }
        fn cache_flusher(
            &self,
            _vfs: &dyn Vfs,
            _dir: &Path,
        ) -> io::Result<Option<Arc<dyn CacheFlush>>> {
            Ok(self
                .offer_flusher
                .then(|| Arc::new(CountingFlush(self.counts.clone())) as Arc<dyn CacheFlush>))
        }
    }

    fn range_spec(method: SyncMethod) -> ProbeSpec {
        ProbeSpec {
            method,
            direct: false,
            range: true,
            write_bytes: 8192,
            duration: SHORT,
            interval: Duration::from_micros(100),
        }
    }

    #[test]
    fn probe_range_writes_back_then_flushes_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let (rec, vfs) = recording(Recording {
            offer_flusher: true,
            ..Recording::default()
        });
        let r = probe(&vfs, dir.path(), &range_spec(SyncMethod::Fdatasync)).unwrap();
        assert!(r.range);
        let c = &rec.counts;
        assert_eq!(c.write_backs.load(Ordering::Relaxed), r.flushes);
        assert_eq!(c.cache_flushes.load(Ordering::Relaxed), r.flushes);
        assert_eq!(
            c.sync_data.load(Ordering::Relaxed),
            0,
            "no fdatasync of the file"
        );
        assert!(!c.unflushed_write_back.load(Ordering::Relaxed));
        assert_probe_file_gone(dir.path());
        // Without a flusher the range path is unsupported; other methods have none.
        let (_, plain) = recording(Recording::default());
        let e = probe(&plain, dir.path(), &range_spec(SyncMethod::Fdatasync)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        let e = probe(&vfs, dir.path(), &range_spec(SyncMethod::Fsync)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_probe_file_gone(dir.path());
    }

    #[test]
    fn probe_range_on_the_real_file_system_or_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        match probe(&RealVfs, dir.path(), &range_spec(SyncMethod::Fdatasync)) {
            Ok(r) => {
                check(&r, SyncMethod::Fdatasync, false);
                assert!(r.range);
            }
            Err(e) if e.kind() == io::ErrorKind::Unsupported => eprintln!("skipping: {e}"),
            Err(e) => panic!("{e}"),
        }
        assert_probe_file_gone(dir.path());
    }

    #[test]
    fn probe_flush_is_the_methods_sync() {
        let preallocate_writes = PROBE_FILE_BYTES / FILL_CHUNK_BYTES as u64;
        for method in SyncMethod::ALL {
            let dir = tempfile::tempdir().unwrap();
            let (rec, vfs) = recording(Recording::default());
            let r = probe_flush_rate(&vfs, dir.path(), method, false, 8192, SHORT).unwrap();
            let modes = rec.modes.lock().unwrap().clone();
            assert_eq!(modes.len(), 2, "preallocate, then the timed handle");
            assert!(modes[0].create && !modes[0].dsync && !modes[0].sync && !modes[0].direct);
            let timed = modes[1];
            assert!(!timed.create && !timed.direct);
            assert_eq!(timed.dsync, method == SyncMethod::OpenDatasync);
            assert_eq!(timed.sync, method == SyncMethod::OpenSync);
            let c = &rec.counts;
            let writes = c.writes.load(Ordering::Relaxed);
            let sync_data = c.sync_data.load(Ordering::Relaxed);
            let sync_all = c.sync_all.load(Ordering::Relaxed);
            assert_eq!(writes, preallocate_writes + r.flushes, "{method}");
            let (want_data, want_all) = match method {
                SyncMethod::Fdatasync => (r.flushes, 1),
                SyncMethod::Fsync => (0, 1 + r.flushes),
                SyncMethod::OpenDatasync | SyncMethod::OpenSync => (0, 1),
            };
            assert_eq!((sync_data, sync_all), (want_data, want_all), "{method}");
            assert_probe_file_gone(dir.path());
        }
    }

    #[test]
    fn probe_removes_file_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let (rec, vfs) = recording(Recording {
            fail_sync_data: true,
            ..Recording::default()
        });
        let e = probe_flush_rate(&vfs, dir.path(), SyncMethod::Fdatasync, false, 8192, SHORT)
            .unwrap_err();
        assert!(e.to_string().contains("injected fdatasync failure"), "{e}");
        assert_eq!(rec.counts.sync_data.load(Ordering::Relaxed), 1, "no retry");
        assert_probe_file_gone(dir.path());
    }

    #[test]
    fn probe_direct_einval_is_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let (_, vfs) = recording(Recording {
            reject_direct: true,
            ..Recording::default()
        });
        let e = probe_flush_rate(&vfs, dir.path(), SyncMethod::OpenSync, true, 8192, SHORT)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        assert!(e.to_string().contains("O_DIRECT is not supported"), "{e}");
        assert_probe_file_gone(dir.path());
        // Buffered through the same Vfs still works: only O_DIRECT is refused.
        probe_flush_rate(&vfs, dir.path(), SyncMethod::OpenSync, false, 8192, SHORT).unwrap();
    }

    #[test]
    fn probe_offsets_wrap_within_file() {
        let file_len = 16 * 4096;
        let mut offset = 0;
        let mut seen = Vec::new();
        for _ in 0..12 {
            seen.push(offset);
            assert!(offset + 3 * 4096 <= file_len);
            offset = next_offset(offset, 3 * 4096, file_len);
        }
        let expected: Vec<u64> = [0, 3, 6, 9, 12, 0, 3, 6, 9, 12, 0, 3]
            .iter()
            .map(|b| b * 4096)
            .collect();
        assert_eq!(seen, expected);
        assert_eq!(
            next_offset(0, file_len, file_len),
            0,
            "one write fills the file"
        );
        assert_eq!(align_up(1), 4096);
        assert_eq!(align_up(8192), 8192);
    }

    #[test]
    fn probe_buffer_is_not_zeros() {
        let mut buf = vec![0u8; 8195];
        fill_pseudo_random(&mut buf);
        assert!(buf.iter().filter(|&&b| b == 0).count() < 200);
    }

    fn result(method: SyncMethod, direct: bool, flushes_per_sec: f64) -> ProbeResult {
        ProbeResult {
            range: false,
            method,
            direct,
            flushes_per_sec,
            mean_us: 1e6 / flushes_per_sec,
            p50_us: 0.0,
            p99_us: 0.0,
            max_us: 0.0,
            flushes: 1,
            write_bytes: 8192,
        }
    }

    #[test]
    fn probe_choose_sync_method() {
        use SyncMethod::*;
        assert_eq!(choose_sync_method(&[]), None);
        let buffered = [
            result(Fdatasync, false, 100.0),
            result(Fsync, false, 90.0),
            result(OpenDatasync, false, 150.0),
            result(OpenSync, false, 120.0),
        ];
        assert_eq!(choose_sync_method(&buffered), Some(OpenDatasync));
        // A faster direct result does not count while buffered results are present.
        let mut mixed = buffered.to_vec();
        mixed.push(result(OpenSync, true, 1000.0));
        assert_eq!(choose_sync_method(&mixed), Some(OpenDatasync));
        let direct = [result(Fdatasync, true, 300.0), result(Fsync, true, 400.0)];
        assert_eq!(choose_sync_method(&direct), Some(Fsync));
        // Ties, and wins within the margin, go to the first; unmeasured or nonsense rates
        // never win.
        let tie = [result(Fdatasync, false, 50.0), result(Fsync, false, 50.0)];
        assert_eq!(choose_sync_method(&tie), Some(Fdatasync));
        let close = [
            result(Fdatasync, false, 100.0),
            result(OpenDatasync, false, 109.0),
        ];
        assert_eq!(choose_sync_method(&close), Some(Fdatasync));
        let bad = [
            result(Fdatasync, false, 0.0),
            result(Fsync, false, f64::NAN),
            result(OpenSync, false, f64::INFINITY),
        ];
        assert_eq!(choose_sync_method(&bad), None);
    }
}
