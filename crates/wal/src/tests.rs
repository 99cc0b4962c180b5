//! Tests of the record format, insertion, group commit, reader and segment handling.

use crate::*;
use proptest::prelude::*;
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

// ---------------------------------------------------------------------------------------------
// Helpers

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
/// whose bytes derive from the tag.
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
            image: image.then(|| (0..BLCKSZ).map(|i| (i as u64 ^ tag) as u8).collect()),
            data: vec![seq as u8; (seq % 13) as usize],
        }],
        main_data,
    }
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

// ---------------------------------------------------------------------------------------------
// Record format

fn arb_block() -> impl Strategy<Value = BlockRef> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<bool>(),
        proptest::option::of(any::<u8>()),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(rel, block, will_init, img, data)| BlockRef {
            rel: RelFileId(rel),
            block: BlockNumber(block),
            will_init,
            image: img.map(|b| (0..BLCKSZ).map(|i| b.wrapping_add(i as u8)).collect()),
            data,
        })
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        any::<u8>(),
        any::<u8>(),
        any::<u64>(),
        any::<u8>(),
        proptest::collection::vec(arb_block(), 0..4),
        proptest::collection::vec(any::<u8>(), 0..500),
    )
        .prop_map(|(rmgr, info, xid, flags, blocks, main_data)| Record {
            rmgr: RmgrId(rmgr),
            info,
            xid: Xid(xid),
            flags,
            blocks,
            main_data,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn record_round_trip(rec in arb_record(), lsn in (1u64..1 << 40).prop_map(|l| l * 8)) {
        let bytes = encode_record(Lsn(lsn), &rec);
        prop_assert_eq!(bytes.len() % 8, 0);
        prop_assert_eq!(bytes.len() as u64, align8(record_len(&rec) as u64));
        let d = decode_record(Lsn(lsn), &bytes).unwrap();
        prop_assert_eq!(d.lsn, Lsn(lsn));
        prop_assert_eq!(d.end_lsn, Lsn(lsn + bytes.len() as u64));
        prop_assert_eq!(&d.record, &rec);
        // The same bytes at another position are stale.
        prop_assert!(decode_record(Lsn(lsn + 8), &bytes).is_err());
    }

    #[test]
    fn decode_truncated_or_flipped_never_panics(rec in arb_record(), cut in any::<prop::sample::Index>(),
                                                flip in any::<prop::sample::Index>(), bit in 0u8..8) {
        let bytes = encode_record(Lsn(8), &rec);
        let total = record_len(&rec);
        let cut = cut.index(total);
        prop_assert!(decode_record(Lsn(8), &bytes[..cut]).is_err());
        let mut flipped = bytes.clone();
        let at = flip.index(total);
        flipped[at] ^= 1 << bit;
        prop_assert!(decode_record(Lsn(8), &flipped).is_err());
    }

    #[test]
    fn decode_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2000), lsn in any::<u64>()) {
        let _ = decode_record(Lsn(lsn), &bytes);
        // Garbage with a plausible header: the right lsn and a small length.
        let mut b = bytes.clone();
        if b.len() >= 16 {
            let len = (b.len() as u32).max(32);
            b[0..4].copy_from_slice(&len.to_le_bytes());
            b[8..16].copy_from_slice(&lsn.to_le_bytes());
            let _ = decode_record(Lsn(lsn), &b);
        }
    }
}

#[test]
fn zero_header_is_end_of_wal() {
    assert!(decode_record(Lsn(8), &[0u8; 64]).is_err());
    assert!(decode_record(Lsn(8), &[]).is_err());
}

#[test]
fn segment_names_follow_postgres() {
    assert_eq!(segment_file_name(0), "000000010000000000000000");
    assert_eq!(segment_file_name(1), "000000010000000000000001");
    assert_eq!(segment_file_name(255), "0000000100000000000000FF");
    assert_eq!(segment_file_name(256), "000000010000000100000000");
    for n in [0, 1, 255, 256, 12345] {
        assert_eq!(parse_segment_file_name(&segment_file_name(n)), Some(n));
    }
    assert_eq!(parse_segment_file_name("000000020000000000000001"), None);
    assert_eq!(parse_segment_file_name("0000000100000000000001FF"), None);
    assert_eq!(parse_segment_file_name("xlogtemp.3"), None);
}

// ---------------------------------------------------------------------------------------------
// Insertion, flush, reader

