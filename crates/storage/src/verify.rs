//! `walnut verify`: an offline check of a cleanly shut down data directory, like PostgreSQL's
//! `pg_checksums --check` and amcheck's `bt_index_parent_check(heapallindexed => true)` together.
//!
//! It reads files only (through the [`Vfs`], so crash tests can run it on a fault-injecting
//! file system) and changes nothing. What it checks, in order:
//!
//! 1. **Control and status files**: readable, CRC valid; the cluster was shut down cleanly
//!    (otherwise the pages need redo first, and this is an error, not a finding).
//! 2. **Every page of every relation file** (`base/*`): all zero (never written) or a valid
//!    checksum and header (`page::check`); file sizes are whole pages (no half-extended file).
//!    Findings in an orphan file (one no table uses) are dropped: it is only listed, since a
//!    crash may leave the pages a load wrote straight into its new file torn.
//! 3. **The catalog**: every live row decodes; table and sequence names, ids and relation
//!    files are unique; each sequence's file is one page holding a state within its bounds; every table's heap file exists, and an index file exists exactly when the table
//!    has a primary key.
//! 4. **Heaps**: every tuple parses; `prev`/`next` links point at existing tuples of the same
//!    relation, except those pruning may leave pointing at a removed version (a `prev` of a
//!    version whose inserter committed or aborted, a `next` of one whose deleter committed,
//!    or whose same-page update aborted; DESIGN.md, "Pruning"); every redirect names a
//!    heap-only tuple; an index entry may name a dead line pointer when its key has no
//!    live row; every live row (inserter committed, no committed deleter) decodes with the
//!    table's column types; no two live rows share a primary key.
//! 5. **B-trees**, level by level from the root (after Lehman & Yao, as `verify_nbtree.c`):
//!    the meta page names the root; each level is a chain of right links whose left links
//!    point back; levels match; keys ascend strictly; every key is below the page's high key
//!    (the rightmost page's is empty, +infinity) and the first key of a right sibling is at
//!    least the left page's high key; each internal page's first key is empty (-infinity);
//!    every downlink points to a page one level down whose keys lie between the downlink's key
//!    and the next one's, and every page of a level has exactly one downlink.
//! 6. **Index and heap agree** (heapallindexed): every leaf entry points at an existing heap
//!    tuple whose key is the entry's key, and whose chain of older versions leads to the live
//!    version of that key, if there is one; every live row is reached from the index exactly
//!    once.
//! 7. **Free-space maps** (`base/<relfile>_fsm`): each decodes (magic, version, CRC) and
//!    belongs to a heap (a table's or the catalog's, or an orphan file's), not to a B-tree or
//!    to no file; no entry promises room on a page that is neither a heap page nor new. An
//!    entry may promise more room than its page has, or name a block past the heap's end
//!    (the map is a hint that inserts recheck, DESIGN.md "Free-space map"): those are
//!    counted as stale, not findings.
//!
//! A finding is a [`Problem`]; the report lists them all. I/O errors and an unclean state stop
//! the check with an `Err`.

use crate::catalog::{self, TableInfo};
use crate::control::{self, ControlFile, DbState};
use crate::heap::{self, Version};
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::{Relation, Smgr};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use walnut_common::value::{decode_row, encode_key};
use walnut_common::{BlockNumber, Error, RelFileId, Result, SqlState, Tid, Xid, BLCKSZ};
use walnut_io::Vfs;

/// One inconsistency found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The relation file, if the problem is in one.
    pub relfile: Option<RelFileId>,
    /// The block, if the problem is in one.
    pub block: Option<BlockNumber>,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.relfile, self.block) {
            (Some(r), Some(b)) => write!(f, "base/{} block {}: {}", r.0, b.0, self.what),
            (Some(r), None) => write!(f, "base/{}: {}", r.0, self.what),
            _ => f.write_str(&self.what),
        }
    }
}

/// What [`verify`] checked and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Relation files read.
    pub relation_files: usize,
    /// Pages read (including all-zero ones).
    pub pages: u64,
    /// Tables in the catalog.
    pub tables: usize,
    /// Live rows.
    pub live_rows: u64,
    /// B-tree leaf entries.
    pub index_entries: u64,
    /// Relation files that no table uses (left by a transaction that created a file and did
    /// not commit; harmless, see DESIGN.md).
    pub orphan_files: Vec<RelFileId>,
    /// Free-space map files read.
    pub fsm_files: usize,
    /// Their entries that promise room (a category above 0).
    pub fsm_entries: u64,
    /// Of those, entries that promise more room than the page has, or name a block past the
    /// relation's end (stale hints).
    pub fsm_stale: u64,
    /// Everything found wrong.
    pub problems: Vec<Problem>,
}

