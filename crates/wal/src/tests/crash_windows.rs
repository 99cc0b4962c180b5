//! Crash windows of DESIGN.md ("Crash windows") that the other tests in `tests/` do not reach,
//! through the fault-injecting file system: a [`CrashPoints`] Vfs takes crash images just
//! before a chosen call (a write, a sync, a rename, a directory fsync), and each image is
//! recovered and checked on a thread of its own. Every test prints its seed;
//! `WALNUT_CRASH_SEED` replays one.

use super::*;

/// The seed of a crash test: `WALNUT_CRASH_SEED` if set, else `default`. Printed.
fn crash_seed(test: &str, default: u64) -> u64 {
    let seed = std::env::var("WALNUT_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    eprintln!("{test}: seed {seed} (replay with WALNUT_CRASH_SEED={seed})");
    seed
}

/// A state-changing call that a [`CrashPoints`] Vfs is about to pass on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Write,
    SetLen,
    /// `sync_data` or `sync_all`.
    Sync,
    WriteBack,
    Rename,
    Remove,
    SyncDir,
}

/// Called with each state-changing call and its path (a rename's source) before it is issued.
type CallHook = Arc<dyn Fn(Call, &Path) + Send + Sync>;

/// Hooks over a [`walnut_io::fault::FaultVfs`] that call a hook just before they pass on each
/// call that changes state, so that a test can take crash images of the instant before a chosen
/// call: the machine stops before the call is issued. Reads, `open` (and the file creation it
/// may do) and device cache flushes pass through unseen.
struct CrashPoints {
    hook: CallHook,
}

impl CrashPoints {
    /// `fv`, stopping at the crash points: `hook` sees each call before it is issued.
    fn over(fv: &walnut_io::fault::FaultVfs, hook: CallHook) -> Arc<dyn Vfs> {
        Arc::new(HookVfs::new(
            Arc::new(fv.clone()),
            Arc::new(CrashPoints { hook }),
        ))
    }
}

impl Hooks for CrashPoints {
    fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        (self.hook)(Call::Write, file.path);
        file.io.write_at(buf, offset)
    }
    fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
        (self.hook)(Call::Sync, file.path);
        file.io.sync_data()
    }
    fn sync_all(&self, file: FileRef<'_>) -> io::Result<()> {
        (self.hook)(Call::Sync, file.path);
        file.io.sync_all()
    }
    fn set_len(&self, file: FileRef<'_>, len: u64) -> io::Result<()> {
        (self.hook)(Call::SetLen, file.path);
        file.io.set_len(len)
    }
    fn write_back(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        (self.hook)(Call::WriteBack, file.path);
        file.io.write_back(offset, len)
    }
    fn remove(&self, vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
        (self.hook)(Call::Remove, path);
        vfs.remove(path)
    }
    fn rename(&self, vfs: &dyn Vfs, from: &Path, to: &Path) -> io::Result<()> {
        (self.hook)(Call::Rename, from);
        vfs.rename(from, to)
    }
    fn sync_dir(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
        (self.hook)(Call::SyncDir, dir);
        vfs.sync_dir(dir)
    }
}

/// Runs `check` on a thread of its own (it opens a second WAL, and the hook that calls it runs
/// inside the first one's I/O calls) and returns its panic message, if it panicked.
fn run_check(check: impl FnOnce() + Send) -> Option<String> {
    std::thread::scope(|s| s.spawn(check).join())
        .err()
        .map(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into())
        })
}

fn is_temp_file(name: &str) -> bool {
    name.starts_with("xlogtemp.")
}

/// An instant in the creation of a segment (`segment::preallocate`), just before a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CreationPoint {
    /// The nth (1-based) write of zeros into the temporary file.
    TempWrite(u32),
    /// The fsync of the complete temporary file.
    TempSync,
    /// The rename of the temporary file to the segment's name.
    Rename,
    /// The directory fsync after the rename.
    DirSync,
}

/// What the crash images of [`segment_creation_crashes`] held before recovery.
#[derive(Debug, Default)]
struct CreationImages {
    /// Images recovered and checked.
    images: u32,
    /// Images that held a temporary file (`xlogtemp.N`).
    temp_file: u32,
    /// Power-loss images taken just before the directory fsync that follows the rename: with
    /// the new segment's name, and without it.
    renamed_kept: u32,
    renamed_lost: u32,
    /// The creation points reached.
    reached: Vec<CreationPoint>,
}