#[test]
fn concurrent_inserts_read_back_once_in_order_across_segments() {
    let tmp = tempfile::tempdir().unwrap();
    // Small buffers, so inserters also have to write out WAL themselves (wal_buffers_full).
    let cfg = config(tmp.path(), 1 << 20, 2);
    let wal = create_open(vfs(), &cfg);
    const THREADS: u32 = 8;
    const PER_THREAD: u32 = 600;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                let mut lsns = Vec::new();
                for seq in 0..PER_THREAD {
                    let (start, end) = wal
                        .insert(&mut |_redo| tagged_record(t, seq, seq % 2 == 0))
                        .unwrap();
                    assert!(end > start);
                    if seq % 100 == 99 {
                        wal.flush(end).unwrap();
                    }
                    lsns.push(start);
                }
                lsns
            })
        })
        .collect();
    let mut starts = std::collections::HashMap::new();
    for (t, h) in handles.into_iter().enumerate() {
        for (seq, lsn) in h.join().unwrap().into_iter().enumerate() {
            starts.insert(lsn, (t as u32, seq as u32));
        }
    }
    let end = wal.insert_lsn();
    assert!(
        end.0 > WAL_SEGMENT_SIZE,
        "the test must cross a segment boundary"
    );
    wal.flush(end).unwrap();
    assert!(wal.flush_lsn() >= end);
    let stats = wal.stats();
    // Flush marks (one per flush at most) count as records too.
    assert!(stats.wal_records >= u64::from(THREADS * PER_THREAD));
    assert!(stats.wal_records <= u64::from(THREADS * PER_THREAD) + stats.group_flushes + 1);
    assert_eq!(stats.wal_fpi, u64::from(THREADS * PER_THREAD / 2));
    assert_eq!(stats.wal_bytes, wal.insert_lsn().0 - Lsn::FIRST.0);
    assert!(stats.wal_buffers_full > 0);
    drop(wal);

    let (recs, read_end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(read_end, end);
    assert_eq!(recs.len(), (THREADS * PER_THREAD) as usize);
    let mut next_seq = vec![0u32; THREADS as usize];
    let mut prev_end = Lsn::FIRST;
    let mut crossed = false;
    for d in &recs {
        // Contiguous but for flush marks (40 bytes each), which the reader skips.
        assert!(
            d.lsn >= prev_end && ((d.lsn.0 - prev_end.0) / 40) * 40 == d.lsn.0 - prev_end.0,
            "records are contiguous: {} after {}",
            d.lsn,
            prev_end
        );
        crossed |= segment_of(d.lsn.0) != segment_of(d.end_lsn.0 - 1);
        prev_end = d.end_lsn;
        let (t, seq) = tag_of(&d.record);
        assert_eq!(
            starts.get(&d.lsn),
            Some(&(t, seq)),
            "record read where it was inserted"
        );
        assert_eq!(
            next_seq[t as usize], seq,
            "each thread's records appear once, in order"
        );
        next_seq[t as usize] += 1;
        assert_eq!(d.record, tagged_record(t, seq, seq % 2 == 0));
    }
    assert!(crossed, "some record spans two segments");
}

#[test]
fn record_larger_than_wal_buffers() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    let big = |n: u32| Record {
        rmgr: RmgrId(9),
        info: 1,
        xid: Xid(n.into()),
        flags: RECORD_MULTI_BLOCK_ATOMIC,
        blocks: (0..200)
            .map(|b| BlockRef {
                rel: RelFileId(1),
                block: BlockNumber(b),
                will_init: false,
                image: Some(vec![(b + n) as u8; BLCKSZ]),
                data: vec![],
            })
            .collect(),
        main_data: vec![n as u8; 5],
    };
    let wal2 = wal.clone();
    let small = std::thread::spawn(move || {
        for seq in 0..500 {
            wal2.insert(&mut |_| tagged_record(1, seq, false)).unwrap();
        }
    });
    for n in 0..3 {
        wal.insert(&mut |_| big(n)).unwrap();
    }
    small.join().unwrap();
    let end = wal.insert_lsn();
    wal.flush(end).unwrap();
    let end = wal.insert_lsn(); // and the flush mark after it
    drop(wal);
    let (recs, read_end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(read_end, end);
    let bigs: Vec<_> = recs.iter().filter(|d| d.record.rmgr == RmgrId(9)).collect();
    assert_eq!(bigs.len(), 3);
    for (n, d) in bigs.iter().enumerate() {
        assert_eq!(d.record, big(n as u32));
    }
    assert_eq!(recs.len(), 503);
}