impl Report {
    /// True if nothing was found wrong.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "ERROR: {p}")?;
        }
        for r in &self.orphan_files {
            writeln!(
                f,
                "NOTICE: base/{}: orphan relation file (no table uses it; harmless)",
                r.0
            )?;
        }
        if self.fsm_files > 0 {
            writeln!(
                f,
                "{} free-space maps: {} pages with room recorded, {} of them stale (more than the page's room, or past the end: hints, rechecked by inserts)",
                self.fsm_files, self.fsm_entries, self.fsm_stale
            )?;
        }
        writeln!(
            f,
            "{} relation files, {} pages, {} tables, {} live rows, {} index entries, {} orphan files: {}",
            self.relation_files,
            self.pages,
            self.tables,
            self.live_rows,
            self.index_entries,
            self.orphan_files.len(),
            if self.is_ok() {
                "no problems found".to_string()
            } else {
                format!("{} problems found", self.problems.len())
            }
        )
    }
}

/// Transaction outcomes from the status store (a clean shutdown leaves none in progress), and
/// the control file's oldest xid, below which the store forgot them.
struct Outcomes {
    store: control::XactStatus,
    oldest: Xid,
}

impl Outcomes {
    fn committed(&self, x: Xid) -> bool {
        x == Xid::FROZEN
            || (x >= Xid::FIRST_NORMAL && x < self.oldest)
            || self.store.get(x) == crate::xact::CLOG_COMMITTED
    }

    fn aborted(&self, x: Xid) -> bool {
        x == Xid::ABORTED || (x >= self.oldest && self.store.get(x) == crate::xact::CLOG_ABORTED)
    }

    /// An xid a version may not name any more: a normal one below the oldest, which VACUUM
    /// must have frozen before the store forgot it.
    fn forgotten(&self, x: Xid) -> bool {
        x >= Xid::FIRST_NORMAL && x < self.oldest
    }

    /// Inserted by a committed transaction and not deleted by one.
    fn live(&self, v: &Version) -> bool {
        self.committed(v.xmin) && !(v.xmax.is_valid() && self.committed(v.xmax))
    }
}

/// Reads one relation's pages on demand; blocks that failed their check read as `None`.
struct Pages {
    rel: Arc<Relation>,
    nblocks: u32,
    bad: HashSet<u32>,
}

struct Checker<'a> {
    smgr: Smgr,
    outcomes: Outcomes,
    report: &'a mut Report,
}

