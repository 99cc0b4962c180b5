//! The bulk build of a new index from sorted entries, bottom-up as PostgreSQL's `nbtsort.c`:
//! packed leaves, internal levels above them, the meta page last. Pages are built in private
//! memory and enter the relation in batches of up to [`BUILD_BATCH_PAGES`], each batch one
//! `BTREE_NEWPAGE` record of full-page images written straight to the file, bypassing the
//! buffer pool ([`crate::bulk_write`], PostgreSQL 17's `bulk_write.c`).
//!
//! Crash safety: the index relation is new, created by the building transaction, and named by
//! the catalog only once that transaction commits; a crash before the commit leaves an orphan
//! file (removed by the abort's redo, or listed by `verify`), and a crash after it finds every
//! page image in the WAL before the commit record, or, for records before a checkpoint that
//! began during the build, the file fsynced by [`BulkWriter::finish`].
//!
//! Progress: if the caller made this thread's builds report somewhere
//! ([`crate::progress::report_index_builds_to`]), the build enters phase "loading tuples in
//! tree" with the entry count as `tuples_total` (the heap scan that produced the entries is
//! over: `blocks_done` = `blocks_total`), and advances `tuples_done` after each leaf page.

use super::{
    init_node, set_links, BTREE_NEWPAGE, BUILD_FILL, MAX_KEY_SIZE, RM_BTREE, SPECIAL_SIZE,
};
use crate::bulk_write::BulkWriter;
use crate::page::{self, PageBuf, PageKind};
use crate::progress::{index_build_progress, IndexBuildProgress, PHASE_LOADING};
use crate::smgr::Relation;
use crate::Storage;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use walnut_common::{BlockNumber, Error, Result, SqlState, Tid, Xid, BLCKSZ};

/// Most pages one `BTREE_NEWPAGE` record of a build carries (PostgreSQL's `XLR_MAX_BLOCK_ID`).
pub const BUILD_BATCH_PAGES: usize = 32;

// A record holds at most 255 block references.
const _: () = assert!(BUILD_BATCH_PAGES <= u8::MAX as usize);

/// The entries of an index build, sorted by key: `key(i)` strictly ascending, each with the
/// TID of its heap tuple.
pub trait SortedEntries {
    /// Number of entries.
    fn count(&self) -> usize;
    /// Key of entry `i` (memcomparable encoding).
    fn key(&self, i: usize) -> &[u8];
    /// TID of entry `i`.
    fn tid(&self, i: usize) -> Tid;
}

impl SortedEntries for Vec<(Vec<u8>, Tid)> {
    fn count(&self) -> usize {
        self.len()
    }
    fn key(&self, i: usize) -> &[u8] {
        &self[i].0
    }
    fn tid(&self, i: usize) -> Tid {
        self[i].1
    }
}

/// One level's items: key and value bytes (a TID on leaves, a child block above).
trait LevelItems {
    fn count(&self) -> usize;
    fn key(&self, i: usize) -> &[u8];
    /// Writes the value of item `i` into `out`.
    fn value(&self, i: usize, out: &mut Vec<u8>);
}

struct Leaves<'a>(&'a dyn SortedEntries);

impl LevelItems for Leaves<'_> {
    fn count(&self) -> usize {
        self.0.count()
    }
    fn key(&self, i: usize) -> &[u8] {
        self.0.key(i)
    }
    fn value(&self, i: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.tid(i).to_bytes());
    }
}

/// Downlinks: each child's first key and block.
struct Downlinks(Vec<(Vec<u8>, BlockNumber)>);

impl LevelItems for Downlinks {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn key(&self, i: usize) -> &[u8] {
        &self.0[i].0
    }
    fn value(&self, i: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0[i].1 .0.to_le_bytes());
    }
}

/// Builds an index from `entries` sorted by key with no duplicates (checked by the caller;
/// asserted): meta page, packed leaves, internal levels. Every page is logged as a full-page
/// image, [`BUILD_BATCH_PAGES`] pages to a record.
///
/// # Errors
/// 54000 for a key over [`MAX_KEY_SIZE`] bytes; I/O errors (53100 for a full disk).
pub fn build(
    st: &Storage,
    rel: &Arc<Relation>,
    xid: Xid,
    entries: &dyn SortedEntries,
) -> Result<()> {
    let n = entries.count();
    for i in 0..n {
        assert!(
            i == 0 || entries.key(i - 1) < entries.key(i),
            "index build from entries not strictly ascending"
        );
        assert!(entries.tid(i).is_valid(), "index build from an invalid TID");
        // Keys come from the table's rows: too long is the user's error, not a bug. (Splits
        // rely on items of at most MAX_ITEM_SIZE bytes.)
        let k = entries.key(i);
        if k.len() > MAX_KEY_SIZE {
            return Err(Error::user(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "index row size {} exceeds maximum {MAX_KEY_SIZE} for an index",
                    k.len()
                ),
            ));
        }
    }
    let progress = index_build_progress();
    if let Some(p) = &progress {
        p.index_relid.store(rel.id.0, Ordering::Relaxed);
        let scanned = p.blocks_total.load(Ordering::Relaxed);
        p.blocks_done.store(scanned, Ordering::Relaxed);
        p.tuples_total.store(n as u64, Ordering::Relaxed);
        p.set_phase(PHASE_LOADING);
    }
    let mut w = Writer {
        st,
        rel,
        bulk: BulkWriter::new(st, xid, (RM_BTREE, BTREE_NEWPAGE)),
        batch: Vec::with_capacity(BUILD_BATCH_PAGES),
        progress,
    };
    // The meta page is block 0.
    let meta_block = w.alloc(1)?;
    assert_eq!(
        meta_block,
        BlockNumber(0),
        "index build into a non-empty relation"
    );
    let mut downlinks = build_level(&mut w, &Leaves(entries), 0)?;
    let mut lvl = 0u16;
    while downlinks.len() > 1 {
        lvl += 1;
        downlinks = build_level(&mut w, &Downlinks(downlinks), lvl)?;
    }
    let root = downlinks[0].1;
    let mut m = page::zeroed();
    page::init(&mut m, PageKind::BTreeMeta, 0);
    m[24..28].copy_from_slice(&root.0.to_le_bytes());
    m[28..32].copy_from_slice(&(lvl as u32).to_le_bytes());
    w.push(meta_block, m)?;
    w.flush()?;
    w.bulk.finish(st, rel)?;
    rel.btree_root.store(root.0, Ordering::Release);
    Ok(())
}

