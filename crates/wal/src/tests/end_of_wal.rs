//! The end of WAL (DESIGN.md, "Reading (`XLogReadRecord`) and the end of WAL"): the decision
//! table cell by cell, and through a real WAL: torn tails, stale records after the end,
//! corruption before a flush mark, power-loss images.

use super::*;

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
            .open(&cfg.dir.join(segment_file_name(1, 0)), OpenMode::default())
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
        .open(&cfg.dir.join(segment_file_name(1, 0)), OpenMode::default())
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
    let seg = cfg.dir.join(segment_file_name(1, 0));
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
                    // Every other image compresses (stored LZ4-compressed).
                    let (_, e) = wal
                        .insert(&mut |_| match seq % 14 {
                            0 => tagged_record_compressible(t, seq),
                            _ => tagged_record(t, seq, seq % 7 == 0),
                        })
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
    let seg_path = |segno: u64| dir.join(segment_file_name(1, segno));
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
                        fail: segment_file_name(1, 1),
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
