use super::*;

fn create() -> OpenMode {
    OpenMode {
        create: true,
        ..Default::default()
    }
}

fn setup(seed: u64) -> (FaultVfs, Arc<dyn FileIo>) {
    let v = FaultVfs::new(FaultConfig::new(seed));
    v.create_dir_all(Path::new("/d")).unwrap();
    let f = v.open(Path::new("/d/f"), create()).unwrap();
    v.sync_dir(Path::new("/d")).unwrap();
    v.sync_dir(Path::new("/")).unwrap();
    (v, f)
}

fn content(v: &FaultVfs) -> Vec<u8> {
    v.read_file(Path::new("/d/f")).unwrap_or_default()
}

#[test]
fn synced_writes_survive_power_loss_and_unsynced_may_not() {
    let (v, f) = setup(1);
    f.write_at(&[1u8; 4096], 0).unwrap();
    f.sync_data().unwrap();
    f.write_at(&[2u8; 8192], 4096).unwrap();
    let mut saw_missing = false;
    let mut saw_torn = false;
    let mut saw_whole = false;
    for seed in 0..200 {
        let (img, _) = v.crash_image(CrashKind::PowerLoss, seed);
        let c = content(&img);
        assert_eq!(
            &c[..4096],
            &[1u8; 4096][..],
            "synced data survives (seed {seed})"
        );
        let tail = &c[4096.min(c.len())..];
        let twos = tail.iter().filter(|&&b| b == 2).count();
        match twos {
            0 => saw_missing = true,
            8192 => saw_whole = true,
            _ => saw_torn = true,
        }
    }
    assert!(saw_missing && saw_torn && saw_whole);
    // A process kill keeps everything written, but not durably: a power loss after it can
    // still drop the unsynced part.
    let (img, _) = v.crash_image(CrashKind::ProcessKill, 7);
    assert_eq!(content(&img).len(), 4096 + 8192);
    let lost = (0..100).any(|s| content(&img.crash_image(CrashKind::PowerLoss, s).0).len() == 4096);
    assert!(lost);
}

#[test]
fn images_are_replayable_from_their_seed() {
    let (v, f) = setup(2);
    for i in 0..20u8 {
        f.write_at(&[i; 1000], u64::from(i) * 700).unwrap();
    }
    let a = content(&v.crash_image(CrashKind::PowerLoss, 42).0);
    let b = content(&v.crash_image(CrashKind::PowerLoss, 42).0);
    assert_eq!(a, b);
}

#[test]
fn unsynced_writes_are_reordered() {
    // Two overlapping unsynced writes: a power loss may keep the older one on top.
    let (v, f) = setup(3);
    f.write_at(&[1u8; 512], 0).unwrap();
    f.write_at(&[2u8; 512], 0).unwrap();
    let mut seen = HashSet::new();
    for seed in 0..100 {
        let c = content(&v.crash_image(CrashKind::PowerLoss, seed).0);
        seen.insert(c.first().copied());
    }
    assert!(
        seen.contains(&Some(1)) && seen.contains(&Some(2)),
        "{seen:?}"
    );
}

#[test]
fn namespace_changes_need_sync_dir() {
    let (v, _f) = setup(4);
    let g = v.open(Path::new("/d/g"), create()).unwrap();
    g.write_at(b"x", 0).unwrap();
    g.sync_all().unwrap();
    v.rename(Path::new("/d/g"), Path::new("/d/h")).unwrap();
    let mut names = HashSet::new();
    for seed in 0..50 {
        let (img, _) = v.crash_image(CrashKind::PowerLoss, seed);
        let mut l = img.list_dir(Path::new("/d")).unwrap();
        l.sort();
        names.insert(l);
    }
    // Not created, created, or created and renamed: a prefix of the changes.
    assert!(names.len() >= 2, "{names:?}");
    assert!(names.iter().all(|l| l.len() <= 2));
    v.sync_dir(Path::new("/d")).unwrap();
    for seed in 0..20 {
        let (img, _) = v.crash_image(CrashKind::PowerLoss, seed);
        assert!(img.exists(Path::new("/d/h")) && !img.exists(Path::new("/d/g")));
    }
}

