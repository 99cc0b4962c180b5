//! Sync methods and direct I/O, and the `wal_sync_range` path (write-back per segment, then one
//! device cache flush) with its fallbacks to fdatasync.

use super::*;

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