/// Packs one level's items into pages (at least one, empty if there are no items), writes
/// them, and returns the downlinks for the level above: each page's first key and block.
fn build_level(
    w: &mut Writer<'_>,
    items: &dyn LevelItems,
    lvl: u16,
) -> Result<Vec<(Vec<u8>, BlockNumber)>> {
    let limit = (BLCKSZ - page::PAGE_HEADER_SIZE - SPECIAL_SIZE) * BUILD_FILL / 100;
    let val_len = if lvl == 0 { Tid::SIZE } else { 4 };
    // Page boundaries: starts[g] is the first item of page g.
    let mut starts = vec![0usize];
    let mut used = 0;
    for i in 0..items.count() {
        let sz = 2 + items.key(i).len() + val_len + page::LINE_POINTER_SIZE;
        if used + sz > limit && i > *starts.last().expect("a page") {
            starts.push(i);
            used = 0;
        }
        used += sz;
    }
    let pages = starts.len();
    let first = w.alloc(pages)?;
    let block = |g: usize| BlockNumber(first.0 + g as u32);
    let mut out = Vec::with_capacity(pages);
    let mut item = Vec::with_capacity(64);
    for g in 0..pages {
        let (lo, hi) = (
            starts[g],
            starts.get(g + 1).copied().unwrap_or(items.count()),
        );
        let mut p = page::zeroed();
        init_node(&mut p, lvl);
        set_links(
            &mut p,
            (g + 1 < pages).then(|| block(g + 1)),
            g.checked_sub(1).map(block),
        );
        // High key: the next page's first key (none on the rightmost page).
        item.clear();
        let high: &[u8] = if hi < items.count() {
            items.key(hi)
        } else {
            &[]
        };
        item.extend_from_slice(&(high.len() as u16).to_le_bytes());
        item.extend_from_slice(high);
        page::add_item(&mut p, 0, &item);
        for i in lo..hi {
            // The first downlink of an internal page has an empty key (minus infinity).
            let k: &[u8] = if lvl > 0 && i == lo {
                &[]
            } else {
                items.key(i)
            };
            item.clear();
            item.extend_from_slice(&(k.len() as u16).to_le_bytes());
            item.extend_from_slice(k);
            items.value(i, &mut item);
            page::add_item(&mut p, i - lo + 1, &item);
        }
        out.push((
            if lo < hi {
                items.key(lo).to_vec()
            } else {
                Vec::new()
            },
            block(g),
        ));
        w.push(block(g), p)?;
        if let (0, Some(progress)) = (lvl, &w.progress) {
            progress.tuples_done.store(hi as u64, Ordering::Release);
            progress.report();
        }
    }
    Ok(out)
}

/// Writes built pages into the new relation, [`BUILD_BATCH_PAGES`] to a WAL record.
struct Writer<'a> {
    st: &'a Storage,
    rel: &'a Arc<Relation>,
    bulk: BulkWriter,
    batch: Vec<(BlockNumber, Box<PageBuf>)>,
    /// Where this build reports its progress, if anywhere.
    progress: Option<Arc<IndexBuildProgress>>,
}

impl Writer<'_> {
    /// Takes `n` consecutive blocks (the relation is new and only this build extends it;
    /// nothing is written for them until their pages are); returns the first.
    fn alloc(&mut self, n: usize) -> Result<BlockNumber> {
        Ok(self.bulk.reserve(self.rel, n as u32))
    }

    fn push(&mut self, block: BlockNumber, img: Box<PageBuf>) -> Result<()> {
        self.batch.push((block, img));
        if self.batch.len() >= BUILD_BATCH_PAGES {
            self.flush()?;
        }
        Ok(())
    }

    /// One `BTREE_NEWPAGE` record for the batch, then its pages straight to the file
    /// ([`BulkWriter::write`]).
    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BUILD_BATCH_PAGES));
        self.bulk.write(self.st, self.rel, batch)?;
        Ok(())
    }
}
