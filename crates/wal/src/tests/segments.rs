//! Segments: file names, preallocation, recycling (and the stale records a recycled segment
//! holds), a full disk.

use super::*;

#[test]
fn segment_names_follow_postgres() {
    assert_eq!(segment_file_name(1, 0), "000000010000000000000000");
    assert_eq!(segment_file_name(1, 1), "000000010000000000000001");
    assert_eq!(segment_file_name(1, 255), "0000000100000000000000FF");
    assert_eq!(segment_file_name(1, 256), "000000010000000100000000");
    assert_eq!(segment_file_name(0x1A, 256), "0000001A0000000100000000");
    for n in [0, 1, 255, 256, 12345] {
        for tli in [1, 2, 0xFFFF_FFFF] {
            assert_eq!(
                parse_segment_file_name(&segment_file_name(tli, n)),
                Some((tli, n))
            );
        }
    }
    assert_eq!(parse_segment_file_name("000000000000000000000001"), None);
    assert_eq!(parse_segment_file_name("0000000100000000000001FF"), None);
    assert_eq!(parse_segment_file_name("00000001000000000000001f"), None);
    assert_eq!(parse_segment_file_name("00000001.history"), None);
    assert_eq!(parse_segment_file_name("xlogtemp.3"), None);
}

#[test]
fn create_preallocates_and_open_keeps_segments_ahead() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 2);
    Wal::create(vfs(), &cfg).unwrap();
    let seg0 = vfs()
        .open(&cfg.dir.join(segment_file_name(1, 0)), OpenMode::default())
        .unwrap();
    assert_eq!(seg0.len().unwrap(), WAL_SEGMENT_SIZE);
    let _wal = Wal::open(vfs(), cfg.clone(), Lsn::FIRST, Lsn::FIRST).unwrap();
    for n in 0..=2 {
        let f = vfs()
            .open(&cfg.dir.join(segment_file_name(1, n)), OpenMode::default())
            .unwrap();
        assert_eq!(f.len().unwrap(), WAL_SEGMENT_SIZE);
    }
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert!(recs.is_empty());
    assert_eq!(end, Lsn::FIRST);
    assert!(WalReader::open(vfs(), cfg.dir.clone(), Lsn(10 * WAL_SEGMENT_SIZE)).is_err());
}

/// The WAL directory's segment files as (timeline, segment number), sorted by segment.
fn named_segments(dir: &Path) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = RealVfs
        .list_dir(dir)
        .unwrap()
        .into_iter()
        .filter_map(|n| parse_segment_file_name(&n))
        .collect();
    v.sort_by_key(|&(tli, segno)| (segno, tli));
    v
}

#[test]
fn a_wal_opened_on_a_new_timeline_renames_the_switch_segment_and_later_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 4 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    let mut seq = 0;
    while wal.insert_lsn().0 < WAL_SEGMENT_SIZE + 100_000 {
        wal.insert(&mut |_| tagged_record(0, seq, true)).unwrap();
        seq += 1;
    }
    wal.flush(wal.insert_lsn()).unwrap();
    drop(wal);
    assert_eq!(named_segments(&cfg.dir), vec![(1, 0), (1, 1), (1, 2)]);
    // Promotion: the WAL reopens at the end of what was replayed, on timeline 2.
    let (recs, end) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(recs.len(), seq as usize);
    let cfg2 = WalConfig {
        timeline: 2,
        ..cfg.clone()
    };
    let wal = Wal::open(vfs(), cfg2.clone(), end, Lsn::FIRST).unwrap();
    assert_eq!(wal.timeline(), 2);
    // The switch point's segment and the preallocated one after it carry timeline 2; the one
    // wholly before the switch keeps timeline 1 (PostgreSQL's names).
    assert_eq!(named_segments(&cfg.dir), vec![(1, 0), (2, 1), (2, 2)]);
    while wal.insert_lsn().0 < 2 * WAL_SEGMENT_SIZE + 100_000 {
        wal.insert(&mut |_| tagged_record(0, seq, true)).unwrap();
        seq += 1;
    }
    wal.flush(wal.insert_lsn()).unwrap();
    assert_eq!(
        named_segments(&cfg.dir),
        vec![(1, 0), (2, 1), (2, 2), (2, 3)]
    );
    // The reader crosses from timeline 1's file into timeline 2's by segment number.
    let (recs, _) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(recs.len(), seq as usize);
    for (i, d) in recs.iter().enumerate() {
        assert_eq!(tag_of(&d.record).1, i as u32);
    }
    assert_eq!(
        wal.segment_path(0).unwrap(),
        Some(cfg.dir.join("000000010000000000000000"))
    );
    assert_eq!(
        wal.segment_path(1).unwrap(),
        Some(cfg.dir.join("000000020000000000000001"))
    );
    assert_eq!(wal.segment_path(9).unwrap(), None);
    // A recycled segment of timeline 1 takes timeline 2's name (segment 1 is removed: two
    // preallocated ahead are enough).
    let redo = wal.begin_checkpoint();
    wal.remove_old_segments(redo, 0).unwrap();
    assert_eq!(named_segments(&cfg.dir), vec![(2, 2), (2, 3), (2, 4)]);
    drop(wal);
    // A stale copy of a segment under an older timeline's name is removed when the WAL opens
    // on the newer one; the newer file stays the segment's.
    std::fs::copy(
        cfg.dir.join("000000020000000000000004"),
        cfg.dir.join("000000010000000000000004"),
    )
    .unwrap();
    let (_, end) = read_all(vfs(), cfg.dir.clone(), redo);
    let wal = Wal::open(vfs(), cfg2, end, redo).unwrap();
    assert_eq!(
        wal.segment_path(4).unwrap(),
        Some(cfg.dir.join("000000020000000000000004"))
    );
    assert_eq!(named_segments(&cfg.dir), vec![(2, 2), (2, 3), (2, 4)]);
    assert_eq!(
        list_segments(&RealVfs, &cfg.dir).unwrap(),
        vec![(2, 2), (3, 2), (4, 2)]
    );
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
    let names =
        |dir: &Path| -> Vec<u64> { named_segments(dir).into_iter().map(|(_, s)| s).collect() };
    assert_eq!(names(&cfg.dir), vec![0, 1, 2]);
    wal.remove_old_segments(redo, 0).unwrap();
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
        .open(&cfg.dir.join(segment_file_name(1, 3)), OpenMode::default())
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

/// Creating a segment that exists, under any timeline's name, does nothing: the rename into
/// place would otherwise replace a segment in use with zeros.
#[test]
fn creating_an_existing_segment_leaves_it_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    for seq in 0..10 {
        wal.insert(&mut |_| tagged_record(0, seq, true)).unwrap();
    }
    wal.flush(wal.insert_lsn()).unwrap();
    for tli in [1, 2] {
        segment::preallocate(&RealVfs, &cfg.dir, tli, 0, segment::InitOpts::default()).unwrap();
    }
    assert_eq!(named_segments(&cfg.dir), vec![(1, 0), (1, 1)]);
    let (recs, _) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(recs.len(), 10);
}