impl Checker<'_> {
    /// The status store still knows the version's `xmin` and `xmax` (VACUUM froze every xid
    /// below the oldest before a checkpoint let the store forget them).
    fn check_xids(&mut self, rel: RelFileId, tid: Tid, v: &Version) {
        for (name, x) in [("xmin", v.xmin), ("xmax", v.xmax)] {
            if self.outcomes.forgotten(x) {
                self.problem(
                    Some(rel),
                    Some(tid.block),
                    format!(
                        "tuple {}: {name} {} is below the oldest xid {}, whose status the store no longer has",
                        tid.slot, x.0, self.outcomes.oldest.0
                    ),
                );
            }
        }
    }

    fn problem(&mut self, relfile: Option<RelFileId>, block: Option<BlockNumber>, what: String) {
        self.report.problems.push(Problem {
            relfile,
            block,
            what,
        });
    }

    fn read(&self, pages: &Pages, block: u32) -> Result<Option<Box<PageBuf>>> {
        if block >= pages.nblocks || pages.bad.contains(&block) {
            return Ok(None);
        }
        let mut buf: Box<PageBuf> = page::zeroed();
        self.smgr
            .read(&pages.rel, BlockNumber(block), &mut buf[..])?;
        Ok(Some(buf))
    }

    /// Step 2 for one file: checks every page; returns the file with its bad blocks noted.
    fn scan_file(&mut self, id: RelFileId) -> Result<Pages> {
        let rel = self.smgr.open(id)?;
        let nblocks = rel.nblocks.load(Ordering::Acquire);
        let mut pages = Pages {
            rel,
            nblocks,
            bad: HashSet::new(),
        };
        for b in 0..nblocks {
            let p = self.read(&pages, b)?.expect("in range");
            self.report.pages += 1;
            if let Err(e) = page::check(&p) {
                self.problem(Some(id), Some(BlockNumber(b)), e.message.clone());
                pages.bad.insert(b);
            }
        }
        Ok(pages)
    }

    /// The heap page `tid` is on, if `tid` is valid and its block a heap page that passed its
    /// checks.
    fn heap_page(&self, pages: &Pages, tid: Tid) -> Result<Option<Box<PageBuf>>> {
        if !tid.is_valid() {
            return Ok(None);
        }
        Ok(self
            .read(pages, tid.block.0)?
            .filter(|p| page::kind(p) == Some(PageKind::Heap)))
    }

    /// The tuple at `tid` of `pages`, if it exists and parses.
    fn tuple(&self, pages: &Pages, tid: Tid) -> Result<Option<Version>> {
        let Some(p) = self.heap_page(pages, tid)? else {
            return Ok(None);
        };
        let i = tid.slot as usize - 1;
        if i >= page::slot_count(&p) {
            return Ok(None);
        }
        Ok(page::item(&p, i).and_then(|it| heap::parse_version(it).ok()))
    }

    /// The TID of the newest version that an index entry naming `tid` reaches on its page
    /// (`heap::hot_head`: through a redirect and same-page update links), or `None` if `tid`
    /// is not a tuple or a redirect to one (the caller's checks then report what it is).
    fn chain_head(&self, pages: &Pages, tid: Tid) -> Result<Option<Tid>> {
        let Some(p) = self.heap_page(pages, tid)? else {
            return Ok(None);
        };
        let aborted = |x: Xid| self.outcomes.aborted(x);
        Ok(heap::hot_head(&p, tid.block, tid.slot, &aborted)
            .ok()
            .flatten()
            .map(|i| Tid {
                block: tid.block,
                slot: i as u16 + 1,
            }))
    }

    /// True if `tid` is a dead line pointer of a heap page of `pages` (a pruned version).
    fn dead(&self, pages: &Pages, tid: Tid) -> Result<bool> {
        if !tid.is_valid() {
            return Ok(false);
        }
        let Some(p) = self.read(pages, tid.block.0)? else {
            return Ok(false);
        };
        Ok(page::kind(&p) == Some(PageKind::Heap) && page::is_dead(&p, tid.slot as usize - 1))
    }

    /// Every tuple of a heap file: (TID, version); malformed ones are reported and skipped.
    fn heap_tuples(&mut self, pages: &Pages) -> Result<Vec<(Tid, Version)>> {
        let id = pages.rel.id;
        let mut out = Vec::new();
        for b in 0..pages.nblocks {
            let Some(p) = self.read(pages, b)? else {
                continue;
            };
            if page::is_new(&p) {
                continue;
            }
            if page::kind(&p) != Some(PageKind::Heap) {
                self.problem(
                    Some(id),
                    Some(BlockNumber(b)),
                    format!("heap file holds a page of kind {:?}", page::kind(&p)),
                );
                continue;
            }
            for i in 0..page::slot_count(&p) {
                if let Some(t) = page::redirect_target(&p, i) {
                    let heap_only = page::item(&p, t)
                        .and_then(|it| heap::parse_version(it).ok())
                        .is_some_and(|v| v.flags & heap::HEAP_ONLY_TUPLE != 0);
                    if !heap_only {
                        self.problem(
                            Some(id),
                            Some(BlockNumber(b)),
                            format!(
                                "line pointer {} redirects to {}, which holds no heap-only tuple",
                                i + 1,
                                t + 1
                            ),
                        );
                    }
                }
                let Some(item) = page::item(&p, i) else {
                    continue;
                };
                let tid = Tid {
                    block: BlockNumber(b),
                    slot: i as u16 + 1,
                };
                match heap::parse_version(item) {
                    Ok(v) => out.push((tid, v)),
                    Err(e) => self.problem(
                        Some(id),
                        Some(BlockNumber(b)),
                        format!("tuple {}: {}", tid.slot, e.message),
                    ),
                }
            }
        }
        Ok(out)
    }
}