#[test]
fn group_commit_flushes_before_ack_monotonic_and_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 4 << 20, 1);
    let syncs = Arc::new(AtomicU64::new(0));
    let cvfs = Counting::vfs(syncs.clone(), Duration::from_millis(2));
    let wal = create_open(cvfs.clone(), &cfg);
    // Production's sync path: the range path wherever the real file system offers a flusher.
    let flusher = RealVfs.cache_flusher(&cfg.dir).unwrap();
    assert_eq!(wal.sync_range_in_use(), flusher.is_some());
    let syncs_before = syncs.load(Ordering::SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let wal = wal.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut last = wal.flush_lsn();
            let mut observations = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let now = wal.flush_lsn();
                assert!(now >= last, "flush_lsn went backwards: {last} -> {now}");
                assert!(now <= wal.insert_lsn());
                last = now;
                observations += 1;
                std::thread::yield_now();
            }
            observations
        })
    };
    const THREADS: u32 = 8;
    const COMMITS: u32 = 40;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let wal = wal.clone();
            let vfs = cvfs.clone();
            let dir = cfg.dir.clone();
            std::thread::spawn(move || {
                for seq in 0..COMMITS {
                    let rec = tagged_record(t, seq, false);
                    let (start, end) = wal.insert(&mut |_| rec.clone()).unwrap();
                    commit(&wal, end).unwrap();
                    assert!(wal.flush_lsn() >= end, "acknowledged before flushed");
                    // Written: a fresh reader finds the record.
                    let mut r = WalReader::open(vfs.clone(), dir.clone(), start).unwrap();
                    let d = r
                        .next_record()
                        .unwrap()
                        .expect("flushed record is readable");
                    assert_eq!(d.record, rec);
                    assert_eq!(d.end_lsn, end);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    assert!(observer.join().unwrap() > 0);
    let flush_calls = u64::from(THREADS * COMMITS);
    let data_syncs = syncs.load(Ordering::SeqCst) - syncs_before;
    let stats = wal.stats();
    assert_eq!(stats.group_commits, flush_calls);
    assert_eq!(stats.wal_sync, data_syncs);
    assert!(stats.group_flushes <= flush_calls);
    assert!(
        data_syncs <= flush_calls,
        "{data_syncs} syncs for {flush_calls} flushes"
    );
    assert!(
        data_syncs < flush_calls,
        "with a slow sync, commits were grouped ({data_syncs} syncs)"
    );
    assert!(stats.wal_write <= stats.group_flushes + stats.wal_buffers_full + 1);
}

#[test]
fn commit_delay_counts_the_active_transactions_other_than_the_committer() {
    use crate::group_commit::LeaderWait;
    let opts = |delay, siblings| CommitOpts {
        commit_delay_us: delay,
        commit_siblings: siblings,
        ..CommitOpts::new(SessionId::next())
    };
    let fixed = crate::GroupCommitMode::Fixed;
    // The committer itself is one of the active transactions: 3 active are 2 others.
    assert_eq!(
        crate::wal::leader_wait(fixed, &opts(10, 1), 3),
        LeaderWait::Fixed {
            delay_us: 10,
            siblings: 1,
            others: 2
        }
    );
    assert_eq!(
        crate::wal::leader_wait(fixed, &opts(10, 1), 0),
        LeaderWait::Fixed {
            delay_us: 10,
            siblings: 1,
            others: 0
        }
    );
    assert_eq!(
        crate::wal::leader_wait(crate::GroupCommitMode::Adaptive, &opts(10, 1), 3),
        LeaderWait::Adaptive
    );

    let tmp = tempfile::tempdir().unwrap();
    let cfg = WalConfig {
        group_commit: fixed,
        ..config(tmp.path(), 1 << 20, 1)
    };
    Wal::create(vfs(), &cfg).unwrap();
    let wal = Wal::open(vfs(), cfg, Lsn::FIRST, Lsn::FIRST).unwrap();
    let (_, end) = wal.insert(&mut |_| tagged_record(0, 0, false)).unwrap();
    // Only ourselves active: no delay.
    wal.flush_commit(end, &opts(10, 1), 1).unwrap();
    // Already flushed: returns at once.
    wal.flush_commit(end, &opts(10, 0), 1).unwrap();
    let (_, end) = wal.insert(&mut |_| tagged_record(0, 1, false)).unwrap();
    // Enough siblings: the leader sleeps 10 µs, then flushes.
    wal.flush_commit(end, &opts(10, 0), 1).unwrap();
    assert!(
        wal.flush_lsn() >= end,
        "flushed through the record (and its flush mark)"
    );
    assert!(
        wal.flush(Lsn(wal.insert_lsn().0 + 8)).is_err(),
        "beyond the insert position"
    );
}

#[test]
fn torn_tail_ends_wal_at_previous_record_and_reopen_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    for damage in ["flip", "zero_header", "truncate_lsn"] {
        let _ = std::fs::remove_dir_all(&cfg.dir);
        let wal = create_open(vfs(), &cfg);
        let mut ranges = Vec::new();
        for seq in 0..10 {
            ranges.push(
                wal.insert(&mut |_| tagged_record(0, seq, seq == 9))
                    .unwrap(),
            );
        }
        wal.flush(wal.insert_lsn()).unwrap();
        drop(wal);
        let (last_start, last_end) = ranges[9];
        let f = vfs()
            .open(&cfg.dir.join(segment_file_name(0)), OpenMode::default())
            .unwrap();
        match damage {
            "flip" => {
                let at = (last_start.0 + last_end.0) / 2;
                let mut b = [0u8; 1];
                f.read_exact_at(&mut b, at).unwrap();
                f.write_at(&[b[0] ^ 0x40], at).unwrap();
            }
            "zero_header" => f.write_at(&[0u8; 32], last_start.0).unwrap(),
            _ => f.write_at(&[0xAB; 8], last_start.0 + 8).unwrap(),
        }
        let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
        assert_eq!(recs.len(), 9, "{damage}");
        assert_eq!(end, last_start, "{damage}");

        // Recovery continues the WAL where the valid part ends.
        let wal = Wal::open(vfs(), cfg.clone(), end, Lsn::FIRST).unwrap();
        let (s, e) = wal.insert(&mut |_| tagged_record(0, 100, false)).unwrap();
        assert_eq!(s, last_start);
        wal.flush(e).unwrap();
        let fin = wal.insert_lsn();
        drop(wal);
        let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
        assert_eq!(recs.len(), 10);
        assert_eq!(tag_of(&recs[9].record), (0, 100));
        assert_eq!(end, fin);
    }
}

#[test]
fn open_scrubs_stale_records_a_crashed_run_left_after_end() {
    // A crash left records A B C on disk, B torn but C intact. Recovery ends at B. If new
    // records ended exactly where C starts, C would validate again; open must destroy it.
    // B is a flush mark's length (40 bytes) longer than A, so that the new run's first record
    // (A's size) and the mark its flush writes end exactly at C.
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    let rec = |seq, len| Record {
        rmgr: RmgrId(1),
        info: 0,
        xid: Xid(seq),
        flags: 0,
        blocks: vec![],
        main_data: vec![seq as u8; len],
    };
    let (_, a_end) = wal.insert(&mut |_| rec(1, 24)).unwrap();
    let (b_start, _) = wal.insert(&mut |_| rec(2, 24 + 40)).unwrap();
    let (c_start, _) = wal.insert(&mut |_| rec(3, 24)).unwrap();
    wal.flush(wal.insert_lsn()).unwrap();
    drop(wal);
    let f = vfs()
        .open(&cfg.dir.join(segment_file_name(0)), OpenMode::default())
        .unwrap();
    f.write_at(&[0xFF; 4], b_start.0 + 20).unwrap(); // tear B
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!((recs.len(), end), (1, a_end));
    let wal = Wal::open(vfs(), cfg.clone(), end, Lsn::FIRST).unwrap();
    let (s, e) = wal.insert(&mut |_| rec(4, 24)).unwrap();
    assert_eq!(s, b_start);
    wal.flush(e).unwrap();
    let fin = wal.insert_lsn(); // after the new flush's mark
    assert_eq!(
        fin, c_start,
        "the new record and its flush's mark end where stale C starts"
    );
    drop(wal);
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(recs.len(), 2, "stale C must not come back");
    assert!(
        recs.iter().all(|r| r.lsn < c_start),
        "nothing is read at stale C's place"
    );
    assert_eq!(end, fin);
}

#[test]
fn recycled_segment_stale_records_end_the_wal() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 4 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    let mut seq = 0;
    let mut fill_to = |wal: &Wal, target: u64| {
        while wal.insert_lsn().0 < target {
            wal.insert(&mut |_| tagged_record(0, seq, true)).unwrap();
            seq += 1;
        }
        wal.flush(wal.insert_lsn()).unwrap();
    };
    // Into segment 1.
    fill_to(&wal, WAL_SEGMENT_SIZE + 100_000);
    let redo = wal.begin_checkpoint();
    assert_eq!(redo, wal.insert_lsn());
    let names = |dir: &Path| {
        let mut v: Vec<_> = RealVfs
            .list_dir(dir)
            .unwrap()
            .into_iter()
            .filter_map(|n| parse_segment_file_name(&n))
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&cfg.dir), vec![0, 1, 2]);
    wal.remove_old_segments(redo).unwrap();
    // Segment 0 was recycled as segment 3 (the first free name after the preallocated one).
    assert_eq!(names(&cfg.dir), vec![1, 2, 3]);
    // Into segment 2, then "crash" and recover.
    fill_to(&wal, 2 * WAL_SEGMENT_SIZE + WAL_SEGMENT_SIZE / 2);
    drop(wal);
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), redo);
    assert!(!recs.is_empty());
    // Reopen the writer at the end and write a little into the recycled segment 3, much less
    // than the stale content it holds.
    let wal = Wal::open(vfs(), cfg.clone(), end, redo).unwrap();
    fill_to(&wal, 3 * WAL_SEGMENT_SIZE + 50_000);
    let new_end = wal.insert_lsn();
    drop(wal);
    let f = vfs()
        .open(&cfg.dir.join(segment_file_name(3)), OpenMode::default())
        .unwrap();
    let mut after = [0u8; 64];
    f.read_exact_at(&mut after, new_end.0 % WAL_SEGMENT_SIZE + 4096)
        .unwrap();
    assert!(
        after.iter().any(|&b| b != 0),
        "the recycled segment still holds stale records"
    );
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), redo);
    assert_eq!(end, new_end, "reader stops exactly at the new end");
    for (i, d) in recs.iter().enumerate() {
        assert_eq!(tag_of(&d.record).1, tag_of(&recs[0].record).1 + i as u32);
    }
}

