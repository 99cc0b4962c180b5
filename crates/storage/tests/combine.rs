//! Combined reads and writes of adjacent blocks (`Smgr::read_blocks`, `Smgr::write_blocks`,
//! PostgreSQL 17's `smgrreadv`/`smgrwritev`) and the buffer pool's combined read for
//! read-ahead (`BufferPool::prefetch_run`): one system call per run, buffered and O_DIRECT
//! (the fault-injecting file system checks the alignment), and a prefetch never overwrites a
//! frame that is cached or dirty and never installs a page that fails its check.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use walnut_common::{BlockNumber, RelFileId, BLCKSZ};
use walnut_io::fault::{FaultConfig, FaultVfs};
use walnut_io::hook::{FileRef, HookVfs, Hooks};
use walnut_io::Vfs;
use walnut_storage::bufpool::{BufferPool, ReadMode};
use walnut_storage::page::{self, PageBuf, PageKind};
use walnut_storage::smgr::{Relation, Smgr};

/// Logs each data-file call: ("read"|"write"|"writev", offset, bytes).
#[derive(Default)]
struct Log {
    calls: Mutex<Vec<(&'static str, u64, usize)>>,
    reads: AtomicU64,
}

impl Log {
    fn take(&self) -> Vec<(&'static str, u64, usize)> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl Hooks for Log {
    fn read_at(&self, file: FileRef<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.calls.lock().unwrap().push(("read", offset, buf.len()));
        file.io.read_at(buf, offset)
    }
    fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push(("write", offset, buf.len()));
        file.io.write_at(buf, offset)
    }
    fn write_vectored_at(&self, file: FileRef<'_>, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.calls.lock().unwrap().push(("writev", offset, len));
        file.io.write_vectored_at(bufs, offset)
    }
}

fn setup(direct: bool) -> (Arc<Smgr>, Arc<Relation>, Arc<Log>) {
    let fault = FaultVfs::new(FaultConfig::new(5));
    let log = Arc::new(Log::default());
    let vfs: Arc<dyn Vfs> = Arc::new(HookVfs::new(Arc::new(fault), log.clone()));
    vfs.create_dir_all(Path::new("/base")).unwrap();
    let smgr = Arc::new(Smgr::new(vfs, PathBuf::from("/base")).with_direct_io(direct));
    let rel = smgr.create(RelFileId(16384)).unwrap();
    log.take();
    (smgr, rel, log)
}

/// A valid heap page whose first item holds `tag`.
fn page_with(tag: u8) -> Box<PageBuf> {
    let mut p: Box<PageBuf> = vec![0u8; BLCKSZ].into_boxed_slice().try_into().unwrap();
    page::init(&mut p, PageKind::Heap, 0);
    page::append_item(&mut p, &[tag; 40]);
    page::set_checksum(&mut p);
    p
}

/// Buffers of `n` blocks, each filled with its block's number + 1, starting one byte into a
/// vector so that none is aligned (O_DIRECT must go through the bounce buffer).
fn unaligned_blocks(first: u32, n: u32) -> Vec<u8> {
    let mut v = vec![0u8; 1 + n as usize * BLCKSZ];
    for i in 0..n as usize {
        v[1 + i * BLCKSZ..1 + (i + 1) * BLCKSZ].fill((first as usize + i + 1) as u8);
    }
    v
}

#[test]
fn write_blocks_is_one_call_and_read_blocks_reads_them_back() {
    for direct in [false, true] {
        let (smgr, rel, log) = setup(direct);
        let v = unaligned_blocks(2, 5);
        let bufs: Vec<&[u8]> = (0..5).map(|i| &v[1 + i * BLCKSZ..]).collect();
        smgr.write_blocks(&rel, BlockNumber(2), &bufs).unwrap();
        let kind = if direct { "write" } else { "writev" };
        assert_eq!(log.take(), vec![(kind, 2 * BLCKSZ as u64, 5 * BLCKSZ)]);
        assert_eq!(
            smgr.dirty_files().len(),
            1,
            "registered for the checkpoint's sync"
        );
        // Blocks 0..7: two holes before, the five written.
        let mut out = vec![vec![0xEEu8; BLCKSZ]; 7];
        let mut refs: Vec<&mut [u8]> = out.iter_mut().map(|b| &mut b[..]).collect();
        smgr.read_blocks(&rel, BlockNumber(0), &mut refs).unwrap();
        assert_eq!(
            log.take(),
            vec![("read", 0, 7 * BLCKSZ)],
            "one read for the run"
        );
        for (b, buf) in out.iter().enumerate() {
            let want = if (2..7).contains(&b) { b as u8 + 1 } else { 0 };
            assert!(
                buf.iter().all(|&x| x == want),
                "block {b} (direct {direct})"
            );
        }
        // Blocks 5..9: two in the file, two past its end (all zeros; the end of the file
        // takes a second read to see).
        let mut out = vec![vec![0xEEu8; BLCKSZ]; 4];
        let mut refs: Vec<&mut [u8]> = out.iter_mut().map(|b| &mut b[..]).collect();
        smgr.read_blocks(&rel, BlockNumber(5), &mut refs).unwrap();
        assert_eq!(log.take()[0], ("read", 5 * BLCKSZ as u64, 4 * BLCKSZ));
        for (i, buf) in out.iter().enumerate() {
            let want = if i < 2 { i as u8 + 6 } else { 0 };
            assert!(
                buf.iter().all(|&x| x == want),
                "block {} (direct {direct})",
                i + 5
            );
        }
        // The single-block path agrees.
        let mut one = vec![0u8; BLCKSZ];
        smgr.read(&rel, BlockNumber(4), &mut one).unwrap();
        assert!(one.iter().all(|&x| x == 5));
    }
}

#[test]
fn write_blocks_beyond_the_bounce_chunk_is_split_only_with_direct_io() {
    let (smgr, rel, log) = setup(true);
    let n = walnut_storage::smgr::MAX_IO_COMBINE_BLOCKS as u32 + 3;
    let v = unaligned_blocks(0, n);
    let bufs: Vec<&[u8]> = (0..n as usize).map(|i| &v[1 + i * BLCKSZ..]).collect();
    smgr.write_blocks(&rel, BlockNumber(0), &bufs).unwrap();
    let calls = log.take();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[1],
        ("write", (n as u64 - 3) * BLCKSZ as u64, 3 * BLCKSZ)
    );
    let mut one = vec![0u8; BLCKSZ];
    smgr.read(&rel, BlockNumber(n - 1), &mut one).unwrap();
    assert!(one.iter().all(|&x| x == n as u8));
}