/// Runs every check on the data directory `dir` (see the module documentation).
///
/// # Errors
/// - bad input (55000, object not in prerequisite state) if the cluster was not shut down
///   cleanly: its pages need redo before they can be checked;
/// - corruption if the control or status file is unreadable;
/// - I/O errors.
pub fn verify(vfs: Arc<dyn Vfs>, dir: &Path) -> Result<Report> {
    let ctl = ControlFile::read(&*vfs, dir)?;
    if ctl.state != DbState::ShutDown {
        return Err(Error::user(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the database system in \"{}\" was not shut down cleanly; start it (crash recovery) and shut it down before verifying",
                dir.display()
            ),
        ));
    }
    let outcomes = Outcomes {
        store: control::read_xact_status(&*vfs, dir, ctl.oldest_xid)?,
        oldest: ctl.oldest_xid,
    };
    let base = dir.join("base");
    let mut report = Report::default();
    let mut files: Vec<RelFileId> = Vec::new();
    let mut fsm_files: Vec<RelFileId> = Vec::new();
    let names = vfs
        .list_dir(&base)
        .map_err(|e| Error::io(format!("could not list \"{}\"", base.display()), e))?;
    let mut c = Checker {
        smgr: Smgr::read_only(vfs.clone(), base.clone()),
        outcomes,
        report: &mut report,
    };
    for name in names {
        match (name.parse::<u32>(), crate::fsm::relfile_of(&name)) {
            (Ok(n), _) => files.push(RelFileId(n)),
            (_, Some(n)) => fsm_files.push(RelFileId(n)),
            _ => c.problem(None, None, format!("base/{name} is not a relation file")),
        }
    }
    files.sort();
    let mut pages: BTreeMap<RelFileId, Pages> = BTreeMap::new();
    for &id in &files {
        let path = base.join(id.0.to_string());
        let file = vfs
            .open(&path, walnut_io::OpenMode::default())
            .map_err(|e| Error::io(format!("could not open \"{}\"", path.display()), e))?;
        let len = file
            .len()
            .map_err(|e| Error::io(format!("could not stat \"{}\"", path.display()), e))?;
        if len % BLCKSZ as u64 != 0 {
            c.problem(
                Some(id),
                None,
                format!(
                    "file size {len} is not a whole number of {BLCKSZ}-byte pages (half-extended)"
                ),
            );
        }
        pages.insert(id, c.scan_file(id)?);
    }
    c.report.relation_files = files.len();
    // Problems up to here are step 2's, of single files.
    let file_problems = c.report.problems.len();

    let (tables, sequence_files) = check_catalog(&mut c, &pages)?;
    c.report.tables = tables.len();
    let mut used: HashSet<RelFileId> = HashSet::from([RelFileId::CATALOG]);
    used.extend(sequence_files);
    for t in &tables {
        used.insert(t.relfile);
        used.extend(t.index);
        if let Some(heap_pages) = pages.get(&t.relfile) {
            let live = check_heap(&mut c, t, heap_pages)?;
            if let (Some(ix), Some(_)) = (t.index, t.def.primary_key.as_ref()) {
                if let Some(ix_pages) = pages.get(&ix) {
                    check_btree(&mut c, t, ix_pages, heap_pages, &live)?;
                }
            }
        }
    }
    let indexes: HashSet<RelFileId> = tables.iter().filter_map(|t| t.index).collect();
    fsm_files.sort();
    for id in fsm_files {
        if pages.contains_key(&id) || !used.contains(&id) {
            // (A table's missing file is step 3's finding already.)
            check_free_space_map(
                &mut c,
                (&*vfs, &base),
                id,
                pages.get(&id),
                indexes.contains(&id),
            )?;
        }
    }
    c.report.orphan_files = files.into_iter().filter(|f| !used.contains(f)).collect();
    // An orphan's pages are nobody's: a crash may leave one torn, since a load writes the
    // pages of a file its transaction created before their WAL is flushed (DESIGN.md, "Bulk
    // load"). Its notice says it is there; its pages are not findings.
    let orphans: HashSet<RelFileId> = c.report.orphan_files.iter().copied().collect();
    let mut i = 0;
    c.report.problems.retain(|p| {
        i += 1;
        i > file_problems || !p.relfile.is_some_and(|f| orphans.contains(&f))
    });
    Ok(report)
}

/// Step 7 for relation `id`'s free-space map file (`pages`: the relation's file, if it has
/// one; `is_index`: a table's B-tree).
fn check_free_space_map(
    c: &mut Checker<'_>,
    (vfs, base): (&dyn Vfs, &Path),
    id: RelFileId,
    pages: Option<&Pages>,
    is_index: bool,
) -> Result<()> {
    let name = crate::fsm::file_name(id.0);
    c.report.fsm_files += 1;
    let problem = |c: &mut Checker<'_>, block: Option<u32>, what: String| {
        c.problem(
            Some(id),
            block.map(BlockNumber),
            format!("free-space map {name}: {what}"),
        )
    };
    let bytes = control::read_all(vfs, &base.join(&name))?.unwrap_or_default();
    let cats = match crate::fsm::decode(&bytes) {
        Ok(cats) => cats,
        Err(e) => {
            problem(c, None, e.message);
            return Ok(());
        }
    };
    let Some(pages) = pages else {
        problem(c, None, "its relation file does not exist".into());
        return Ok(());
    };
    if is_index {
        problem(c, None, "a B-tree has no free-space map".into());
        return Ok(());
    }
    for (b, &cat) in cats.iter().enumerate() {
        if cat == 0 {
            continue;
        }
        c.report.fsm_entries += 1;
        if b >= pages.nblocks as usize {
            // Written before a power loss cut an unsynced extension off (or before a
            // truncation, for a relation nothing opened since): the load ignores it.
            c.report.fsm_stale += 1;
            continue;
        }
        let Some(p) = c.read(pages, b as u32)? else {
            continue; // a bad page, reported by step 2
        };
        match page::kind(&p) {
            Some(PageKind::Heap) => {
                if cat > crate::fsm::category(page::free_space(&p)) {
                    c.report.fsm_stale += 1;
                }
            }
            _ if page::is_new(&p) => {}
            _ => problem(
                c,
                Some(b as u32),
                "room recorded on a page that is not a heap page".into(),
            ),
        }
    }
    Ok(())
}