/// Recovers one crash image of [`segment_creation_crashes`]'s workload and checks it: every
/// segment file is whole (16 MiB), the first `acked` commits are there in order, `Wal::open`
/// removes every temporary file, and the WAL goes on into segment 1, creating the segments it
/// needs again, and reads back in full.
fn check_creation_image(img: &walnut_io::fault::FaultVfs, cfg: &WalConfig, start: Lsn, acked: u32) {
    let dir = &cfg.dir;
    let v: Arc<dyn Vfs> = Arc::new(img.clone());
    let segments_whole = |when: &str| {
        for name in v.list_dir(dir).unwrap() {
            if parse_segment_file_name(&name).is_some() {
                let len = v
                    .open(&dir.join(&name), OpenMode::default())
                    .unwrap()
                    .len()
                    .unwrap();
                assert_eq!(len, WAL_SEGMENT_SIZE, "{when}: segment {name} is partial");
            }
        }
    };
    segments_whole("after the crash");
    let (recs, end) = read_all(v.clone(), dir.clone(), start);
    assert!(
        recs.len() >= acked as usize,
        "{} of {acked} acknowledged commits survived",
        recs.len()
    );
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(tag_of(&r.record), (0, i as u32), "commits in order");
    }
    let wal = Wal::open(v.clone(), cfg.clone(), end, start).unwrap();
    let temps: Vec<String> = v
        .list_dir(dir)
        .unwrap()
        .into_iter()
        .filter(|n| is_temp_file(n))
        .collect();
    assert!(temps.is_empty(), "Wal::open left {temps:?} behind");
    let mut seq = recs.len() as u32;
    while wal.insert_lsn().0 < WAL_SEGMENT_SIZE + 4096 {
        let (_, e) = wal.insert(&mut |_| tagged_record(0, seq, false)).unwrap();
        commit(&wal, e).unwrap();
        seq += 1;
    }
    for segno in 0..=1 + u64::from(cfg.prealloc_segments) {
        assert!(
            v.exists(&dir.join(segment_file_name(1, segno))),
            "segment {segno} was created again"
        );
    }
    segments_whole("after recovery");
    let fin = wal.insert_lsn();
    drop(wal);
    let (recs, end) = read_all(v, dir.clone(), start);
    assert_eq!(
        (recs.len() as u32, end),
        (seq, fin),
        "everything reads back"
    );
}