#[test]
fn prefetch_run_reads_only_uncached_blocks_and_keeps_dirty_frames() {
    for direct in [false, true] {
        let (smgr, rel, log) = setup(direct);
        let pages: Vec<Box<PageBuf>> = (0..10).map(|b| page_with(b as u8 + 1)).collect();
        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
        smgr.write_blocks(&rel, BlockNumber(0), &refs).unwrap();
        // Block 9 is damaged on disk.
        let mut bad = pages[9].clone();
        bad[100] ^= 0xFF;
        smgr.write(&rel, BlockNumber(9), &bad[..]).unwrap();
        let pool = BufferPool::new(32, smgr.clone());
        // Block 3 is in the pool and changed there, not yet written.
        {
            let p = pool.pin(&rel, BlockNumber(3), ReadMode::Normal).unwrap();
            let mut w = p.write();
            w[200] = 0x5A;
            p.mark_dirty();
        }
        log.take();
        // 0..8: reads 0..3, stops before the cached block 3.
        assert_eq!(pool.prefetch_run(&rel, BlockNumber(0), 8).unwrap(), 3);
        assert_eq!(log.take(), vec![("read", 0, 3 * BLCKSZ)]);
        // 3..8: skips the cached 3, reads 4..8 in one call.
        assert_eq!(pool.prefetch_run(&rel, BlockNumber(3), 5).unwrap(), 4);
        assert_eq!(log.take(), vec![("read", 4 * BLCKSZ as u64, 4 * BLCKSZ)]);
        // 8..10: 8 installed, 9 fails its checksum and is left out.
        assert_eq!(pool.prefetch_run(&rel, BlockNumber(8), 2).unwrap(), 1);
        assert_eq!(log.take().len(), 1);
        // Every prefetched block is a hit with the page from disk; 3 kept its change.
        for b in 0..9u32 {
            let p = pool.pin(&rel, BlockNumber(b), ReadMode::Normal).unwrap();
            let r = p.read();
            assert_eq!(page::item(&r, 0), Some(&[b as u8 + 1; 40][..]), "block {b}");
            assert_eq!(r[200] == 0x5A, b == 3, "block {b}");
        }
        assert_eq!(log.take(), vec![], "all hits (direct {direct})");
        assert_eq!(pool.dirty_count(), 1);
        // Block 9's pin reads it again and reports the damage.
        let e = pool
            .pin(&rel, BlockNumber(9), ReadMode::Normal)
            .err()
            .unwrap();
        assert!(
            e.message.contains("invalid page in block 9"),
            "{}",
            e.message
        );
        // Pin of 3, three prefetches, pin of 9: one read each.
        assert_eq!(log.reads.load(Ordering::Relaxed), 5);
    }
}

