//! Tests of the record format, insertion, group commit, reader and segment handling.
//!
//! This file holds what the tests share: a WAL in a temporary directory (`config`,
//! `create_open`), records tagged with their writer (`tagged_record`, `tag_of`), `read_all`,
//! `commit` and the sync-counting file system `Counting`. The tests are in submodules by topic.

use crate::*;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use walnut_common::{BlockNumber, Lsn, RelFileId, Xid, BLCKSZ};
use walnut_io::hook::{FileRef, FlushRef, HookVfs, Hooks};
use walnut_io::{OpenMode, RealVfs, Vfs};

/// The crash windows of DESIGN.md, through the fault-injecting file system.
mod crash_windows;
mod end_of_wal;
mod group_commit;
mod insertion;
mod record_format;
mod segments;
mod streaming;
mod sync_methods;

/// Hooks over the real file system that count the calls that make WAL durable — `sync_data`,
/// and the device cache flush of the `wal_sync_range` path, which production takes where the
/// file system offers one — and make each slow.
struct Counting {
    syncs: Arc<AtomicU64>,
    sync_delay: Duration,
}

impl Counting {
    fn vfs(syncs: Arc<AtomicU64>, sync_delay: Duration) -> Arc<dyn Vfs> {
        Arc::new(HookVfs::new(
            Arc::new(RealVfs),
            Arc::new(Counting { syncs, sync_delay }),
        ))
    }

    fn count(&self) {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.sync_delay);
    }
}

impl Hooks for Counting {
    fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
        self.count();
        file.io.sync_data()
    }
    fn flush(&self, flusher: FlushRef<'_>) -> io::Result<()> {
        self.count();
        flusher.io.flush()
    }
}

/// Flushes `lsn` as a commit of the calling thread's session (each test thread stands for one
/// session), with no commit_delay.
fn commit(wal: &Wal, lsn: Lsn) -> walnut_common::Result<()> {
    thread_local! {
        static SESSION: SessionId = SessionId::next();
    }
    let opts = CommitOpts {
        commit_delay_us: 0,
        commit_siblings: 0,
        ..CommitOpts::new(SESSION.with(|s| *s))
    };
    wal.flush_commit(lsn, &opts, 1)
}

fn vfs() -> Arc<dyn Vfs> {
    Arc::new(RealVfs)
}

fn config(dir: &Path, wal_buffers_bytes: usize, prealloc_segments: u32) -> WalConfig {
    WalConfig {
        wal_buffers_bytes,
        prealloc_segments,
        ..WalConfig::new(dir.join("wal"))
    }
}

fn create_open(vfs: Arc<dyn Vfs>, cfg: &WalConfig) -> Arc<Wal> {
    Wal::create(vfs.clone(), cfg).unwrap();
    Wal::open(vfs, cfg.clone(), Lsn::FIRST, Lsn::FIRST).unwrap()
}

/// A record tagged with (thread, seq) in its main data, optionally with a full-page image
/// whose bytes derive from the tag and do not compress (so that a record's size does not
/// depend on `wal_compression`).
fn tagged_record(thread: u32, seq: u32, image: bool) -> Record {
    let tag = (u64::from(thread) << 32) | u64::from(seq);
    let mut main_data = tag.to_le_bytes().to_vec();
    main_data.extend_from_slice(&vec![thread as u8; (seq % 97) as usize]);
    Record {
        rmgr: RmgrId(thread as u8),
        info: seq as u8,
        xid: Xid(tag),
        flags: 0,
        blocks: vec![BlockRef {
            rel: RelFileId(16384 + thread),
            block: BlockNumber(seq),
            will_init: seq % 2 == 0,
            image_lz4: false,
            image: image.then(|| {
                // xorshift64*, seeded by the tag: bytes LZ4 cannot shrink.
                let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                (0..BLCKSZ)
                    .map(|_| {
                        x ^= x >> 12;
                        x ^= x << 25;
                        x ^= x >> 27;
                        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
                    })
                    .collect()
            }),
            data: vec![seq as u8; (seq % 13) as usize],
        }],
        main_data,
    }
}

/// [`tagged_record`] with an image that compresses (stored LZ4-compressed under the default
/// `wal_compression`).
fn tagged_record_compressible(thread: u32, seq: u32) -> Record {
    let mut r = tagged_record(thread, seq, false);
    let tag = u64::from_le_bytes(r.main_data[..8].try_into().unwrap());
    r.blocks[0].image = Some((0..BLCKSZ).map(|i| (i as u64 ^ tag) as u8).collect());
    r
}

fn tag_of(rec: &Record) -> (u32, u32) {
    let tag = u64::from_le_bytes(rec.main_data[..8].try_into().unwrap());
    ((tag >> 32) as u32, tag as u32)
}

fn read_all(vfs: Arc<dyn Vfs>, dir: PathBuf, start: Lsn) -> (Vec<DecodedRecord>, Lsn) {
    let mut r = WalReader::open(vfs, dir, start).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(rec);
    }
    assert!(r.next_record().unwrap().is_none(), "end of WAL is sticky");
    (out, r.end_lsn())
}
