//! Flushing and group commit: nothing acknowledged before it is durable, commits grouped under
//! a slow sync (fixed `commit_delay` and adaptive), the WAL writer.

use super::*;

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
fn wal_writer_flushes_in_background_and_shutdown_flushes() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    wal.start_wal_writer(2);
    let (_, end) = wal.insert(&mut |_| tagged_record(0, 0, false)).unwrap();
    wait_flushed(&wal, end, "the WAL writer never flushed");
    let (_, end) = wal.insert(&mut |_| tagged_record(0, 1, false)).unwrap();
    wal.shutdown();
    assert!(wal.flush_lsn() >= end);
    let (recs, _) = read_all(vfs(), cfg.dir.clone(), Lsn::FIRST);
    assert_eq!(recs.len(), 2);
}

/// Waits (60 s at most, a hang guard, not a timing assertion) for `flush_lsn` to pass `end`.
fn wait_flushed(wal: &Wal, end: Lsn, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while wal.flush_lsn() < end {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `wal_writer_flush_after`: with the writer's round an hour long, only an asynchronous
/// commit's wakeup can make it flush, and the one that leaves the threshold unflushed does.
#[test]
fn an_async_commit_past_wal_writer_flush_after_wakes_the_wal_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    use walnut_common::guc::{Registry, Settings, Source};
    let mut s = Settings::defaults(std::sync::Arc::new(Registry::new(&[crate::GUCS])));
    s.set("wal_writer_flush_after", "64kB", Source::Default)
        .unwrap();
    wal.apply_settings(&s);
    wal.start_wal_writer(3_600_000);
    let start = wal.flush_lsn();
    let (_, small) = wal.insert(&mut |_| tagged_record(0, 0, false)).unwrap();
    assert!(small.0 - start.0 < 64 << 10);
    wal.async_commit(small);
    let mut end = small;
    while end.0 - start.0 < 64 << 10 {
        end = wal.insert(&mut |_| tagged_record(0, 1, true)).unwrap().1;
    }
    wal.async_commit(end);
    wait_flushed(&wal, end, "the WAL writer was not woken");
    wal.shutdown();
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