/// Step 3: the live catalog rows, checked.
fn check_catalog(
    c: &mut Checker<'_>,
    pages: &BTreeMap<RelFileId, Pages>,
) -> Result<(Vec<TableInfo>, Vec<RelFileId>)> {
    let Some(cat) = pages.get(&RelFileId::CATALOG) else {
        c.problem(None, None, "the catalog file base/1 is missing".into());
        return Ok((Vec::new(), Vec::new()));
    };
    let mut tables = Vec::new();
    let mut sequences = Vec::new();
    for (tid, v) in c.heap_tuples(cat)? {
        c.check_xids(RelFileId::CATALOG, tid, &v);
        if !c.outcomes.live(&v) {
            continue;
        }
        match catalog::decode_entry(tid, &v.data) {
            Ok(catalog::Entry::Table(t)) => tables.push(t),
            Ok(catalog::Entry::Sequence(s)) => sequences.push(s),
            Err(e) => c.problem(
                Some(RelFileId::CATALOG),
                Some(tid.block),
                format!("catalog row {}: {}", tid.slot, e.message),
            ),
        }
    }
    let mut names = HashSet::new();
    let mut ids = HashSet::new();
    let mut relfiles = HashSet::new();
    for s in &sequences {
        let name = &s.def.name;
        if !names.insert(name.clone()) || !ids.insert(s.oid) || !relfiles.insert(s.relfile) {
            c.problem(
                None,
                None,
                format!("catalog: sequence \"{name}\" shares a name, an id or a file"),
            );
        }
        let page = match pages.get(&s.relfile) {
            Some(p) if p.nblocks == 1 => c.read(p, 0)?,
            _ => None,
        };
        let Some(page) = page else {
            c.problem(
                Some(s.relfile),
                None,
                format!("file of sequence \"{name}\" is missing or not one good page"),
            );
            continue;
        };
        match crate::seq::read_state(&page, s.relfile) {
            Ok(st) if (s.def.min..=s.def.max).contains(&st.last_value) && st.log_cnt >= 0 => {}
            Ok(st) => c.problem(
                Some(s.relfile),
                Some(BlockNumber(0)),
                format!("sequence \"{name}\": state {st:?} outside its bounds"),
            ),
            Err(e) => c.problem(Some(s.relfile), Some(BlockNumber(0)), e.message),
        }
    }
    for t in &tables {
        let name = &t.def.name;
        if !names.insert(name.clone()) {
            c.problem(
                None,
                None,
                format!("catalog: two live tables named \"{name}\""),
            );
        }
        if !ids.insert(t.table_id) {
            c.problem(
                None,
                None,
                format!("catalog: table id {} is used twice", t.table_id),
            );
        }
        for f in std::iter::once(t.relfile).chain(t.index) {
            if !relfiles.insert(f) || f == RelFileId::CATALOG {
                c.problem(
                    None,
                    None,
                    format!("catalog: relation file {} is used twice", f.0),
                );
            }
            if !pages.contains_key(&f) {
                c.problem(
                    Some(f),
                    None,
                    format!("file of table \"{name}\" is missing"),
                );
            }
        }
        if t.def.primary_key.is_some() != t.index.is_some() {
            c.problem(
                None,
                None,
                format!("catalog: table \"{name}\" has a primary key without an index, or an index without a key"),
            );
        }
    }
    Ok((tables, sequences.iter().map(|s| s.relfile).collect()))
}