#[test]
fn write_back_is_durable_only_after_a_cache_flush() {
    let (v, f) = setup(5);
    f.write_at(&[9u8; 4096], 0).unwrap();
    f.write_back(0, 4096).unwrap();
    let lost = (0..100).any(|s| content(&v.crash_image(CrashKind::PowerLoss, s).0).is_empty());
    assert!(lost, "written back but not flushed: may be lost");
    v.cache_flusher(Path::new("/d"))
        .unwrap()
        .unwrap()
        .flush()
        .unwrap();
    for s in 0..50 {
        assert_eq!(
            content(&v.crash_image(CrashKind::PowerLoss, s).0),
            vec![9u8; 4096]
        );
    }
}

#[test]
fn a_write_back_supersedes_the_part_of_an_older_write_inside_its_range() {
    let (v, f) = setup(6);
    // An older write over three blocks (an extension's zeros), a newer one of the middle
    // block, written back and made durable by a cache flush.
    f.write_at(&[0u8; 3 * 4096], 0).unwrap();
    f.write_at(&[7u8; 4096], 4096).unwrap();
    f.write_back(4096, 4096).unwrap();
    v.cache_flusher(Path::new("/d"))
        .unwrap()
        .unwrap()
        .flush()
        .unwrap();
    // The older write's middle no longer exists anywhere: no crash and no later sync can put
    // it over the newer bytes; its outer blocks are still pending.
    for s in 0..50 {
        let c = content(&v.crash_image(CrashKind::PowerLoss, s).0);
        assert_eq!(&c[4096..8192], &[7u8; 4096][..], "seed {s}");
    }
    assert_eq!(v.pending_ops(Path::new("/d/f")), 2, "the two outer parts");
    f.sync_data().unwrap();
    let (img, _) = v.crash_image(CrashKind::PowerLoss, 1);
    let c = content(&img);
    assert_eq!(c.len(), 3 * 4096);
    assert_eq!(
        &c[4096..8192],
        &[7u8; 4096][..],
        "the sync keeps the newer bytes"
    );
    assert!(c[..4096].iter().chain(&c[8192..]).all(|&b| b == 0));
}

#[test]
fn failed_fsync_forgets_the_pending_writes() {
    let (v, f) = setup(6);
    f.write_at(&[7u8; 4096], 0).unwrap();
    v.set_plan(FaultPlan {
        sync_eio_at: Some(1),
        ..Default::default()
    });
    assert!(f.sync_data().is_err());
    // A retry "succeeds", but the data never became durable: why callers PANIC.
    f.sync_data().unwrap();
    let mut buf = [0u8; 1];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf[0], 7, "still readable from the cache");
    for s in 0..20 {
        assert!(content(&v.crash_image(CrashKind::PowerLoss, s).0).is_empty());
    }
    assert_eq!(v.stats().injected_eio, 1);
}

#[test]
fn fsync_enospc_fails_like_eio_and_forgets_the_pending_writes() {
    let (v, f) = setup(8);
    f.write_at(&[7u8; 4096], 0).unwrap();
    v.set_plan(FaultPlan {
        sync_enospc_at: Some(2),
        ..Default::default()
    });
    v.sync_dir(Path::new("/d")).unwrap(); // the first sync-like call passes
    let e = f.sync_all().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(28), "ENOSPC, not EIO: {e}");
    f.sync_all().unwrap();
    for s in 0..20 {
        assert!(content(&v.crash_image(CrashKind::PowerLoss, s).0).is_empty());
    }
    assert_eq!((v.stats().injected_enospc, v.stats().injected_eio), (1, 0));
    // A directory's sync can fail too.
    v.set_plan(FaultPlan {
        sync_enospc: 1.0,
        ..Default::default()
    });
    assert_eq!(
        v.sync_dir(Path::new("/d")).unwrap_err().raw_os_error(),
        Some(28)
    );
}

#[test]
fn enospc_leaves_a_short_write() {
    let (v, f) = setup(7);
    v.set_plan(FaultPlan {
        write_enospc_at: Some(1),
        ..Default::default()
    });
    let e = f.write_at(&[3u8; 8192], 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(28));
    assert!(f.len().unwrap() < 8192 && f.len().unwrap() % 512 == 0);
    f.write_at(&[3u8; 8192], 0).unwrap();
    assert_eq!(v.stats().injected_enospc, 1);
}

