//! The WAL's files as the write path drives them (`crate::flush::Files`): writing ring bytes
//! to segment files (`XLogWrite`), with O_DIRECT's block alignment, and making them durable
//! (`issue_xlog_fsync`), by `fdatasync`/`fsync` or by `wal_sync_range`'s write-back and
//! device cache flush.

use super::{elapsed_us, io_err, Wal};
use crate::flush::Files;
use crate::segment::{self, segment_file_name, segment_of, WAL_SEGMENT_SIZE};
use crate::WalConfig;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use walnut_common::{Error, Result};
use walnut_io::{AlignedBuf, CacheFlush, FileIo, Vfs, DIRECT_IO_ALIGN};

/// A segment file open for writing.
#[derive(Clone)]
pub(crate) struct SegFile {
    pub(super) segno: u64,
    pub(super) file: Arc<dyn FileIo>,
    /// Under `wal_sync_range`: the segment is fully allocated (`allocated_bytes` covers all
    /// 16 MiB), so its writes change no metadata but timestamps and may be made durable by
    /// write-back plus a cache flush.
    pub(super) range_ok: bool,
}

/// A segment written since the last sync, with the byte range (offsets in the segment) the
/// writes covered.
pub(crate) struct Unsynced {
    pub(super) seg: SegFile,
    pub(super) lo: u64,
    pub(super) hi: u64,
}

/// What the writer keeps behind the write lock (PostgreSQL's `WALWriteLock`), besides the
/// write position and the list to sync ([`crate::flush::WritePath`]).
pub(crate) struct WriteState {
    /// Segment files open for writing.
    pub(super) files: Vec<SegFile>,
    /// Bytes copied out of the ring for one `write_at` (4096-aligned for O_DIRECT).
    pub(super) staging: AlignedBuf,
    /// With O_DIRECT: the bytes of the partial block that ends at `write_lsn` (from the block's
    /// start), rewritten in front of the next write; empty when `write_lsn` is block-aligned.
    pub(super) tail: Vec<u8>,
}

impl Files for Wal {
    type State = WriteState;
    type Pending = Unsynced;

    fn wait_insertions(&self, target: u64) {
        Wal::wait_insertions(self, target);
    }

    fn write(&self, state: &mut WriteState, from: u64, to: u64, pending: &mut Vec<Unsynced>) {
        self.write_segments(state, from, to, pending);
    }

    fn sync(&self, pending: Vec<Unsynced>) {
        if !self.cfg.sync_method.syncs_on_write() {
            self.sync_segments(pending);
        }
    }
}