#[test]
fn read_ahead_claims_at_most_a_quarter_of_the_pool() {
    let (smgr, rel, _log) = setup(true);
    let pages: Vec<Box<PageBuf>> = (0..40).map(|b| page_with(b as u8 + 1)).collect();
    let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
    smgr.write_blocks(&rel, BlockNumber(0), &refs).unwrap();
    let pool = BufferPool::new(32, smgr.clone());
    // 32 frames: runs in flight may hold 8 of them.
    let a = pool.claim_run(&rel, BlockNumber(0), 16).unwrap();
    assert_eq!(a.len(), 8, "cut at a quarter of the pool");
    assert!(
        pool.claim_run(&rel, BlockNumber(20), 4).is_none(),
        "no frame left to claim"
    );
    // The session's own pins still find frames.
    for b in 30..40 {
        drop(pool.pin(&rel, BlockNumber(b), ReadMode::Normal).unwrap());
    }
    let start = a.first();
    assert_eq!(
        a.finish(|bufs| smgr.read_blocks(&rel, start, bufs))
            .unwrap(),
        8
    );
    let b = pool.claim_run(&rel, BlockNumber(20), 4).unwrap();
    assert_eq!(
        (b.first(), b.len()),
        (BlockNumber(20), 4),
        "finished runs give theirs back"
    );
    let start = b.first();
    assert_eq!(
        b.finish(|bufs| smgr.read_blocks(&rel, start, bufs))
            .unwrap(),
        4
    );
}

/// A checkpoint's run of dirty adjacent blocks (`BufferPool::write_run_if_dirty`): the pages
/// still dirty go out one write per stretch of adjacent blocks, a clean page splits the run,
/// a page changed meanwhile is left to a later write, and what is read back is what was
/// written, buffered and O_DIRECT.
#[test]
fn a_checkpoint_run_writes_each_stretch_of_dirty_adjacent_blocks_in_one_call() {
    for direct in [false, true] {
        let (smgr, rel, log) = setup(direct);
        let pages: Vec<Box<PageBuf>> = (0..8).map(|b| page_with(b as u8 + 1)).collect();
        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
        smgr.write_blocks(&rel, BlockNumber(0), &refs).unwrap();
        let pool = BufferPool::new(32, smgr.clone());
        // Blocks 0..8 in the pool; all but 5 changed (200th byte) and dirty.
        for b in 0..8u32 {
            let p = pool.pin(&rel, BlockNumber(b), ReadMode::Normal).unwrap();
            if b != 5 {
                let mut w = p.write();
                w[200] = 0x40 + b as u8;
                p.mark_dirty();
            }
        }
        let run: Vec<_> = pool
            .checkpoint_snapshot()
            .into_iter()
            .filter(|&(_, t)| t.block.0 <= 4)
            .collect();
        assert_eq!(run.len(), 5, "dirty 0..=4 (direct {direct})");
        // Block 2 is written meanwhile by someone else: the run skips it.
        assert!(pool.write_if_dirty(run[2].0, run[2].1).unwrap());
        log.take();
        let written = pool.write_run_if_dirty(&run).unwrap();
        assert_eq!(
            written.iter().map(|t| t.block.0).collect::<Vec<_>>(),
            vec![0, 1, 3, 4]
        );
        let calls = log.take();
        let kinds: Vec<_> = calls.iter().map(|&(k, off, len)| (off, len, k)).collect();
        let expect_kind = if direct { "write" } else { "writev" };
        assert_eq!(
            kinds,
            vec![
                (0, 2 * BLCKSZ, expect_kind),
                (3 * BLCKSZ as u64, 2 * BLCKSZ, expect_kind)
            ],
            "one write per stretch (direct {direct})"
        );
        // 6 and 7 still dirty; nothing written twice.
        assert_eq!(pool.dirty_count(), 2);
        assert!(pool.write_run_if_dirty(&run).unwrap().is_empty());
        assert_eq!(log.take(), vec![]);
        // The file holds the changed pages, with valid checksums.
        let mut buf = vec![0u8; BLCKSZ];
        for b in 0..5u32 {
            smgr.read(&rel, BlockNumber(b), &mut buf).unwrap();
            assert_eq!(buf[200], 0x40 + b as u8, "block {b}");
            let page: &PageBuf = buf[..].try_into().unwrap();
            page::check(page).unwrap();
        }
    }
}

/// Resident memory of this process, bytes (`/proc/self/statm`'s second field, in pages).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A pool takes page memory as its frames fill, not up front: one of 4 GiB of frames adds far
/// less than that to the process's resident memory (walnut allocated every frame's page at
/// start-up, 2.1 s at `shared_buffers = 3GB`), and a page read into it is the page on disk.
#[test]
fn a_large_pool_allocates_page_memory_as_frames_fill() {
    let (smgr, rel, _log) = setup(false);
    smgr.write(&rel, BlockNumber(0), &page_with(7)[..]).unwrap();
    let before = resident_bytes();
    let pool = BufferPool::new(512 * 1024, smgr.clone());
    let grew = resident_bytes().saturating_sub(before);
    assert!(
        grew < 1 << 30,
        "a 4 GiB pool made the process {grew} bytes larger"
    );
    let p = pool.pin(&rel, BlockNumber(0), ReadMode::Normal).unwrap();
    assert_eq!(p.read()[..], page_with(7)[..]);
}