#[test]
fn assemble_is_redone_when_a_checkpoint_moves_the_redo_point() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    wal.insert(&mut |_| tagged_record(0, 0, false)).unwrap();
    let old_redo = wal.redo_lsn();
    assert_eq!(old_redo, Lsn::FIRST);
    let mut seen = Vec::new();
    let (start, _) = wal
        .insert(&mut |redo| {
            seen.push(redo);
            if seen.len() == 1 {
                // A checkpoint intervenes between assembly and reservation.
                wal.begin_checkpoint();
            }
            tagged_record(0, 1, redo <= old_redo)
        })
        .unwrap();
    let new_redo = wal.redo_lsn();
    assert!(new_redo > old_redo);
    assert_eq!(seen, vec![old_redo, new_redo]);
    assert_eq!(
        start, new_redo,
        "nothing was reserved between the redo point and this record"
    );
    // No further checkpoint: assembled once.
    let mut calls = 0;
    wal.insert(&mut |_| {
        calls += 1;
        tagged_record(0, 2, false)
    })
    .unwrap();
    assert_eq!(calls, 1);
}

#[test]
fn checkpoint_concurrent_with_inserts_never_splits_assembly_from_reservation() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    let stop = Arc::new(AtomicBool::new(false));
    let inserters: Vec<_> = (0..4)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                for seq in 0..2000 {
                    let mut assembled_with = Lsn::INVALID;
                    let (start, _) = wal
                        .insert(&mut |redo| {
                            assembled_with = redo;
                            tagged_record(t, seq, false)
                        })
                        .unwrap();
                    // The redo point used was current when space was reserved, so it is at or
                    // before the record, and no later checkpoint's redo point lies before it.
                    assert!(assembled_with <= start);
                }
            })
        })
        .collect();
    let ckpt = {
        let wal = wal.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut last = Lsn::INVALID;
            while !stop.load(Ordering::SeqCst) {
                let r = wal.begin_checkpoint();
                assert!(r >= last);
                last = r;
                std::thread::yield_now();
            }
        })
    };
    for h in inserters {
        h.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    ckpt.join().unwrap();
}

#[test]
fn wal_writer_flushes_in_background_and_shutdown_flushes() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    wal.start_wal_writer(2);
    let (_, end) = wal.insert(&mut |_| tagged_record(0, 0, false)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while wal.flush_lsn() < end {
        assert!(
            std::time::Instant::now() < deadline,
            "WAL writer never flushed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let (_, end) = wal.insert(&mut |_| tagged_record(0, 1, false)).unwrap();
    wal.shutdown();
    assert!(wal.flush_lsn() >= end);
    let (recs, _) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(recs.len(), 2);
}

#[test]
fn create_preallocates_and_open_keeps_segments_ahead() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 2);
    Wal::create(vfs(), &cfg).unwrap();
    let seg0 = vfs()
        .open(&cfg.dir.join(segment_file_name(0)), OpenMode::default())
        .unwrap();
    assert_eq!(seg0.len().unwrap(), WAL_SEGMENT_SIZE);
    let _wal = Wal::open(vfs(), cfg.clone(), Lsn::FIRST, Lsn::FIRST).unwrap();
    for n in 0..=2 {
        let f = vfs()
            .open(&cfg.dir.join(segment_file_name(n)), OpenMode::default())
            .unwrap();
        assert_eq!(f.len().unwrap(), WAL_SEGMENT_SIZE);
    }
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert!(recs.is_empty());
    assert_eq!(end, Lsn::FIRST);
    assert!(WalReader::open(vfs(), cfg.dir.clone(), Lsn(10 * WAL_SEGMENT_SIZE)).is_err());
}

/// True if the file system under `dir` accepts O_DIRECT (tmpfs does not).
fn direct_io_supported(dir: &Path) -> bool {
    let p = dir.join("direct-probe");
    let ok = RealVfs
        .open(
            &p,
            OpenMode {
                create: true,
                direct: true,
                ..Default::default()
            },
        )
        .is_ok();
    let _ = std::fs::remove_file(&p);
    ok
}