impl Wal {
    /// Writes ring bytes `[from, upto)` to the segment files, one `write_at` per segment
    /// touched (`XLogWrite`), and records each segment's written range in `pending`. The caller
    /// holds the write lock and has waited for insertions up to `upto`. With O_DIRECT (`io_direct = wal`) each write is widened to whole 4096-byte
    /// blocks: it starts with the saved bytes of the partial block that the previous write
    /// ended in (rewritten in place) and ends with zeros up to the block boundary, which the
    /// next write overwrites (PostgreSQL rewrites its partial last WAL page the same way).
    ///
    /// # Panics
    /// A failed write: PANIC, never retried.
    fn write_segments(
        &self,
        w: &mut WriteState,
        mut from: u64,
        upto: u64,
        pending: &mut Vec<Unsynced>,
    ) {
        assert!(
            upto - from <= self.ring.len_bytes(),
            "unwritten WAL cannot exceed the WAL buffers"
        );
        while from < upto {
            let segno = segment_of(from);
            let to = upto.min((segno + 1) * WAL_SEGMENT_SIZE);
            let file = self.segment_for_write(w, segno);
            let io = file.file.clone();
            let (start, n) = if self.cfg.direct {
                let align = DIRECT_IO_ALIGN as u64;
                let start = from & !(align - 1);
                let pre = (from - start) as usize;
                assert_eq!(
                    w.tail.len(),
                    pre,
                    "saved partial block does not end at write_lsn"
                );
                let body = (to - from) as usize;
                let n = (pre + body).div_ceil(DIRECT_IO_ALIGN) * DIRECT_IO_ALIGN;
                if w.staging.len() < n {
                    w.staging = AlignedBuf::zeroed(n.next_power_of_two());
                }
                let buf = w.staging.as_mut_slice();
                buf[..pre].copy_from_slice(&w.tail);
                self.ring.copy_out(from, &mut buf[pre..pre + body]);
                buf[pre + body..n].fill(0);
                let end_block = ((to & !(align - 1)) - start) as usize;
                w.tail.clear();
                w.tail.extend_from_slice(&buf[end_block..pre + body]);
                (start, n)
            } else {
                let n = (to - from) as usize;
                if w.staging.len() < n {
                    w.staging = AlignedBuf::zeroed(n.next_power_of_two());
                }
                self.ring.copy_out(from, &mut w.staging.as_mut_slice()[..n]);
                (from, n)
            };
            let t = Instant::now();
            if let Err(e) = io.write_at(&w.staging.as_slice()[..n], start % WAL_SEGMENT_SIZE) {
                walnut_common::panic_fatal(&format!(
                    "could not write to WAL segment {} at offset {}, length {n}: {e}",
                    self.seg_name(segno),
                    start % WAL_SEGMENT_SIZE
                ));
            }
            self.stats
                .write_time_us
                .fetch_add(elapsed_us(t), Ordering::Relaxed);
            self.stats.write.fetch_add(1, Ordering::Relaxed);
            let (lo, hi) = (
                start % WAL_SEGMENT_SIZE,
                start % WAL_SEGMENT_SIZE + n as u64,
            );
            match pending.iter_mut().find(|u| u.seg.segno == segno) {
                Some(u) => {
                    u.lo = u.lo.min(lo);
                    u.hi = u.hi.max(hi);
                }
                None => pending.push(Unsynced { seg: file, lo, hi }),
            }
            from = to;
        }
    }

    /// The open file of segment `segno`, creating (preallocating) it if it does not exist yet.
    fn segment_for_write(&self, w: &mut WriteState, segno: u64) -> SegFile {
        if let Some(f) = w.files.iter().find(|f| f.segno == segno) {
            return f.clone();
        }
        let opened = self.open_or_create_segment(segno).and_then(|file| {
            // A segment with fewer bytes allocated than its size has holes (made with
            // wal_init_zero = off): writing into them allocates blocks, so only fdatasync
            // makes them durable.
            let range_ok = self.flusher.is_some() && file.allocated_bytes()? >= WAL_SEGMENT_SIZE;
            Ok(SegFile {
                segno,
                file,
                range_ok,
            })
        });
        let seg = match opened {
            Ok(f) => f,
            Err(e) => walnut_common::panic_fatal(&format!(
                "could not open WAL segment {}: {e}",
                self.seg_name(segno)
            )),
        };
        if self.flusher.is_some() && !seg.range_ok {
            tracing::info!(segment = %self.seg_name(segno), "WAL segment is not fully allocated; syncing it with fdatasync");
        }
        w.files.retain(|f| f.segno + 1 >= segno);
        w.files.push(seg.clone());
        seg
    }