/// Commits one record at a time from 4 KiB before the end of segment 0 into segment 1, on a
/// [`CrashPoints`] Vfs. With `prealloc_segments = 0` the writer creates segment 1 on demand and
/// then writes WAL into it; with 1, segment 1 exists from the start and segment 2 is created
/// ahead, after the flush that enters segment 1. Just before each of `points` of the segment's
/// creation, and (if `after_acks`) after each of the first three commits acknowledged in
/// segment 1, it takes crash images and recovers each with [`check_creation_image`]. Panics
/// with every failed check's message.
fn segment_creation_crashes(
    test: &str,
    prealloc_segments: u32,
    points: &'static [CreationPoint],
    after_acks: bool,
) -> CreationImages {
    use walnut_io::fault::{CrashKind, FaultConfig, FaultVfs};
    let seed = crash_seed(test, 0xC4EA7E ^ u64::from(prealloc_segments));
    let fv = FaultVfs::new(FaultConfig::new(seed));
    let dir = PathBuf::from("/wal");
    let cfg = WalConfig {
        wal_buffers_bytes: 1 << 20,
        prealloc_segments,
        ..WalConfig::new(&dir)
    };
    // As if earlier WAL had filled segment 0: the first record goes 4 KiB before its end.
    let start = Lsn(WAL_SEGMENT_SIZE - 4096);
    let new_segment = dir.join(segment_file_name(1, 1 + u64::from(prealloc_segments)));
    let armed = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = Arc::new(std::sync::Mutex::new(CreationImages::default()));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let images_taken = Arc::new(AtomicU64::new(0));
    // Takes `kinds` images (or, for power losses just before the directory fsync, as many as it
    // takes to see the rename both kept and lost: at least 4, at most 64) and checks each.
    let crash_and_check = {
        let (fv, cfg, seen, failures, acked, images_taken) = (
            fv.clone(),
            cfg.clone(),
            seen.clone(),
            failures.clone(),
            acked.clone(),
            images_taken.clone(),
        );
        move |what: &str, kinds: &[CrashKind], until_both: bool| {
            let acked = acked.load(Ordering::SeqCst);
            let mut k = 0;
            loop {
                let (kept, lost) = {
                    let s = seen.lock().unwrap();
                    (s.renamed_kept, s.renamed_lost)
                };
                let more = if until_both {
                    k < 64 && (k < 4 || kept == 0 || lost == 0)
                } else {
                    k < kinds.len()
                };
                if !more {
                    break;
                }
                let kind = if until_both {
                    CrashKind::PowerLoss
                } else {
                    kinds[k]
                };
                let n = images_taken.fetch_add(1, Ordering::SeqCst);
                let image_seed = seed ^ (n + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let (img, _) = fv.crash_image(kind, image_seed);
                {
                    let mut s = seen.lock().unwrap();
                    s.images += 1;
                    if img
                        .list_dir(&cfg.dir)
                        .unwrap()
                        .iter()
                        .any(|n| is_temp_file(n))
                    {
                        s.temp_file += 1;
                    }
                    if until_both {
                        if img.exists(&new_segment) {
                            s.renamed_kept += 1;
                        } else {
                            s.renamed_lost += 1;
                        }
                    }
                }
                if let Some(msg) = run_check(|| check_creation_image(&img, &cfg, start, acked)) {
                    failures.lock().unwrap().push(format!(
                        "{what}, {kind:?} image (image seed {image_seed}, {acked} acknowledged commits): {msg}"
                    ));
                }
                k += 1;
            }
        }
    };
    let crash_and_check = Arc::new(crash_and_check);
    // Which creation point a call is, from the calls before it.
    let state = std::sync::Mutex::new((0u32, false)); // (temp-file writes, renamed)
    let hook: CallHook = {
        let (armed, seen, crash_and_check) = (armed.clone(), seen.clone(), crash_and_check.clone());
        Arc::new(move |call: Call, path: &Path| {
            if !armed.load(Ordering::SeqCst) {
                return;
            }
            let temp = path
                .file_name()
                .is_some_and(|n| is_temp_file(&n.to_string_lossy()));
            let point = {
                let mut st = state.lock().unwrap();
                match call {
                    Call::SetLen if temp => {
                        st.0 = 0;
                        None
                    }
                    Call::Write if temp => {
                        st.0 += 1;
                        Some(CreationPoint::TempWrite(st.0))
                    }
                    Call::Sync if temp => Some(CreationPoint::TempSync),
                    Call::Rename if temp => {
                        st.1 = true;
                        Some(CreationPoint::Rename)
                    }
                    Call::SyncDir if st.1 => {
                        st.1 = false;
                        Some(CreationPoint::DirSync)
                    }
                    _ => None,
                }
            };
            let Some(point) = point.filter(|p| points.contains(p)) else {
                return;
            };
            seen.lock().unwrap().reached.push(point);
            let what = format!("just before {point:?}");
            if point == CreationPoint::DirSync {
                crash_and_check(&what, &[][..], true);
            } else {
                // Five power losses: a rename issued before the temporary file's fsync shows
                // as a partial segment in those that keep the rename, about a third.
                let mut kinds = [CrashKind::PowerLoss; 6];
                kinds[0] = CrashKind::ProcessKill;
                crash_and_check(&what, &kinds[..], false);
            }
        })
    };
    let v = CrashPoints::over(&fv, hook);
    Wal::create(v.clone(), &cfg).unwrap();
    let wal = Wal::open(v, cfg.clone(), start, start).unwrap();
    armed.store(true, Ordering::SeqCst);
    let mut seq = 0u32;
    let mut in_segment_1 = 0;
    while wal.insert_lsn().0 < WAL_SEGMENT_SIZE + 8192 {
        let (_, e) = wal.insert(&mut |_| tagged_record(0, seq, false)).unwrap();
        commit(&wal, e).unwrap();
        seq += 1;
        acked.store(seq, Ordering::SeqCst);
        if after_acks && e.0 > WAL_SEGMENT_SIZE && in_segment_1 < 3 {
            in_segment_1 += 1;
            let kinds = [CrashKind::PowerLoss; 3];
            crash_and_check(
                &format!("after commit {seq}, in segment 1"),
                &kinds[..],
                false,
            );
        }
    }
    armed.store(false, Ordering::SeqCst);
    drop(wal);
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{test} (prealloc_segments = {prealloc_segments}): {} failed checks:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!("{test} (prealloc_segments = {prealloc_segments}): {seen:?}");
    for p in points {
        assert!(seen.reached.contains(p), "{p:?} was never reached");
    }
    seen
}

/// A crash in the middle of creating a segment (while zeros are written to its temporary file,
/// before the temporary file's fsync, before the rename) leaves at most a temporary file, never
/// a partial segment under its real name, loses no acknowledged commit, and `Wal::open` removes
/// the temporary file; the segment is created again when the WAL needs it. Catches a segment
/// written in place or renamed before its fsync (a partial segment in a power-loss image), an
/// open that leaves `xlogtemp.N` behind, and a recovery that cannot go on into the segment.
#[test]
fn crash_mid_preallocation_leaves_only_a_temp_file_that_open_removes() {
    const POINTS: &[CreationPoint] = &[
        CreationPoint::TempWrite(1),
        CreationPoint::TempWrite(2),
        CreationPoint::TempWrite(16),
        CreationPoint::TempSync,
        CreationPoint::Rename,
    ];
    for prealloc_segments in [0, 1] {
        let seen = segment_creation_crashes(
            "crash_mid_preallocation_leaves_only_a_temp_file_that_open_removes",
            prealloc_segments,
            POINTS,
            false,
        );
        assert!(
            seen.temp_file > 0,
            "no image held a temporary file: the window was not reached"
        );
    }
}

/// A crash after a new segment's rename but before the directory fsync may lose the segment
/// (a power loss keeps the rename or not: both are seen), but no acknowledged commit, because
/// no WAL was written into the segment yet; recovery creates it again. With
/// `prealloc_segments = 0` the writer creates segment 1 on demand and writes commits into it
/// right after the fsync: images taken after those commits are acknowledged must keep the
/// segment and them, which catches a creation that skips or defers the directory fsync.
#[test]
fn crash_after_a_segment_rename_before_the_directory_fsync_loses_no_acknowledged_commit() {
    for prealloc_segments in [0, 1] {
        let seen = segment_creation_crashes(
            "crash_after_a_segment_rename_before_the_directory_fsync_loses_no_acknowledged_commit",
            prealloc_segments,
            &[CreationPoint::DirSync],
            prealloc_segments == 0,
        );
        assert!(
            seen.renamed_kept > 0 && seen.renamed_lost > 0,
            "power losses before the directory fsync both kept and lost the new segment: {seen:?}"
        );
    }
}

/// Stream positions at or after `end` where a segment in `dir` of `fv` holds, 8 bytes into a
/// would-be header, a word equal to its own start: the LSN field of a record that would
/// validate there again. `Wal::open` must have destroyed every one (durably).
fn stale_headers(fv: &walnut_io::fault::FaultVfs, dir: &Path, end: u64) -> Vec<u64> {
    let mut found = Vec::new();
    for path in fv.files() {
        let segno = path
            .file_name()
            .and_then(|n| parse_segment_file_name(&n.to_string_lossy()))
            .map(|(_, s)| s);
        let Some(segno) = segno.filter(|_| path.parent() == Some(dir)) else {
            continue;
        };
        let bytes = fv.read_file(&path).unwrap();
        for (i, w) in bytes.chunks_exact(8).enumerate() {
            let pos = segno * WAL_SEGMENT_SIZE + 8 * i as u64;
            let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            if pos >= 8 && v == pos - 8 && v >= end {
                found.push(v);
            }
        }
    }
    found
}

/// Power-loss images of `fv` now hold the two records `(0, 0)` and `(0, 1)` from `start`, end
/// at `fin`, and hold no stale record after `fin`.
fn durable_and_scrubbed(fv: &walnut_io::fault::FaultVfs, dir: &Path, start: Lsn, fin: Lsn) {
    for k in 0..2 {
        let (img, _) = fv.crash_image(walnut_io::fault::CrashKind::PowerLoss, 0xD0 + k);
        let (recs, end) = read_all(Arc::new(img.clone()), dir.to_path_buf(), start);
        let tags: Vec<_> = recs.iter().map(|r| tag_of(&r.record)).collect();
        assert_eq!(
            (tags, end),
            (vec![(0, 0), (0, 1)], fin),
            "acknowledged commits"
        );
        let stale = stale_headers(&img, dir, fin.0);
        assert!(
            stale.is_empty(),
            "{} stale records survive a power loss after the scrub, the first at {}",
            stale.len(),
            Lsn(stale[0])
        );
    }
}

/// A power loss during `Wal::open`'s scrub of stale records (before any of its writes of zeros
/// or its syncs) leaves a partly zeroed tail after the end of valid WAL: the next recovery must
/// end at the same place and scrub again, and once the new run's first commit is acknowledged
/// no stale record may survive another power loss. The crashed run left 2 MiB of intact
/// records after a torn one, across the boundary into segment 1, so the scrub takes several
/// writes there. Catches a scrub that starts before the end (destroying the last good record),
/// one that stops at a zeroed stretch, one that skips later segments, and one whose zeros are
/// not synced before the first flush (segment 1 is not synced by the new run's flushes, which
/// write only segment 0).
#[test]
fn crash_during_the_scrub_of_stale_records_ends_recovery_at_the_same_place() {
    use walnut_io::fault::CrashKind;
    scrub_crashes(
        "crash_during_the_scrub_of_stale_records_ends_recovery_at_the_same_place",
        &[CrashKind::PowerLoss, CrashKind::PowerLoss],
    );
}

/// As [`crash_during_the_scrub_of_stale_records_ends_recovery_at_the_same_place`], with process
/// kills: the page cache keeps what the dead scrub wrote, unsynced. A kill between its writes
/// leaves stale records after a zeroed stretch, which the next scrub must still find (catches
/// a scrub that stops at zeros). A kill just before its fsync of segment 1 leaves that segment
/// all zeros in the page cache and stale on disk: the next open finds it clean, and unless it
/// syncs it anyway (`scrub_after_end` syncs every segment it examines), a power loss after the
/// new run's commits brings the stale records back, where a record the new run ends on would
/// validate again. This test found that window.
#[test]
fn a_power_loss_after_a_process_kill_mid_scrub_brings_no_stale_record_back() {
    use walnut_io::fault::CrashKind;
    scrub_crashes(
        "a_power_loss_after_a_process_kill_mid_scrub_brings_no_stale_record_back",
        &[CrashKind::ProcessKill],
    );
}

/// The scrub crash test: crash images of `kinds` just before each of the first three writes of
/// `Wal::open`'s scrub and before each sync, each recovered and checked.
fn scrub_crashes(test: &str, kinds: &'static [walnut_io::fault::CrashKind]) {
    use walnut_io::fault::{FaultConfig, FaultVfs};
    let seed = crash_seed(test, 0x5C2B);
    let fv = FaultVfs::new(FaultConfig::new(seed));
    let dir = PathBuf::from("/wal");
    let cfg = WalConfig {
        wal_buffers_bytes: 1 << 20,
        prealloc_segments: 1,
        ..WalConfig::new(&dir)
    };
    // The crashed run: A, B, then 2 MiB of records C from 8 KiB before the end of segment 0.
    let start = Lsn(WAL_SEGMENT_SIZE - 8192);
    let plain: Arc<dyn Vfs> = Arc::new(fv.clone());
    Wal::create(plain.clone(), &cfg).unwrap();
    let wal = Wal::open(plain.clone(), cfg.clone(), start, start).unwrap();
    let (_, a_end) = wal.insert(&mut |_| tagged_record(0, 0, false)).unwrap();
    let (b_start, _) = wal.insert(&mut |_| tagged_record(0, 1, false)).unwrap();
    for i in 0..250 {
        wal.insert(&mut |_| tagged_record(1, i, true)).unwrap();
    }
    wal.flush(wal.insert_lsn()).unwrap();
    assert!(
        wal.insert_lsn().0 > WAL_SEGMENT_SIZE + (3 << 19),
        "C crosses 1.5 MiB into segment 1"
    );
    drop(wal);
    // B is torn, C intact: recovery ends after A.
    let seg0 = dir.join(segment_file_name(1, 0));
    fv.corrupt(&seg0, b_start.0 % WAL_SEGMENT_SIZE + 20, &[0xFF; 4])
        .unwrap();
    let (recs, end) = read_all(plain, dir.clone(), start);
    assert_eq!((recs.len(), end), (1, a_end));
    assert!(
        stale_headers(&fv, &dir, a_end.0).len() >= 250,
        "C is there to scrub"
    );

    // The next run's open scrubs; crash before its first writes and before every sync.
    let check = {
        let (cfg, dir) = (cfg.clone(), dir.clone());
        move |img: &FaultVfs| {
            let v: Arc<dyn Vfs> = Arc::new(img.clone());
            let (recs, end) = read_all(v.clone(), dir.clone(), start);
            assert_eq!((recs.len(), end), (1, a_end), "recovery ends after A again");
            let wal = Wal::open(v, cfg.clone(), end, start).unwrap();
            let (_, e) = wal.insert(&mut |_| tagged_record(0, 1, false)).unwrap();
            commit(&wal, e).unwrap();
            let fin = wal.insert_lsn();
            durable_and_scrubbed(img, &dir, start, fin);
        }
    };
    let armed = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reached = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let hook: CallHook = {
        let (fv, armed, failures, reached) =
            (fv.clone(), armed.clone(), failures.clone(), reached.clone());
        let writes = AtomicU64::new(0);
        Arc::new(move |call: Call, path: &Path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let segno = name
                .as_deref()
                .and_then(parse_segment_file_name)
                .map(|(_, s)| s);
            let (true, Some(segno)) = (armed.load(Ordering::SeqCst), segno) else {
                return;
            };
            let what = match call {
                Call::Write => {
                    let n = writes.fetch_add(1, Ordering::SeqCst) + 1;
                    if n > 3 {
                        return;
                    }
                    format!("write {n} (segment {segno})")
                }
                Call::Sync => format!("sync of segment {segno}"),
                _ => return,
            };
            reached.lock().unwrap().push(what.clone());
            for (k, &kind) in kinds.iter().enumerate() {
                let image_seed = seed ^ (reached.lock().unwrap().len() as u64 * 16 + k as u64);
                let (img, _) = fv.crash_image(kind, image_seed);
                if let Some(msg) = run_check(|| check(&img)) {
                    failures.lock().unwrap().push(format!(
                        "just before {what}, {kind:?} image (image seed {image_seed}): {msg}"
                    ));
                }
            }
        })
    };
    let v = CrashPoints::over(&fv, hook);
    armed.store(true, Ordering::SeqCst);
    let wal = Wal::open(v, cfg.clone(), end, start).unwrap();
    armed.store(false, Ordering::SeqCst);
    // The run goes on: once its first commit is acknowledged, the scrub is durable.
    let (_, e) = wal.insert(&mut |_| tagged_record(0, 1, false)).unwrap();
    commit(&wal, e).unwrap();
    let fin = wal.insert_lsn();
    durable_and_scrubbed(&fv, &dir, start, fin);
    drop(wal);
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed checks:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let reached = reached.lock().unwrap();
    eprintln!("{test}: crashed just before {reached:?}");
    // The tail of segment 0 (one write), then segment 1 (at least two: C spans 1 MiB writes).
    assert!(
        reached.iter().filter(|w| w.starts_with("write")).count() == 3,
        "{reached:?}"
    );
    assert!(
        reached.iter().any(|w| w == "sync of segment 1"),
        "{reached:?}"
    );
}