#[test]
fn every_sync_method_and_direct_io_round_trip_and_reopen_mid_block() {
    let base = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let direct_ok = direct_io_supported(base.path());
    if !direct_ok {
        eprintln!(
            "O_DIRECT unsupported under {}: testing buffered I/O only",
            base.path().display()
        );
    }
    for method in SyncMethod::ALL {
        for direct in [false, true] {
            if direct && !direct_ok {
                continue;
            }
            for (init_zero, recycle) in [(true, true), (false, false)] {
                let dir = base.path().join(format!("{method}-{direct}-{init_zero}"));
                let cfg = WalConfig {
                    sync_method: method,
                    direct,
                    direct_init: direct,
                    init_zero,
                    recycle,
                    ..config(&dir, 1 << 20, 1)
                };
                let case = format!("{method} direct={direct} init_zero={init_zero}");
                let wal = create_open(vfs(), &cfg);
                // Records of varied sizes, each flushed, so that most flushes end mid-block
                // and the next one rewrites the partial block.
                let mut ends = Vec::new();
                for seq in 0..300u32 {
                    let (_, e) = wal
                        .insert(&mut |_| tagged_record(1, seq, seq % 50 == 7))
                        .unwrap();
                    wal.flush(e).unwrap();
                    ends.push(e);
                }
                assert!(
                    ends.iter().any(|e| e.0 % 4096 != 0),
                    "{case}: some flush ends mid-block"
                );
                let fin = wal.insert_lsn();
                drop(wal);
                let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
                assert_eq!(recs.len(), 300, "{case}");
                assert_eq!(end, fin, "{case}");

                // Reopen at the (mid-block) end and go on: the first direct write rewrites the
                // partial block read back from disk.
                let wal = Wal::open(vfs(), cfg.clone(), end, Lsn::FIRST).unwrap();
                for seq in 300..310u32 {
                    let (_, e) = wal.insert(&mut |_| tagged_record(1, seq, false)).unwrap();
                    wal.flush(e).unwrap();
                }
                drop(wal);
                let (recs, _) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
                assert_eq!(recs.len(), 310, "{case}");
                for (i, r) in recs.iter().enumerate() {
                    assert_eq!(tag_of(&r.record), (1, i as u32), "{case}");
                    assert_eq!(
                        r.record,
                        tagged_record(1, i as u32, i % 50 == 7 && i < 300),
                        "{case}"
                    );
                }
            }
        }
    }
}

#[test]
fn adaptive_group_commit_groups_concurrent_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let syncs = Arc::new(AtomicU64::new(0));
    let v = Counting::vfs(syncs.clone(), Duration::from_millis(2));
    let cfg = config(tmp.path(), 1 << 20, 1);
    assert_eq!(cfg.group_commit, GroupCommitMode::Adaptive);
    let wal = create_open(v, &cfg);
    let flusher = RealVfs.cache_flusher(&cfg.dir).unwrap();
    assert_eq!(
        wal.sync_range_in_use(),
        flusher.is_some(),
        "production's path"
    );
    let threads = 8u32;
    let per_thread = 40u32;
    std::thread::scope(|s| {
        for t in 0..threads {
            let wal = &wal;
            s.spawn(move || {
                for seq in 0..per_thread {
                    let (_, e) = wal.insert(&mut |_| tagged_record(t, seq, false)).unwrap();
                    commit(&wal, e).unwrap();
                    assert!(wal.flush_lsn() >= e, "acknowledged before durable");
                }
            });
        }
    });
    let st = wal.stats();
    assert_eq!(st.group_commits, u64::from(threads * per_thread));
    assert!(
        st.group_flushes < u64::from(threads * per_thread),
        "commits were grouped: {} flushes",
        st.group_flushes
    );
    assert_eq!(
        st.group_histogram.iter().map(|(_, n)| n).sum::<u64>(),
        st.group_flushes
    );
    // Every flush has one close cause, and the single-commit ones are the histogram's "1".
    assert_eq!(
        st.group_closed.iter().map(|&(_, all, _)| all).sum::<u64>(),
        st.group_flushes
    );
    assert_eq!(
        st.group_closed.iter().map(|&(_, _, one)| one).sum::<u64>(),
        st.group_histogram[1].1
    );
    let closed = |cause: &str| st.group_closed.iter().find(|c| c.0 == cause).unwrap().1;
    assert_eq!(
        closed("fixed") + closed("background"),
        0,
        "{:?}",
        st.group_closed
    );

    // A flush for no commit (the WAL writer's, a page write's) is counted in bucket 0 and as
    // closed for the background, and never as a commit.
    let (_, e) = wal.insert(&mut |_| tagged_record(99, 0, false)).unwrap();
    wal.flush(e).unwrap();
    let after = wal.stats();
    assert_eq!(after.group_histogram[0], (0, st.group_histogram[0].1 + 1));
    assert_eq!(after.group_commits, st.group_commits);
    let background = |s: &WalStats| {
        s.group_closed
            .iter()
            .find(|c| c.0 == "background")
            .unwrap()
            .1
    };
    assert_eq!(background(&after), background(&st) + 1);

    let (recs, _) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(recs.len(), (threads * per_thread) as usize + 1);
}

/// Hooks over the real file system that offer a cache flusher (the `wal_sync_range` path)
/// and record the order of write-backs, cache flushes and fdatasyncs. `sparse` makes every
/// file report no allocated bytes, as a segment made with `wal_init_zero = off` would.
struct Range {
    log: Arc<std::sync::Mutex<Vec<&'static str>>>,
    sparse: bool,
}

impl Range {
    fn vfs(log: &Arc<std::sync::Mutex<Vec<&'static str>>>, sparse: bool) -> Arc<dyn Vfs> {
        let log = log.clone();
        Arc::new(HookVfs::new(
            Arc::new(RealVfs),
            Arc::new(Range { log, sparse }),
        ))
    }
}