    fn open_or_create_segment(&self, segno: u64) -> std::io::Result<Arc<dyn FileIo>> {
        let mode = self.cfg.sync_method.open_mode(self.cfg.direct);
        let open = || {
            segment::open_existing_with(
                self.vfs.as_ref(),
                &self.cfg.dir,
                segno,
                self.cfg.timeline,
                mode,
            )
        };
        if let Some(f) = open()? {
            return Ok(f);
        }
        let _g = self.segments.lock();
        if let Some(f) = open()? {
            return Ok(f);
        }
        tracing::warn!(segment = %self.seg_name(segno), "WAL segment was not preallocated ahead of time");
        self.create_segment(segno)?;
        open()?.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "segment vanished after creation",
            )
        })
    }

    /// Makes the listed segments' writes durable (`issue_xlog_fsync`): `fdatasync`/`fsync` of
    /// each, or under `wal_sync_range` a write-back of each fully allocated segment's written
    /// range and then one device cache flush. Counts `wal_sync` and `wal_sync_time`.
    ///
    /// # Panics
    /// A failed sync, write-back or cache flush: PANIC, never retried.
    fn sync_segments(&self, files: Vec<Unsynced>) {
        let fail = |what: &str, segno: Option<u64>, e: std::io::Error| -> ! {
            let name = segno.map_or_else(String::new, |s| {
                format!(" of WAL segment {}", self.seg_name(s))
            });
            walnut_common::panic_fatal(&format!("could not {what}{name}: {e}"))
        };
        let t = Instant::now();
        let mut syncs = 0u64;
        let mut written_back = false;
        for u in &files {
            let segno = u.seg.segno;
            if u.seg.range_ok {
                if let Err(e) = u.seg.file.write_back(u.lo, u.hi - u.lo) {
                    fail("write back", Some(segno), e);
                }
                written_back = true;
                continue;
            }
            let r = match self.cfg.sync_method {
                crate::SyncMethod::Fsync => u.seg.file.sync_all(),
                _ => u.seg.file.sync_data(),
            };
            if let Err(e) = r {
                fail(self.cfg.sync_method.name(), Some(segno), e);
            }
            syncs += 1;
        }
        if written_back {
            let flusher = self.flusher.as_ref().expect("range_ok implies a flusher");
            if let Err(e) = flusher.flush() {
                fail(
                    &format!("flush the disk cache ({})", flusher.describe()),
                    None,
                    e,
                );
            }
            syncs += 1;
        }
        self.stats
            .sync_time_us
            .fetch_add(elapsed_us(t), Ordering::Relaxed);
        self.stats.sync.fetch_add(syncs, Ordering::Relaxed);
    }

    /// True if flushes use `wal_sync_range` (write-back plus a device cache flush).
    pub fn sync_range_in_use(&self) -> bool {
        self.flusher.is_some()
    }
}

/// The cache flusher for `wal_sync_range`, if the configuration and the file system allow it
/// (logged either way when the setting asks for it).
pub(super) fn range_sync_flusher(vfs: &dyn Vfs, cfg: &WalConfig) -> Option<Arc<dyn CacheFlush>> {
    if !cfg.sync_range {
        return None;
    }
    let why_not = if cfg.sync_method != crate::SyncMethod::Fdatasync {
        Some(format!("wal_sync_method is {}", cfg.sync_method))
    } else if !cfg.init_zero {
        Some("wal_init_zero is off".to_string())
    } else {
        match vfs.cache_flusher(&cfg.dir) {
            Ok(Some(f)) => {
                tracing::info!(
                    "wal_sync_range: WAL flushes write back the written range, then flush the disk cache with {}",
                    f.describe()
                );
                return Some(f);
            }
            Ok(None) => {
                Some("the file system is not one where it is known to be durable".to_string())
            }
            Err(e) => Some(format!("could not inspect the file system: {e}")),
        }
    };
    if let Some(why) = why_not {
        tracing::debug!(
            "wal_sync_range not used: {why}; WAL flushes use {}",
            cfg.sync_method
        );
    }
    None
}

/// The bytes of the block holding `end` that lie before `end` (empty if `end` is
/// block-aligned), read from the segment file: the first O_DIRECT write rewrites them.
pub(super) fn read_partial_block(
    vfs: &dyn Vfs,
    dir: &std::path::Path,
    tli: u32,
    end: u64,
) -> Result<Vec<u8>> {
    let align = DIRECT_IO_ALIGN as u64;
    let start = end & !(align - 1);
    let mut buf = vec![0u8; (end - start) as usize];
    if buf.is_empty() {
        return Ok(buf);
    }
    let segno = segment_of(start);
    let ctx = || {
        format!(
            "could not read WAL segment {}",
            segment_file_name(tli, segno)
        )
    };
    let file = segment::open_existing(vfs, dir, segno, tli)
        .map_err(io_err(ctx()))?
        .ok_or_else(|| Error::corruption(format!("{}: missing", ctx())))?;
    file.read_exact_at(&mut buf, start % WAL_SEGMENT_SIZE)
        .map_err(io_err(ctx()))?;
    Ok(buf)
}