/// A crash while old segments are recycled (renamed to a future segment's name) or removed,
/// before the directory fsync: a power loss keeps the old name or the new one (or the file),
/// never both; recovery from the redo point reads every commit acknowledged after it and
/// stops at its end, not in the recycled file's stale records; and the next
/// `remove_old_segments` recycles or removes what is still there. Catches a recycling that
/// copies instead of renaming, one that overwrites a segment in use, and a removal that
/// forgets an old segment a crash left behind.
#[test]
fn crash_while_recycling_or_removing_old_segments_keeps_what_redo_needs() {
    use walnut_io::fault::{CrashKind, FaultConfig, FaultVfs};
    let test = "crash_while_recycling_or_removing_old_segments_keeps_what_redo_needs";
    for recycle in [true, false] {
        let seed = crash_seed(test, 0x2EC7 ^ u64::from(recycle));
        let fv = FaultVfs::new(FaultConfig::new(seed));
        let dir = PathBuf::from("/wal");
        let cfg = WalConfig {
            wal_buffers_bytes: 1 << 20,
            prealloc_segments: 1,
            recycle,
            ..WalConfig::new(&dir)
        };
        let seg = |n: u64| dir.join(segment_file_name(1, n));
        let start = Lsn(WAL_SEGMENT_SIZE - 4096);
        let armed = Arc::new(AtomicBool::new(false));
        let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let reached = Arc::new(std::sync::Mutex::new(Vec::<Call>::new()));
        // (redo point, commits acknowledged after it), set before the hook is armed.
        let after_redo = Arc::new(std::sync::Mutex::new((Lsn::INVALID, 0u32)));
        let check = {
            let (cfg, dir, after_redo) = (cfg.clone(), dir.clone(), after_redo.clone());
            move |img: &FaultVfs| {
                let seg = |n: u64| dir.join(segment_file_name(1, n));
                let (redo, acked) = *after_redo.lock().unwrap();
                let v: Arc<dyn Vfs> = Arc::new(img.clone());
                let old = v.exists(&seg(0));
                let recycled = v.exists(&seg(3));
                assert!(!(old && recycled), "segment 0 is there under both names");
                assert!(recycle || !recycled, "removal renamed something");
                let (recs, end) = read_all(v.clone(), dir.clone(), redo);
                let tags: Vec<_> = recs.iter().map(|r| tag_of(&r.record)).collect();
                let want: Vec<_> = (0..acked).map(|i| (1, i)).collect();
                assert_eq!(tags, want, "the commits after the redo point");
                let wal = Wal::open(v.clone(), cfg.clone(), end, redo).unwrap();
                wal.remove_old_segments(redo, 0).unwrap();
                assert!(
                    !v.exists(&seg(0)),
                    "segment 0 was recycled or removed again"
                );
                let (_, e) = wal.insert(&mut |_| tagged_record(1, acked, false)).unwrap();
                commit(&wal, e).unwrap();
                let fin = wal.insert_lsn();
                drop(wal);
                let (recs, end) = read_all(v, dir.clone(), redo);
                assert_eq!((recs.len() as u32, end), (acked + 1, fin));
            }
        };
        let hook: CallHook = {
            let (fv, armed, failures, reached) =
                (fv.clone(), armed.clone(), failures.clone(), reached.clone());
            Arc::new(move |call: Call, path: &Path| {
                if !armed.load(Ordering::SeqCst)
                    || !matches!(call, Call::Rename | Call::Remove | Call::SyncDir)
                {
                    return;
                }
                reached.lock().unwrap().push(call);
                let n = reached.lock().unwrap().len() as u64;
                let kinds = [
                    CrashKind::ProcessKill,
                    CrashKind::PowerLoss,
                    CrashKind::PowerLoss,
                    CrashKind::PowerLoss,
                    CrashKind::PowerLoss,
                ];
                for (k, kind) in kinds.into_iter().enumerate() {
                    let image_seed = seed ^ (n * 16 + k as u64);
                    let (img, _) = fv.crash_image(kind, image_seed);
                    if let Some(msg) = run_check(|| check(&img)) {
                        failures.lock().unwrap().push(format!(
                            "recycle = {recycle}, just before {call:?} of {}, {kind:?} image (image seed {image_seed}): {msg}",
                            path.display()
                        ));
                    }
                }
            })
        };
        let v = CrashPoints::over(&fv, hook);
        Wal::create(v.clone(), &cfg).unwrap();
        let wal = Wal::open(v, cfg.clone(), start, start).unwrap();
        // Into segment 1 (segment 2 is preallocated after the flush that enters it), a
        // checkpoint there, and commits after its redo point.
        let mut seq = 0;
        while wal.insert_lsn().0 < WAL_SEGMENT_SIZE + 4096 {
            let (_, e) = wal.insert(&mut |_| tagged_record(0, seq, false)).unwrap();
            commit(&wal, e).unwrap();
            seq += 1;
        }
        let redo = wal.begin_checkpoint();
        for i in 0..5 {
            let (_, e) = wal.insert(&mut |_| tagged_record(1, i, false)).unwrap();
            commit(&wal, e).unwrap();
        }
        *after_redo.lock().unwrap() = (redo, 5);
        assert!(fv.exists(&seg(2)) && !fv.exists(&seg(3)));
        armed.store(true, Ordering::SeqCst);
        wal.remove_old_segments(redo, 0).unwrap();
        armed.store(false, Ordering::SeqCst);
        assert!(!fv.exists(&seg(0)));
        assert_eq!(
            fv.exists(&seg(3)),
            recycle,
            "segment 0 was recycled as segment 3"
        );
        drop(wal);
        let failures = failures.lock().unwrap();
        assert!(
            failures.is_empty(),
            "{} failed checks:\n{}",
            failures.len(),
            failures.join("\n")
        );
        let reached = reached.lock().unwrap();
        let first = if recycle { Call::Rename } else { Call::Remove };
        assert_eq!(*reached, vec![first, Call::SyncDir], "recycle = {recycle}");
    }
}