impl Hooks for Range {
    fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
        self.log.lock().unwrap().push("fdatasync");
        file.io.sync_data()
    }
    fn write_back(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        assert!(
            len > 0 && offset + len <= WAL_SEGMENT_SIZE,
            "range within the segment"
        );
        self.log.lock().unwrap().push("write_back");
        file.io.write_back(offset, len)
    }
    fn allocated_bytes(&self, file: FileRef<'_>) -> io::Result<u64> {
        if self.sparse {
            Ok(0)
        } else {
            file.io.allocated_bytes()
        }
    }
    /// A flusher on any file system (the real one offers none on tmpfs, say), which flushes
    /// nothing: the test checks the order of calls, not durability.
    fn cache_flusher(
        &self,
        _vfs: &dyn Vfs,
        _dir: &Path,
    ) -> io::Result<Option<Arc<dyn walnut_io::CacheFlush>>> {
        Ok(Some(Arc::new(LoggedFlush(self.log.clone()))))
    }
}

struct LoggedFlush(Arc<std::sync::Mutex<Vec<&'static str>>>);

impl walnut_io::CacheFlush for LoggedFlush {
    fn flush(&self) -> io::Result<()> {
        self.0.lock().unwrap().push("cache_flush");
        Ok(())
    }
    fn describe(&self) -> String {
        "logged".into()
    }
}

#[test]
fn sync_range_writes_back_each_segment_then_flushes_the_cache_once() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let v = Range::vfs(&log, false);
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(v.clone(), &cfg);
    assert!(wal.sync_range_in_use());
    // Records with images, so that the WAL crosses into the next segment.
    let mut last = Lsn::FIRST;
    for seq in 0..2200u32 {
        log.lock().unwrap().clear();
        let (_, e) = wal.insert(&mut |_| tagged_record(1, seq, true)).unwrap();
        commit(&wal, e).unwrap();
        let ops = log.lock().unwrap().clone();
        // Every flush: one write-back per segment written, then exactly one cache flush, and
        // never an fdatasync of a segment.
        let n = ops.len();
        assert!(n >= 2, "{ops:?}");
        assert_eq!(ops[n - 1], "cache_flush", "{ops:?}");
        assert!(ops[..n - 1].iter().all(|o| *o == "write_back"), "{ops:?}");
        assert!(n - 1 <= 2, "at most two segments per flush: {ops:?}");
        last = e;
    }
    assert!(
        last.0 > WAL_SEGMENT_SIZE,
        "the test crossed a segment boundary"
    );
    let st = wal.stats();
    assert!(
        st.wal_sync >= 2200,
        "one cache flush per flush counts as a sync"
    );
    let fin = wal.insert_lsn();
    drop(wal);
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!((recs.len(), end), (2200, fin));
}

#[test]
fn sync_range_falls_back_to_fdatasync_where_it_is_not_safe() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    // A sparse segment (not fully allocated): its writes may allocate blocks.
    let sparse = Range::vfs(&log, true);
    let cfg = config(&tmp.path().join("a"), 1 << 20, 1);
    let wal = create_open(sparse, &cfg);
    assert!(wal.sync_range_in_use());
    let (_, e) = wal.insert(&mut |_| tagged_record(1, 0, false)).unwrap();
    log.lock().unwrap().clear();
    commit(&wal, e).unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["fdatasync"]);
    drop(wal);
    // wal_init_zero = off, another sync method, or wal_sync_range = off: never the range path.
    for (name, cfg) in [
        (
            "init_zero",
            WalConfig {
                init_zero: false,
                ..config(&tmp.path().join("b"), 1 << 20, 1)
            },
        ),
        (
            "fsync",
            WalConfig {
                sync_method: SyncMethod::Fsync,
                ..config(&tmp.path().join("c"), 1 << 20, 1)
            },
        ),
        (
            "off",
            WalConfig {
                sync_range: false,
                ..config(&tmp.path().join("d"), 1 << 20, 1)
            },
        ),
    ] {
        let v = Range::vfs(&log, false);
        let wal = create_open(v, &cfg);
        assert!(!wal.sync_range_in_use(), "{name}");
        let (_, e) = wal.insert(&mut |_| tagged_record(1, 0, false)).unwrap();
        log.lock().unwrap().clear();
        commit(&wal, e).unwrap();
        let ops = log.lock().unwrap().clone();
        assert!(
            !ops.contains(&"write_back") && !ops.contains(&"cache_flush"),
            "{name}: {ops:?}"
        );
    }
}

#[test]
fn corrupt_durable_wal_before_a_flush_mark_is_an_error_naming_its_lsn() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    let mut ranges = Vec::new();
    for seq in 0..40u32 {
        let r = wal.insert(&mut |_| tagged_record(0, seq, false)).unwrap();
        commit(&wal, r.1).unwrap();
        ranges.push(r);
    }
    drop(wal);
    let seg = cfg.dir.join(segment_file_name(0));
    let flip = |at: u64| {
        let f = vfs().open(&seg, OpenMode::default()).unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_at(&[b[0] ^ 0x10], at).unwrap();
        f.sync_data().unwrap();
    };
    // Record 20 was durable before flushes 21..39 wrote their marks: corruption, not the end.
    let (s20, e20) = ranges[20];
    flip((s20.0 + e20.0) / 2);
    let mut r = WalReader::open(vfs(), cfg.dir.clone(), Lsn::FIRST).unwrap();
    let mut n = 0;
    let err = loop {
        match r.next_record() {
            Ok(Some(_)) => n += 1,
            Ok(None) => panic!("corruption at {s20} was taken for the end of WAL"),
            Err(e) => break e,
        }
    };
    assert_eq!(n, 20, "the records before the damage are read");
    assert_eq!(err.kind, walnut_common::ErrorKind::Corruption);
    assert!(err.message.contains(&s20.to_string()), "{}", err.message);
    flip((s20.0 + e20.0) / 2); // repair

    // The last record: no later mark attests it, so it is a torn tail.
    let (s39, e39) = ranges[39];
    flip((s39.0 + e39.0) / 2);
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!((recs.len(), end), (39, s39));
}

