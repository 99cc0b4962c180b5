//! Rings for bulk operations (`BufferPool::use_ring`, PostgreSQL's buffer access strategy in
//! `freelist.c`): a pass over a relation larger than the pool, through a ring, leaves the
//! pool's other pages where they were, where the same pass without one pushes them out (even
//! when it meets each page twice, which must not make the page hot); a page the pass dirtied is written before its frame is reused and reads back as changed; a ring
//! frame someone else pinned meanwhile is left to them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use walnut_common::{BlockNumber, RelFileId, BLCKSZ};
use walnut_io::fault::{FaultConfig, FaultVfs};
use walnut_io::Vfs;
use walnut_storage::bufpool::{BufferPool, ReadMode};
use walnut_storage::page::{self, PageBuf, PageKind};
use walnut_storage::smgr::{Relation, Smgr};

/// A valid heap page whose first item holds `tag`.
fn page_with(tag: u8) -> Box<PageBuf> {
    let mut p: Box<PageBuf> = vec![0u8; BLCKSZ].into_boxed_slice().try_into().unwrap();
    page::init(&mut p, PageKind::Heap, 0);
    page::append_item(&mut p, &[tag; 40]);
    page::set_checksum(&mut p);
    p
}

/// A relation of `n` valid pages, block b's item holding b (mod 256).
fn relation(smgr: &Smgr, id: u32, n: u32) -> Arc<Relation> {
    let rel = smgr.create(RelFileId(id)).unwrap();
    let pages: Vec<Box<PageBuf>> = (0..n).map(|b| page_with(b as u8)).collect();
    let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
    smgr.write_blocks(&rel, BlockNumber(0), &refs).unwrap();
    rel
}

fn setup() -> Arc<Smgr> {
    let vfs: Arc<dyn Vfs> = Arc::new(FaultVfs::new(FaultConfig::new(7)));
    vfs.create_dir_all(Path::new("/base")).unwrap();
    Arc::new(Smgr::new(vfs, PathBuf::from("/base")))
}

#[test]
fn a_pass_through_a_ring_leaves_the_rest_of_the_pool_in_place() {
    let smgr = setup();
    let hot = relation(&smgr, 16384, 8);
    let big = relation(&smgr, 16385, 1000);
    for ring in [false, true] {
        // 128 frames: a ring gets at most 16 of them.
        let pool = BufferPool::new(128, smgr.clone());
        // Eight hot pages, each used three times.
        for _ in 0..3 {
            for b in 0..8 {
                drop(pool.pin(&hot, BlockNumber(b), ReadMode::Normal).unwrap());
            }
        }
        let guard = ring.then(|| pool.use_ring(256));
        for b in 0..1000 {
            for _ in 0..2 {
                let p = pool.pin(&big, BlockNumber(b), ReadMode::Normal).unwrap();
                assert_eq!(page::item(&p.read(), 0), Some(&[b as u8; 40][..]));
            }
        }
        drop(guard);
        let cached = (0..8)
            .filter(|&b| pool.contains(hot.id, BlockNumber(b)))
            .count();
        let big_cached = (0..1000)
            .filter(|&b| pool.contains(big.id, BlockNumber(b)))
            .count();
        if ring {
            assert_eq!(cached, 8, "the hot pages stay");
            assert!(big_cached <= 16, "{big_cached} frames: the ring's at most");
        } else {
            assert!(cached < 8, "without a ring the pass pushes hot pages out");
            assert!(big_cached > 100, "{big_cached}");
        }
    }
}

#[test]
fn a_ring_writes_the_pages_it_dirtied_and_leaves_a_frame_pinned_elsewhere() {
    let smgr = setup();
    let big = relation(&smgr, 16386, 100);
    let pool = BufferPool::new(256, smgr.clone());
    let guard = pool.use_ring(16);
    // Block 0 stays pinned by "another session" while the ring comes round again.
    let held = pool.pin(&big, BlockNumber(0), ReadMode::Normal).unwrap();
    for b in 1..100 {
        let p = pool.pin(&big, BlockNumber(b), ReadMode::Normal).unwrap();
        let mut w = p.write();
        w[300] = 0xA5;
        drop(w);
        p.mark_dirty();
    }
    drop(guard);
    // The pinned page was never taken: its frame still holds block 0, unchanged.
    assert_eq!(page::item(&held.read(), 0), Some(&[0u8; 40][..]));
    assert_eq!(held.read()[300], 0);
    drop(held);
    // Every page the ring reused went to the file first; the rest are still dirty in the pool.
    let in_pool = (1..100)
        .filter(|&b| pool.contains(big.id, BlockNumber(b)))
        .count();
    assert!(in_pool <= 16, "{in_pool}");
    assert_eq!(pool.dirty_count(), in_pool);
    pool.flush_all().unwrap();
    let mut buf = vec![0u8; BLCKSZ];
    for b in 1..100 {
        smgr.read(&big, BlockNumber(b), &mut buf).unwrap();
        assert_eq!(buf[300], 0xA5, "block {b}");
        let p: &PageBuf = buf.as_slice().try_into().unwrap();
        page::check(p).unwrap();
    }
}