#[test]
fn inject_fails_exactly_the_nth_matching_sync() {
    let inner: Arc<dyn Vfs> = Arc::new(FaultVfs::new(FaultConfig::new(9)));
    inner.create_dir_all(Path::new("/x/wal")).unwrap();
    let v = Inject::none().with_sync_eio("wal", 3).over(inner);
    let w = v.open(Path::new("/x/wal/seg"), create()).unwrap();
    let d = v.open(Path::new("/x/data"), create()).unwrap();
    d.sync_data().unwrap(); // does not match the filter
    w.sync_data().unwrap();
    w.sync_all().unwrap();
    assert!(w.sync_data().is_err(), "the third matching sync fails");
    w.sync_data().unwrap();
    // Directories count with files, and ENOSPC can replace EIO.
    let v = Inject::none()
        .with_sync_enospc("/x/wal", 2)
        .over(v.inner().clone());
    let w = v.open(Path::new("/x/wal/seg"), create()).unwrap();
    v.sync_dir(Path::new("/x")).unwrap(); // does not match
    w.sync_data().unwrap();
    let e = v.sync_dir(Path::new("/x/wal")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(28), "{e}");
    v.sync_dir(Path::new("/x/wal")).unwrap();
    assert_eq!(parse_sync_eio_spec("wal:100"), Ok(("wal".into(), 100)));
    assert!(parse_sync_eio_spec("wal").is_err() && parse_sync_eio_spec("wal:0").is_err());
}

#[test]
fn inject_refuses_growth_while_the_trigger_exists() {
    let trigger = std::env::temp_dir().join(format!("walnut-full-{}", std::process::id()));
    let _ = std::fs::remove_file(&trigger);
    let inner: Arc<dyn Vfs> = Arc::new(FaultVfs::new(FaultConfig::new(10)));
    inner.create_dir_all(Path::new("/x")).unwrap();
    let v = Inject::none().with_disk_full_while(&trigger).over(inner);
    let f = v.open(Path::new("/x/f"), create()).unwrap();
    f.write_at(&[1u8; 8192], 0).unwrap();
    std::fs::write(&trigger, b"").unwrap();
    f.write_at(&[2u8; 4096], 4096).unwrap(); // within the file: allowed
    let full = |r: io::Result<()>| r.unwrap_err().raw_os_error() == Some(28);
    assert!(full(f.write_at(&[3u8; 4096], 6144)), "a write past the end");
    assert!(full(f.set_len(16384)), "a longer length");
    assert!(full(f.allocate(8192, 8192)), "an allocation past the end");
    f.allocate(0, 4096).unwrap(); // within the file: allowed
    f.set_len(4096).unwrap(); // shorter: allowed
    assert_eq!(f.len().unwrap(), 4096);
    std::fs::write(&trigger, b"/y/").unwrap(); // another volume is full
    f.write_at(&[4u8; 8192], 4096).unwrap();
    assert_eq!(f.len().unwrap(), 12288);
    std::fs::write(&trigger, b"/x/").unwrap();
    assert!(full(f.write_at(&[5u8; 1], 12288)), "this volume is full");
    std::fs::remove_file(&trigger).unwrap();
    f.write_at(&[5u8; 1], 12288).unwrap();
}