#[test]
fn power_loss_images_never_look_corrupt() {
    // Every crash image of a WAL under load reads to a clean end: torn tails are never taken
    // for corruption, and every acknowledged record is there.
    use walnut_io::fault::{CrashKind, FaultConfig, FaultVfs};
    let seed = std::env::var("WALNUT_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_u64);
    eprintln!("power_loss_images_never_look_corrupt: seed {seed}");
    let fv = FaultVfs::new(FaultConfig::new(seed));
    let v: Arc<dyn Vfs> = Arc::new(fv.clone());
    let dir = PathBuf::from("/wal");
    let cfg = WalConfig {
        wal_buffers_bytes: 1 << 20,
        prealloc_segments: 1,
        ..WalConfig::new(&dir)
    };
    let wal = create_open(v, &cfg);
    let acked: std::sync::Mutex<Vec<(u32, u32, u64)>> = std::sync::Mutex::new(Vec::new());
    let mut images = Vec::new();
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (wal, acked, fv) = (&wal, &acked, &fv);
            s.spawn(move || {
                for seq in 0..150u32 {
                    let (_, e) = wal
                        .insert(&mut |_| tagged_record(t, seq, seq % 7 == 0))
                        .unwrap();
                    commit(&wal, e).unwrap();
                    let at = fv.seq();
                    acked.lock().unwrap().push((t, seq, at));
                }
            });
        }
        for i in 0..12u64 {
            std::thread::sleep(Duration::from_millis(3));
            images.push(fv.crash_image(CrashKind::PowerLoss, seed ^ i));
        }
    });
    let acked = acked.into_inner().unwrap();
    for (i, (img, at)) in images.into_iter().enumerate() {
        let (recs, _) = read_all(Arc::new(img), dir.clone(), Lsn::FIRST);
        let got: std::collections::HashSet<(u32, u32)> =
            recs.iter().map(|r| tag_of(&r.record)).collect();
        for &(t, seq, a) in &acked {
            if a < at {
                assert!(
                    got.contains(&(t, seq)),
                    "image {i}: acknowledged record ({t},{seq}) lost"
                );
            }
        }
    }
}

#[test]
fn full_disk_fails_check_space_with_53100_and_never_panics() {
    use walnut_io::fault::{FaultConfig, FaultPlan, FaultVfs};
    let fv = FaultVfs::new(FaultConfig::new(11));
    let v: Arc<dyn Vfs> = Arc::new(fv.clone());
    let dir = PathBuf::from("/wal");
    let cfg = WalConfig {
        wal_buffers_bytes: 1 << 20,
        prealloc_segments: 1,
        ..WalConfig::new(&dir)
    };
    let wal = create_open(v, &cfg);
    // No new segment can be created from now on.
    fv.set_plan(FaultPlan {
        write_enospc: 1.0,
        path_filter: Some("xlogtemp".into()),
        ..Default::default()
    });
    let row = 16 * BLCKSZ as u64;
    let mut written = 0u32;
    let err = loop {
        match wal.check_space(row) {
            Ok(()) => {
                let (_, e) = wal
                    .insert(&mut |_| tagged_record(0, written, true))
                    .unwrap();
                commit(&wal, e).unwrap();
                written += 1;
                assert!(written < 10_000, "the disk never filled");
            }
            Err(e) => break e,
        }
    };
    assert_eq!(err.sqlstate, walnut_common::SqlState::DISK_FULL, "{err}");
    assert!(
        written > 100,
        "the existing segments were used first ({written} records)"
    );
    // Space comes back: the WAL goes on, and everything written is there.
    fv.set_plan(FaultPlan::default());
    wal.check_space(row).unwrap();
    let (_, e) = wal
        .insert(&mut |_| tagged_record(0, written, false))
        .unwrap();
    commit(&wal, e).unwrap();
    drop(wal);
    let (recs, _) = read_all(Arc::new(fv.clone()), dir, Lsn::FIRST);
    assert_eq!(recs.len() as u32, written + 1);
}

// ---------------------------------------------------------------------------------------------
// The end-of-WAL decision table (DESIGN.md, "Reading (`XLogReadRecord`) and the end of WAL")

/// Hooks whose files with `fail` in their path fail every read with EIO.
struct FailingReads {
    fail: String,
}

impl FailingReads {
    fn check(&self, file: FileRef<'_>) -> io::Result<()> {
        if file.path.to_string_lossy().contains(self.fail.as_str()) {
            return Err(io::Error::from_raw_os_error(5));
        }
        Ok(())
    }
}

impl Hooks for FailingReads {
    fn read_at(&self, file: FileRef<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.check(file)?;
        file.io.read_at(buf, offset)
    }
    fn read_exact_at(&self, file: FileRef<'_>, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(file)?;
        file.io.read_exact_at(buf, offset)
    }
}

/// How the reader ends in one cell of the decision table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// `Ok(None)` at the bad record: the end of WAL.
    End,
    /// A corruption error naming the bad record's LSN and the mark that attests it.
    Corruption,
    /// An I/O error.
    Io,
}