/// Step 4: returns the live rows by primary-key key (empty without a key).
fn check_heap(c: &mut Checker<'_>, t: &TableInfo, pages: &Pages) -> Result<HashMap<Vec<u8>, Tid>> {
    let id = t.relfile;
    let types: Vec<_> = t.def.columns.iter().map(|col| col.ty.clone()).collect();
    let tuples = c.heap_tuples(pages)?;
    let exists: HashSet<Tid> = tuples.iter().map(|(tid, _)| *tid).collect();
    let mut live: HashMap<Vec<u8>, Tid> = HashMap::new();
    for (tid, v) in &tuples {
        c.check_xids(id, *tid, v);
        // Pruning removes a version once the one that replaced it is visible to everyone: the
        // newer version's `prev` (its `xmin` committed) and an older one's `next` (its `xmax`
        // committed) may then point at a slot that is gone, dead or reused. So may the `prev`
        // of a version an aborted update left, once a later update replaced the same version
        // (the index no longer reaches it); where the index does reach one, its chain is
        // checked from the entry (step 6).
        for (name, link, may_dangle) in [
            (
                "prev",
                v.prev,
                c.outcomes.committed(v.xmin) || c.outcomes.aborted(v.xmin),
            ),
            // ... and the `next` of a version whose same-page update aborted: pruning
            // removes the heap-only version such an update left (nothing reaches it).
            (
                "next",
                v.next,
                c.outcomes.committed(v.xmax)
                    || (c.outcomes.aborted(v.xmax) && v.flags & heap::HEAP_HOT_UPDATED != 0),
            ),
        ] {
            if link.is_valid() && !may_dangle && !exists.contains(&link) {
                c.problem(
                    Some(id),
                    Some(tid.block),
                    format!(
                        "tuple {}: {name} link ({},{}) points at no tuple",
                        tid.slot, link.block.0, link.slot
                    ),
                );
            }
        }
        if !c.outcomes.live(v) {
            continue;
        }
        c.report.live_rows += 1;
        let row = match decode_row(&types, &v.data) {
            Ok(r) => r,
            Err(e) => {
                c.problem(
                    Some(id),
                    Some(tid.block),
                    format!("live tuple {} does not decode: {}", tid.slot, e.message),
                );
                continue;
            }
        };
        if let Some(pk) = &t.def.primary_key {
            let key = encode_key(&pk.iter().map(|&i| row[i].clone()).collect::<Vec<_>>());
            if let Some(other) = live.insert(key, *tid) {
                c.problem(
                    Some(id),
                    Some(tid.block),
                    format!(
                        "table \"{}\": live tuples ({},{}) and ({},{}) have the same primary key",
                        t.def.name, other.block.0, other.slot, tid.block.0, tid.slot
                    ),
                );
            }
        }
    }
    Ok(live)
}

/// A B-tree page read for checking: level, links, high key, (key, value) items.
struct Node {
    level: u16,
    left: Option<BlockNumber>,
    right: Option<BlockNumber>,
    high: Vec<u8>,
    items: Vec<(Vec<u8>, Vec<u8>)>,
}

fn parse_node(p: &PageBuf) -> Result<Node> {
    let n = page::slot_count(p);
    let mut items = Vec::with_capacity(n.saturating_sub(1));
    for i in 1..n {
        let it = page::item(p, i)
            .ok_or_else(|| Error::corruption(format!("line pointer {i} is unused")))?;
        let (k, v) = crate::btree::parse_item(it)?;
        items.push((k.to_vec(), v.to_vec()));
    }
    Ok(Node {
        level: crate::btree::level(p),
        left: crate::btree::left_link(p),
        right: crate::btree::right_link(p),
        high: crate::btree::high_key(p)?.to_vec(),
        items,
    })
}

/// Pages a level's downlinks point at: block -> (the downlink's key, the next one's, or `None`
/// for +infinity). Every key on the page must lie in that range.
type Downlinks = HashMap<u32, (Vec<u8>, Option<Vec<u8>>)>;