#[test]
fn direct_io_needs_alignment() {
    let v = FaultVfs::new(FaultConfig::new(8));
    let f = v
        .open(
            Path::new("/f"),
            OpenMode {
                create: true,
                direct: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        f.write_at(&[0u8; 100], 0).unwrap_err().raw_os_error(),
        Some(22)
    );
    let mut buf = crate::AlignedBuf::zeroed(8192);
    buf.as_mut_slice()[4096] = 9;
    f.write_at(&buf.as_slice()[..4096], 4096).unwrap();
    f.write_at(buf.as_slice(), 8192).unwrap();
    // The buffer's address must be aligned too (the offset and length are).
    let unaligned = &buf.as_slice()[512..512 + 4096];
    assert_eq!(
        f.write_at(unaligned, 0).unwrap_err().raw_os_error(),
        Some(22)
    );
    let mut into = crate::AlignedBuf::zeroed(8192);
    assert_eq!(
        f.read_at(&mut into.as_mut_slice()[512..512 + 4096], 0)
            .unwrap_err()
            .raw_os_error(),
        Some(22)
    );
    assert_eq!(f.read_at(into.as_mut_slice(), 8192).unwrap(), 8192);
    assert_eq!(into.as_slice()[4096], 9);
}

#[test]
fn faults_are_armed_from_the_environment() {
    use std::collections::HashMap;
    use std::ffi::OsString;
    let from = |vars: &[(&str, &str)]| {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        let inner: Arc<dyn Vfs> = Arc::new(FaultVfs::new(FaultConfig::new(11)));
        inner.create_dir_all(Path::new("/x/wal")).unwrap();
        inject::vfs_from_vars(inner, |name| vars.get(name).cloned())
    };
    // Nothing set: the inner file system itself, nothing armed.
    let (v, armed) = from(&[]).unwrap();
    assert!(armed.is_empty());
    let f = v.open(Path::new("/x/wal/seg"), create()).unwrap();
    for _ in 0..5 {
        f.sync_data().unwrap();
    }
    // ENOSPC wins over EIO; both are reported.
    let (v, armed) = from(&[
        ("WALNUT_FAULT_SYNC_EIO", "/wal/:2"),
        ("WALNUT_FAULT_SYNC_ENOSPC", "/wal/:2"),
    ])
    .unwrap();
    assert_eq!(armed.len(), 2, "{armed:?}");
    let f = v.open(Path::new("/x/wal/seg"), create()).unwrap();
    f.sync_data().unwrap();
    assert_eq!(f.sync_all().unwrap_err().raw_os_error(), Some(28));
    let (v, _) = from(&[("WALNUT_FAULT_SYNC_EIO", "/x/wal:1")]).unwrap();
    let e = v.sync_dir(Path::new("/x/wal")).unwrap_err();
    assert!(e.to_string().contains("injected EIO"), "{e}");
    let trigger = std::env::temp_dir().join(format!("walnut-env-full-{}", std::process::id()));
    std::fs::write(&trigger, b"").unwrap();
    let (v, armed) = from(&[("WALNUT_FAULT_DISK_FULL_WHILE", trigger.to_str().unwrap())]).unwrap();
    assert!(armed[0].contains("cannot grow"), "{armed:?}");
    let f = v.open(Path::new("/x/f"), create()).unwrap();
    assert_eq!(f.write_at(b"x", 0).unwrap_err().raw_os_error(), Some(28));
    std::fs::remove_file(&trigger).unwrap();
    f.write_at(b"x", 0).unwrap();
    // A malformed value is an error that names its variable.
    let e = from(&[("WALNUT_FAULT_SYNC_ENOSPC", "wal")]).err().unwrap();
    assert!(e.starts_with("WALNUT_FAULT_SYNC_ENOSPC: "), "{e}");
}

#[test]
fn allocated_space_reads_as_zeros_and_is_lost_like_an_unsynced_zero_write() {
    let (v, f) = setup(11);
    f.write_at(&[1u8; 8192], 0).unwrap();
    f.sync_data().unwrap();
    // Within the file: nothing changes; past it: the file grows, reading as zeros.
    f.allocate(0, 8192).unwrap();
    assert_eq!(content(&v), vec![1u8; 8192]);
    f.allocate(8192, 3 * 8192).unwrap();
    assert_eq!(f.len().unwrap(), 4 * 8192);
    assert!(content(&v)[8192..].iter().all(|&b| b == 0));
    assert!(f.allocated_bytes().unwrap() >= 4 * 8192);
    f.write_at(&[2u8; 8192], 8192).unwrap();
    let (mut shorter, mut whole) = (false, false);
    for seed in 0..200 {
        let (img, _) = v.crash_image(CrashKind::PowerLoss, seed);
        let c = content(&img);
        assert_eq!(&c[..8192], &[1u8; 8192][..], "synced data (seed {seed})");
        assert!(c.len() <= 4 * 8192);
        assert!(
            c[8192..].iter().all(|&b| b == 0 || b == 2),
            "only zeros or the write (seed {seed})"
        );
        shorter |= c.len() < 4 * 8192;
        whole |= c.len() == 4 * 8192;
    }
    assert!(shorter && whole, "the allocation is pending: kept or lost");
    f.sync_data().unwrap();
    let (img, _) = v.crash_image(CrashKind::PowerLoss, 1);
    assert_eq!(content(&img).len(), 4 * 8192, "durable after the sync");
    // Injected ENOSPC fails it whole.
    v.set_plan(FaultPlan {
        write_enospc_at: Some(1),
        ..FaultPlan::default()
    });
    assert_eq!(
        f.allocate(4 * 8192, 8192).unwrap_err().raw_os_error(),
        Some(28)
    );
    assert_eq!(f.len().unwrap(), 4 * 8192);
}