/// Every row of the decision table, in both columns. The stream: three good records that end
/// exactly at the end of segment 0; the record X at the start of segment 1, damaged as the row
/// says, followed by a good record Y; a flush mark at the start of segment 2 that attests the
/// end of X (column "a later mark attests it") or exactly X's start, which is not beyond it
/// (column "no later mark attests it": a mark says what was durable *before* its position).
#[test]
fn every_cell_of_the_end_of_wal_decision_table() {
    use walnut_io::fault::{FaultConfig, FaultVfs};
    const SEG: u64 = WAL_SEGMENT_SIZE;
    let dir = PathBuf::from("/wal");
    let seg_path = |segno: u64| dir.join(segment_file_name(segno));
    let rec = |n: u8, main: usize| Record {
        rmgr: RmgrId(1),
        info: n,
        xid: Xid(u64::from(n)),
        flags: 0,
        blocks: vec![],
        main_data: vec![n; main],
    };
    let mark = |durable: u64| Record {
        rmgr: RM_WAL,
        info: WAL_FLUSH_MARK,
        xid: Xid::INVALID,
        flags: 0,
        blocks: vec![],
        main_data: durable.to_le_bytes().to_vec(),
    };
    let good: Vec<Record> = (0..3).map(|n| rec(n, 1024 - RECORD_HEADER_LEN)).collect();
    let start = SEG - 3 * 1024;
    let bad = SEG;
    let x = rec(10, 200);
    let x_bytes = encode_record(Lsn(bad), &x);
    let y_at = bad + x_bytes.len() as u64;
    let mark_at = 2 * SEG;
    let build = |attested: bool| {
        let fv = FaultVfs::new(FaultConfig::new(1));
        fv.create_dir_all(&dir).unwrap();
        let put = |at: u64, bytes: &[u8]| {
            let mode = OpenMode {
                create: true,
                ..Default::default()
            };
            let f = fv.open(&seg_path(segment_of(at)), mode).unwrap();
            f.write_at(bytes, at % SEG).unwrap();
        };
        let mut at = start;
        for g in &good {
            let b = encode_record(Lsn(at), g);
            put(at, &b);
            at += b.len() as u64;
        }
        assert_eq!(at, bad, "the good records end at the segment boundary");
        put(bad, &x_bytes);
        put(y_at, &encode_record(Lsn(y_at), &rec(11, 100)));
        let attests = if attested { y_at } else { bad };
        put(mark_at, &encode_record(Lsn(mark_at), &mark(attests)));
        fv
    };
    let rows = [
        "segment file missing",
        "fewer bytes than the header",
        "fewer bytes than total_len",
        "total_len == 0",
        "total_len < 32",
        "total_len > 1 GiB",
        "header LSN != position",
        "CRC mismatch",
        "malformed lengths",
        "read(2) fails",
    ];
    for row in rows {
        for attested in [false, true] {
            let case = format!(
                "{row}, {}",
                if attested {
                    "a later mark attests it"
                } else {
                    "no later mark attests it"
                }
            );
            let fv = build(attested);
            let seg1 = || fv.open(&seg_path(1), OpenMode::default()).unwrap();
            match row {
                "segment file missing" => fv.remove(&seg_path(1)).unwrap(),
                "fewer bytes than the header" => {
                    seg1().set_len(RECORD_HEADER_LEN as u64 - 8).unwrap();
                }
                "fewer bytes than total_len" => seg1().set_len(x_bytes.len() as u64 - 8).unwrap(),
                "total_len == 0" => seg1().write_at(&vec![0; x_bytes.len()], 0).unwrap(),
                "total_len < 32" => seg1().write_at(&16u32.to_le_bytes(), 0).unwrap(),
                "total_len > 1 GiB" => {
                    let len = MAX_RECORD_LEN as u32 + 8;
                    seg1().write_at(&len.to_le_bytes(), 0).unwrap();
                }
                // What a recycled segment holds at this offset: a record of its previous life.
                "header LSN != position" => seg1()
                    .write_at(&encode_record(Lsn(bad - SEG), &x), 0)
                    .unwrap(),
                "CRC mismatch" => seg1().write_at(&[x_bytes[100] ^ 0x08], 100).unwrap(),
                // main_data_len 8 short, under a valid CRC: the fields leave trailing bytes.
                "malformed lengths" => {
                    let mut b = x_bytes.clone();
                    b[28..32].copy_from_slice(&(x.main_data.len() as u32 - 8).to_le_bytes());
                    let total = u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize;
                    let crc =
                        walnut_common::crc32c_append(walnut_common::crc32c(&b[8..total]), &b[0..4]);
                    b[4..8].copy_from_slice(&crc.to_le_bytes());
                    seg1().write_at(&b, 0).unwrap();
                }
                "read(2) fails" => {}
                _ => unreachable!("{row}"),
            }
            let v: Arc<dyn Vfs> = if row == "read(2) fails" {
                Arc::new(HookVfs::new(
                    Arc::new(fv.clone()),
                    Arc::new(FailingReads {
                        fail: segment_file_name(1),
                    }),
                ))
            } else {
                Arc::new(fv.clone())
            };
            let expected = match (row, attested) {
                ("read(2) fails", _) => Ending::Io,
                (_, false) => Ending::End,
                (_, true) => Ending::Corruption,
            };
            let mut r = WalReader::open(v, dir.clone(), Lsn(start)).unwrap();
            let mut got = Vec::new();
            let ending = loop {
                match r.next_record() {
                    Ok(Some(d)) => got.push(d.record),
                    Ok(None) => break Ending::End,
                    Err(e) => match e.kind {
                        walnut_common::ErrorKind::Corruption => {
                            for lsn in [Lsn(bad), Lsn(mark_at)] {
                                assert!(
                                    e.message.contains(&lsn.to_string()),
                                    "{case}: the error names {lsn}: {}",
                                    e.message
                                );
                            }
                            break Ending::Corruption;
                        }
                        walnut_common::ErrorKind::Io => break Ending::Io,
                        _ => panic!("{case}: unexpected error {e}"),
                    },
                }
            };
            assert_eq!(got, good, "{case}: the records before X are read");
            assert_eq!(ending, expected, "{case}");
            if ending == Ending::End {
                assert_eq!(r.end_lsn(), Lsn(bad), "{case}: the WAL ends at X");
                assert!(
                    r.next_record().unwrap().is_none(),
                    "{case}: the end is sticky"
                );
            }
        }
    }
}