/// Steps 5 and 6 for one table's index.
fn check_btree(
    c: &mut Checker<'_>,
    t: &TableInfo,
    ix: &Pages,
    heap_pages: &Pages,
    live: &HashMap<Vec<u8>, Tid>,
) -> Result<()> {
    let id = ix.rel.id;
    let name = t.index_name();
    let bad = |c: &mut Checker<'_>, b: Option<u32>, what: String| {
        c.problem(
            Some(id),
            b.map(BlockNumber),
            format!("index \"{name}\": {what}"),
        )
    };
    let Some(meta) = c.read(ix, 0)? else {
        bad(c, Some(0), "meta page is missing or unreadable".into());
        return Ok(());
    };
    if page::kind(&meta) != Some(PageKind::BTreeMeta) {
        bad(c, Some(0), "block 0 is not a meta page".into());
        return Ok(());
    }
    let root = u32::from_le_bytes(meta[24..28].try_into().expect("4"));
    let root_level = u32::from_le_bytes(meta[28..32].try_into().expect("4"));
    // Level by level: (leftmost block, expected downlinks: block -> (low key, high bound)).
    let mut leftmost = root;
    let mut expected: Option<Downlinks> = None;
    let mut seen_pages: HashSet<u32> = HashSet::from([0]);
    let mut reached_live: HashSet<Tid> = HashSet::new();
    for lvl in (0..=root_level).rev() {
        let mut next_expected: Downlinks = HashMap::new();
        let mut next_leftmost = None;
        let mut prev: Option<(u32, Vec<u8>)> = None; // (block, high key)
        let mut visited_level: HashSet<u32> = HashSet::new();
        let mut cur = Some(leftmost);
        while let Some(b) = cur {
            if !visited_level.insert(b) || !seen_pages.insert(b) {
                bad(
                    c,
                    Some(b),
                    format!("level {lvl}: right links loop or reach page {b} twice"),
                );
                break;
            }
            let Some(p) = c.read(ix, b)? else {
                bad(
                    c,
                    Some(b),
                    format!("level {lvl}: page is missing or failed its check"),
                );
                break;
            };
            if page::kind(&p) != Some(PageKind::BTree) {
                bad(c, Some(b), format!("level {lvl}: not a B-tree page"));
                break;
            }
            let node = match parse_node(&p) {
                Ok(n) => n,
                Err(e) => {
                    bad(c, Some(b), e.message.clone());
                    break;
                }
            };
            if u32::from(node.level) != lvl {
                bad(
                    c,
                    Some(b),
                    format!("level is {}, expected {lvl}", node.level),
                );
            }
            let left_ok = match &prev {
                None => node.left.is_none(),
                Some((pb, _)) => node.left == Some(BlockNumber(*pb)),
            };
            if !left_ok {
                bad(
                    c,
                    Some(b),
                    format!(
                        "left link {:?} does not point back to its left sibling",
                        node.left.map(|x| x.0)
                    ),
                );
            }
            if node.right.is_none() != node.high.is_empty() {
                bad(
                    c,
                    Some(b),
                    "only the rightmost page may (and must) have an empty high key".into(),
                );
            }
            // Keys: strictly ascending, below the high key, at least the left sibling's high
            // key; internal pages start with -infinity.
            for (i, (k, _)) in node.items.iter().enumerate() {
                if lvl > 0 && i == 0 {
                    if !k.is_empty() {
                        bad(c, Some(b), "first downlink's key is not -infinity".into());
                    }
                    continue;
                }
                if i > 0 && node.items[i - 1].0 >= *k {
                    bad(c, Some(b), format!("keys out of order at item {}", i + 1));
                }
                if !node.high.is_empty() && *k >= node.high {
                    bad(
                        c,
                        Some(b),
                        format!("item {} is not below the high key", i + 1),
                    );
                }
                if let Some((_, ph)) = &prev {
                    if i == usize::from(lvl > 0) && *k < *ph {
                        bad(
                            c,
                            Some(b),
                            "first key is below the left sibling's high key".into(),
                        );
                    }
                }
            }
            // The parent's downlink to this page bounds its keys.
            if let Some(exp) = expected.as_mut() {
                match exp.remove(&b) {
                    None => bad(
                        c,
                        Some(b),
                        "page has no downlink from the level above".into(),
                    ),
                    Some((lo, hi)) => {
                        let keys = node.items.iter().skip(usize::from(lvl > 0)).map(|(k, _)| k);
                        for k in keys {
                            if *k < lo || hi.as_ref().is_some_and(|h| k >= h) {
                                bad(
                                    c,
                                    Some(b),
                                    "a key lies outside its parent's downlink range".into(),
                                );
                                break;
                            }
                        }
                    }
                }
            }
            if lvl > 0 {
                for (i, (k, v)) in node.items.iter().enumerate() {
                    let Ok(bytes) = <[u8; 4]>::try_from(v.as_slice()) else {
                        bad(c, Some(b), format!("downlink {} is malformed", i + 1));
                        continue;
                    };
                    let child = u32::from_le_bytes(bytes);
                    let hi = match node.items.get(i + 1) {
                        Some((nk, _)) => Some(nk.clone()),
                        None => (!node.high.is_empty()).then(|| node.high.clone()),
                    };
                    if next_expected.insert(child, (k.clone(), hi)).is_some() {
                        bad(c, Some(b), format!("two downlinks to page {child}"));
                    }
                    if next_leftmost.is_none() {
                        next_leftmost = Some(child);
                    }
                }
            } else {
                for (i, (k, v)) in node.items.iter().enumerate() {
                    c.report.index_entries += 1;
                    let Some(tid) = Tid::from_bytes(v) else {
                        bad(
                            c,
                            Some(b),
                            format!("leaf item {} has a malformed TID", i + 1),
                        );
                        continue;
                    };
                    check_entry(c, t, heap_pages, live, b, k, tid, &mut reached_live)?;
                }
            }
            prev = Some((b, node.high.clone()));
            cur = node.right.map(|r| r.0);
        }
        if let Some(exp) = expected.take() {
            for (child, _) in exp {
                bad(
                    c,
                    Some(child),
                    format!("downlink points at a page not on level {lvl}'s chain"),
                );
            }
        }
        if lvl > 0 {
            let Some(l) = next_leftmost else {
                bad(c, None, format!("internal level {lvl} has no downlinks"));
                return Ok(());
            };
            leftmost = l;
            expected = Some(next_expected);
        }
    }
    // Pages no walk reached: a B-tree page there is garbage nothing points to.
    for b in 1..ix.nblocks {
        if seen_pages.contains(&b) {
            continue;
        }
        if let Some(p) = c.read(ix, b)? {
            if !page::is_new(&p) {
                bad(c, Some(b), "page is not reachable from the root".into());
            }
        }
    }
    for (key, tid) in live {
        if !reached_live.contains(tid) {
            c.problem(
                Some(t.relfile),
                Some(tid.block),
                format!(
                    "live tuple {} (key {}) is not reached from index \"{}\"",
                    tid.slot,
                    hex(key),
                    t.index_name()
                ),
            );
        }
    }
    Ok(())
}