/// With `io_direct = wal`, every flush rewrites the partial last 4 KiB block from its start;
/// a power loss before that write is synced leaves the block old, new or torn at 512 bytes, and
/// the acknowledged records in it must survive every one of those. Crash images are taken just
/// before each flush's sync (or write-back), after its write, for records small enough that
/// most flushes end mid-block. Catches a rewrite whose head is not the bytes already there
/// (zeros, or a second write that lays them down again): a tear would destroy acknowledged
/// records. Recovery then reopens mid-block and goes on.
#[test]
fn power_loss_during_a_direct_rewrite_of_the_partial_block_keeps_its_records() {
    use walnut_io::fault::{CrashKind, FaultConfig, FaultVfs};
    let test = "power_loss_during_a_direct_rewrite_of_the_partial_block_keeps_its_records";
    let seed = crash_seed(test, 0xD12EC7);
    let fv = FaultVfs::new(FaultConfig::new(seed));
    let dir = PathBuf::from("/wal");
    let cfg = WalConfig {
        wal_buffers_bytes: 1 << 20,
        prealloc_segments: 1,
        direct: true,
        direct_init: true,
        ..WalConfig::new(&dir)
    };
    let armed = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let points = Arc::new(AtomicU64::new(0));
    let check = {
        let (cfg, dir) = (cfg.clone(), dir.clone());
        move |img: &FaultVfs, acked: u32| {
            let v: Arc<dyn Vfs> = Arc::new(img.clone());
            let (recs, end) = read_all(v.clone(), dir.clone(), Lsn::FIRST);
            assert!(
                recs.len() >= acked as usize,
                "{} of {acked} acknowledged",
                recs.len()
            );
            for (i, r) in recs.iter().enumerate() {
                assert_eq!(r.record, tagged_record(2, i as u32, false), "record {i}");
            }
            let wal = Wal::open(v.clone(), cfg.clone(), end, Lsn::FIRST).unwrap();
            let n = recs.len() as u32;
            let (_, e) = wal.insert(&mut |_| tagged_record(2, n, false)).unwrap();
            commit(&wal, e).unwrap();
            let fin = wal.insert_lsn();
            drop(wal);
            let (recs, end) = read_all(v, dir.clone(), Lsn::FIRST);
            assert_eq!(
                (recs.len() as u32, end),
                (n + 1, fin),
                "the run goes on mid-block"
            );
        }
    };
    let hook: CallHook = {
        let (fv, armed, acked, failures, points) = (
            fv.clone(),
            armed.clone(),
            acked.clone(),
            failures.clone(),
            points.clone(),
        );
        Arc::new(move |call: Call, path: &Path| {
            let segment = path
                .file_name()
                .is_some_and(|n| parse_segment_file_name(&n.to_string_lossy()).is_some());
            if !armed.load(Ordering::SeqCst)
                || !segment
                || !matches!(call, Call::Sync | Call::WriteBack)
            {
                return;
            }
            let n = points.fetch_add(1, Ordering::SeqCst);
            let acked = acked.load(Ordering::SeqCst);
            for k in 0..2 {
                let image_seed = seed ^ (n * 16 + k);
                let (img, _) = fv.crash_image(CrashKind::PowerLoss, image_seed);
                if let Some(msg) = run_check(|| check(&img, acked)) {
                    failures.lock().unwrap().push(format!(
                        "just before {call:?} of {}, {acked} acknowledged (image seed {image_seed}): {msg}",
                        path.display()
                    ));
                }
            }
        })
    };
    let v = CrashPoints::over(&fv, hook);
    let wal = create_open(v, &cfg);
    armed.store(true, Ordering::SeqCst);
    let mut mid_block = 0;
    for seq in 0..24u32 {
        let (_, e) = wal.insert(&mut |_| tagged_record(2, seq, false)).unwrap();
        commit(&wal, e).unwrap();
        acked.store(seq + 1, Ordering::SeqCst);
        mid_block += u32::from(wal.insert_lsn().0 & 4095 != 0);
    }
    armed.store(false, Ordering::SeqCst);
    drop(wal);
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed checks:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(mid_block >= 20, "most flushes end mid-block ({mid_block})");
    assert!(
        points.load(Ordering::SeqCst) >= 24,
        "a crash point per flush"
    );
}
