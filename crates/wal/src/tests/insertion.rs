//! Insertion: concurrent inserters read back once and in order across segments, records larger
//! than the WAL buffers, and assembly redone when a checkpoint moves the redo point.

use super::*;

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
                image_lz4: false,
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

/// With `wal_compression` at its default (lz4), images that compress are stored compressed and
/// read back whole; with `off` the same records take a full page each; a reload switches.
#[test]
fn compressed_images_read_back_whole_and_take_less_wal() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    assert_eq!(cfg.compression, WalCompression::Lz4, "the default");
    let wal = create_open(vfs(), &cfg);
    let insert_all = |first: u32| {
        let start = wal.insert_lsn();
        let mut want = Vec::new();
        for seq in first..first + 50 {
            let rec = tagged_record_compressible(3, seq);
            wal.insert(&mut |_| rec.clone()).unwrap();
            want.push(rec);
        }
        (wal.insert_lsn().0 - start.0, want)
    };
    let (lz4_bytes, mut want) = insert_all(0);
    use walnut_common::guc::{Registry, Settings, Source};
    let mut s = Settings::defaults(std::sync::Arc::new(Registry::new(&[crate::GUCS])));
    s.set("wal_compression", "off", Source::Default).unwrap();
    wal.apply_settings(&s);
    assert_eq!(wal.compression(), WalCompression::Off);
    let (off_bytes, more) = insert_all(50);
    want.extend(more);
    wal.flush(wal.insert_lsn()).unwrap();
    assert!(
        off_bytes >= 50 * BLCKSZ as u64 && lz4_bytes * 4 < off_bytes,
        "lz4 {lz4_bytes} bytes, off {off_bytes} bytes"
    );
    let (got, _) = read_all(vfs(), tmp.path().join("wal"), Lsn::FIRST);
    let got: Vec<Record> = got
        .into_iter()
        .map(|d| d.record)
        .filter(|r| r.rmgr == RmgrId(3))
        .collect();
    assert_eq!(got, want);
}