/// Step 6 for one leaf entry: the TID exists, its key is the entry's, and its chain of older
/// versions reaches the live version of that key, if any.
#[allow(clippy::too_many_arguments)]
fn check_entry(
    c: &mut Checker<'_>,
    t: &TableInfo,
    heap_pages: &Pages,
    live: &HashMap<Vec<u8>, Tid>,
    leaf: u32,
    key: &[u8],
    tid: Tid,
    reached: &mut HashSet<Tid>,
) -> Result<()> {
    let ix = t.index.expect("checked by the caller");
    // The entry names its chain's root; readers go on from the newest version on that page.
    let tid = c.chain_head(heap_pages, tid)?.unwrap_or(tid);
    let types: Vec<_> = t.def.columns.iter().map(|col| col.ty.clone()).collect();
    let pk = t.def.primary_key.as_ref().expect("checked by the caller");
    let Some(v) = c.tuple(heap_pages, tid)? else {
        if c.dead(heap_pages, tid)? && !live.contains_key(key) {
            return Ok(()); // a chain pruning ended (deleted row, aborted insert): allowed
        }
        c.problem(
            Some(ix),
            Some(BlockNumber(leaf)),
            format!(
                "entry {} points at ({},{}), which is no heap tuple",
                hex(key),
                tid.block.0,
                tid.slot
            ),
        );
        return Ok(());
    };
    let key_of = |v: &Version| {
        decode_row(&types, &v.data)
            .ok()
            .map(|r| encode_key(&pk.iter().map(|&i| r[i].clone()).collect::<Vec<_>>()))
    };
    if key_of(&v).as_deref() != Some(key) {
        c.problem(
            Some(ix),
            Some(BlockNumber(leaf)),
            format!(
                "entry {} points at ({},{}), whose key differs",
                hex(key),
                tid.block.0,
                tid.slot
            ),
        );
        return Ok(());
    }
    let Some(&want) = live.get(key) else {
        // A dead chain (deleted row, aborted insert): allowed, but the version a reader stops
        // at (past aborted inserts) must be this key's, or a dead line pointer: never a slot
        // pruning freed and a later insert reused.
        let mut v = v;
        let mut cur = tid;
        for _ in 0..100_000 {
            if c.outcomes.committed(v.xmin) || !v.prev.is_valid() {
                break;
            }
            cur = v.prev;
            match c.tuple(heap_pages, cur)? {
                Some(next) => v = next,
                None if c.dead(heap_pages, cur)? => return Ok(()),
                None => {
                    c.problem(
                        Some(ix),
                        Some(BlockNumber(leaf)),
                        format!(
                            "entry {} leads to ({},{}), which is no heap tuple",
                            hex(key),
                            cur.block.0,
                            cur.slot
                        ),
                    );
                    return Ok(());
                }
            }
        }
        if key_of(&v).as_deref() != Some(key) {
            c.problem(
                Some(ix),
                Some(BlockNumber(leaf)),
                format!(
                    "entry {} leads to ({},{}), a version of another key",
                    hex(key),
                    cur.block.0,
                    cur.slot
                ),
            );
        }
        return Ok(());
    };
    let mut cur = tid;
    for _ in 0..100_000 {
        if cur == want {
            if !reached.insert(want) {
                c.problem(
                    Some(ix),
                    Some(BlockNumber(leaf)),
                    format!(
                        "two entries reach live tuple ({},{})",
                        want.block.0, want.slot
                    ),
                );
            }
            return Ok(());
        }
        match c.tuple(heap_pages, cur)? {
            Some(v) if v.prev.is_valid() => cur = v.prev,
            _ => break,
        }
    }
    c.problem(
        Some(ix),
        Some(BlockNumber(leaf)),
        format!(
            "entry {} points at ({},{}), whose older versions do not lead to the live tuple ({},{})",
            hex(key),
            tid.block.0,
            tid.slot,
            want.block.0,
            want.slot
        ),
    );
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
