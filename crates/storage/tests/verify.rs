//! `walnut_storage::verify` against damaged data directories: each kind of damage it exists to
//! find is made on purpose (through the fault-injecting file system's `corrupt`) and must be
//! reported, with the file and block; a healthy directory must pass.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use walnut_common::{
    BlockNumber, ColumnDef, DataType, RelFileId, SqlState, TableDef, Value, BLCKSZ,
};
use walnut_io::fault::{FaultConfig, FaultVfs};
use walnut_io::{OpenMode, Vfs};
use walnut_storage::btree;
use walnut_storage::page::{self, PageBuf};
use walnut_storage::txn::Txn;
use walnut_storage::verify::{verify, Problem, Report};
use walnut_storage::{Storage, StorageConfig};
use walnut_wal::{CommitOpts, SessionId};

const DIR: &str = "/data";

/// A shut-down data directory with a table `t` of `rows` rows (long keys, so the index has
/// internal pages), and the paths of its heap and index files.
fn database(rows: i32) -> (FaultVfs, PathBuf, PathBuf) {
    let fv = FaultVfs::new(FaultConfig::new(3));
    let vfs: Arc<dyn Vfs> = Arc::new(fv.clone());
    let dir = Path::new(DIR);
    Storage::initdb(vfs.clone(), dir).unwrap();
    let st = Storage::open(vfs, dir, StorageConfig::default()).unwrap();
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.create_table(TableDef {
        name: "t".into(),
        columns: vec![
            ColumnDef {
                name: "k".into(),
                ty: DataType::Text,
                not_null: true,
                default: None,
                identity: None,
            },
            ColumnDef {
                name: "v".into(),
                ty: DataType::Int4,
                not_null: false,
                default: None,
                identity: None,
            },
        ],
        primary_key: Some(vec![0]),
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    })
    .unwrap();
    let info = t.table("t").unwrap();
    for i in 0..rows {
        t.insert(
            &info,
            &[
                Value::Text(format!("{i:06}-{}", "k".repeat(120))),
                Value::Int4(i),
            ],
        )
        .unwrap();
    }
    t.commit(&CommitOpts::new(SessionId::next())).unwrap();
    let (heap, index) = (info.relfile, info.index.unwrap());
    st.shutdown().unwrap();
    drop(st);
    let base = Path::new(DIR).join("base");
    (
        fv,
        base.join(heap.0.to_string()),
        base.join(index.0.to_string()),
    )
}

fn check(fv: &FaultVfs) -> Report {
    verify(Arc::new(fv.clone()), Path::new(DIR)).unwrap()
}

fn page_of(fv: &FaultVfs, path: &Path, block: usize) -> Box<PageBuf> {
    let bytes = fv.read_file(path).unwrap();
    let mut p: Box<PageBuf> = vec![0u8; BLCKSZ].into_boxed_slice().try_into().unwrap();
    p.copy_from_slice(&bytes[block * BLCKSZ..(block + 1) * BLCKSZ]);
    p
}

/// Writes `p` back as block `block`, with a valid checksum: damage only the structure checks
/// can see.
fn put_page(fv: &FaultVfs, path: &Path, block: usize, p: &mut PageBuf) {
    page::set_checksum(p);
    fv.corrupt(path, (block * BLCKSZ) as u64, &p[..]).unwrap();
}

fn assert_finds(r: &Report, what: &str) {
    assert!(
        r.problems.iter().any(|p| p.to_string().contains(what)),
        "expected a problem containing {what:?}:\n{r}"
    );
}

#[test]
fn a_healthy_directory_passes() {
    let (fv, _, _) = database(600);
    let r = check(&fv);
    assert!(r.is_ok(), "{r}");
    assert_eq!(r.tables, 1);
    assert_eq!(r.live_rows, 600);
    assert_eq!(r.index_entries, 600);
    assert!(r.pages > 10);
}

#[test]
fn a_bad_checksum_is_reported_with_its_block() {
    let (fv, heap, _) = database(50);
    fv.corrupt(&heap, 100, &[0xEE]).unwrap();
    let r = check(&fv);
    assert_finds(&r, "block 0: page verification failed");
}

#[test]
fn a_broken_sibling_link_is_reported() {
    let (fv, _, index) = database(600);
    // Find a leaf with a right sibling and point its right link at itself.
    let n = fv.read_file(&index).unwrap().len() / BLCKSZ;
    let mut done = false;
    for b in 1..n {
        let mut p = page_of(&fv, &index, b);
        if page::kind(&p) == Some(page::PageKind::BTree)
            && walnut_storage::btree::level(&p) == 0
            && walnut_storage::btree::right_link(&p).is_some()
        {
            let s = page::special_offset(&p);
            p[s..s + 4].copy_from_slice(&(b as u32).to_le_bytes());
            put_page(&fv, &index, b, &mut p);
            done = true;
            break;
        }
    }
    assert!(done, "the index has a leaf with a right sibling");
    let r = check(&fv);
    assert!(!r.is_ok());
    assert_finds(&r, "index \"t_pkey\"");
}

#[test]
fn keys_out_of_order_are_reported() {
    let (fv, _, index) = database(600);
    let n = fv.read_file(&index).unwrap().len() / BLCKSZ;
    for b in 1..n {
        let mut p = page_of(&fv, &index, b);
        if page::kind(&p) == Some(page::PageKind::BTree)
            && walnut_storage::btree::level(&p) == 0
            && page::slot_count(&p) > 3
        {
            // Swap two items' line pointers: the keys are then out of order.
            let lp = |i: usize| page::PAGE_HEADER_SIZE + 4 * i;
            let (a, c) = (lp(1), lp(2));
            let tmp: [u8; 4] = p[a..a + 4].try_into().unwrap();
            p.copy_within(c..c + 4, a);
            p[c..c + 4].copy_from_slice(&tmp);
            put_page(&fv, &index, b, &mut p);
            break;
        }
    }
    assert_finds(&check(&fv), "keys out of order");
}

#[test]
fn an_index_that_disagrees_with_its_heap_is_reported() {
    let (fv, heap, _) = database(50);
    // Change a live row's key in the heap (and fix the checksum): its index entry now points
    // at a tuple with another key, and the row is reached from no entry.
    let mut p = page_of(&fv, &heap, 0);
    let (off, len) = page::line_pointer(&p, 0);
    let row = &mut p[off..off + len];
    let pos = row
        .windows(6)
        .position(|w| w == b"000000")
        .expect("the first key");
    row[pos] = b'9';
    put_page(&fv, &heap, 0, &mut p);
    let r = check(&fv);
    assert_finds(&r, "whose key differs");
    assert_finds(&r, "is not reached from index");
}

#[test]
fn a_half_extended_file_is_reported() {
    let (fv, heap, _) = database(50);
    let len = fv.read_file(&heap).unwrap().len() as u64;
    fv.corrupt(&heap, len, &[0u8; 100]).unwrap();
    assert_finds(&check(&fv), "half-extended");
}

/// The relation file at `path` (`base/<relfile>`).
fn relfile_of(path: &Path) -> RelFileId {
    RelFileId(path.file_name().unwrap().to_str().unwrap().parse().unwrap())
}

/// The first leaf with a right sibling: (its block, the sibling's block).
fn leaf_with_sibling(fv: &FaultVfs, index: &Path) -> (usize, usize) {
    let n = fv.read_file(index).unwrap().len() / BLCKSZ;
    (1..n)
        .find_map(|b| {
            let p = page_of(fv, index, b);
            let right = btree::right_link(&p)?;
            (page::kind(&p) == Some(page::PageKind::BTree) && btree::level(&p) == 0)
                .then_some((b, right.0 as usize))
        })
        .expect("the index has a leaf with a right sibling")
}

/// Overwrites the key of the high key of `p` with the key of item `from` of `src` (every key
/// of these tables has the same length, so the page's layout stays as it is).
fn set_high_key(p: &mut PageBuf, src: &PageBuf, from: usize) {
    let (off, len) = page::line_pointer(p, 0);
    let key = btree::parse_item(page::item(src, from).unwrap())
        .unwrap()
        .0
        .to_vec();
    assert_eq!(len, 2 + key.len(), "same key length");
    p[off + 2..off + len].copy_from_slice(&key);
}

fn one_problem(r: &Report, relfile: Option<RelFileId>, block: Option<usize>, what: &str) {
    let want = Problem {
        relfile,
        block: block.map(|b| BlockNumber(b as u32)),
        what: what.to_string(),
    };
    assert_eq!(r.problems, vec![want], "{r}");
}

#[test]
fn a_high_key_below_a_pages_last_key_is_reported() {
    let (fv, _, index) = database(600);
    let (b, _) = leaf_with_sibling(&fv, &index);
    let mut p = page_of(&fv, &index, b);
    let items = page::slot_count(&p) - 1;
    // The high key becomes the page's last key, which is then not below it.
    let src = p.clone();
    set_high_key(&mut p, &src, items);
    put_page(&fv, &index, b, &mut p);
    one_problem(
        &check(&fv),
        Some(relfile_of(&index)),
        Some(b),
        &format!("index \"t_pkey\": item {items} is not below the high key"),
    );
}

#[test]
fn a_high_key_above_the_right_siblings_first_key_is_reported() {
    let (fv, _, index) = database(600);
    let (b, right) = leaf_with_sibling(&fv, &index);
    let mut p = page_of(&fv, &index, b);
    // The high key becomes the right sibling's second key: its first key is then below the
    // left page's high key, though every key of the left page is still below it.
    let r = page_of(&fv, &index, right);
    set_high_key(&mut p, &r, 2);
    put_page(&fv, &index, b, &mut p);
    one_problem(
        &check(&fv),
        Some(relfile_of(&index)),
        Some(right),
        "index \"t_pkey\": first key is below the left sibling's high key",
    );
}

#[test]
fn a_catalog_entry_naming_a_missing_file_is_reported() {
    let (fv, heap, index) = database(50);
    for path in [heap, index] {
        let fv = fv
            .crash_image(walnut_io::fault::CrashKind::ProcessKill, 0)
            .0;
        fv.remove(&path).unwrap();
        one_problem(
            &check(&fv),
            Some(relfile_of(&path)),
            None,
            "file of table \"t\" is missing",
        );
    }
}

#[test]
fn an_orphan_relation_file_is_listed_and_a_stray_file_reported() {
    let (fv, _, _) = database(50);
    let base = Path::new(DIR).join("base");
    let create = OpenMode {
        create: true,
        ..Default::default()
    };
    // An orphan (a relation file no table uses, as a crash before a CREATE TABLE committed
    // leaves): harmless, listed, not a problem.
    let f = fv.open(&base.join("99999"), create).unwrap();
    f.write_at(&[0u8; BLCKSZ], 0).unwrap();
    let r = check(&fv);
    assert!(r.is_ok(), "{r}");
    assert_eq!(r.orphan_files, vec![RelFileId(99999)]);
    assert!(
        r.to_string().contains("base/99999: orphan relation file"),
        "the printed report names the orphan:\n{r}"
    );
    // A file that is no relation file at all is a problem.
    fv.open(&base.join("junk"), create).unwrap();
    one_problem(&check(&fv), None, None, "base/junk is not a relation file");
}

/// Step 7: a free-space map promising more room than its pages have, or room past its heap's
/// end, holds stale hints, counted and not reported; one whose CRC fails, one promising room
/// on a B-tree page, one of a B-tree and one with no relation file are each reported.
#[test]
fn free_space_map_damage_is_reported_and_stale_hints_counted() {
    use walnut_storage::fsm;
    let (fv, heap, index) = database(600);
    let base = Path::new(DIR).join("base");
    let nblocks = fv.read_file(&heap).unwrap().len() / BLCKSZ;
    let put = |rel: RelFileId, bytes: &[u8]| {
        let create = OpenMode {
            create: true,
            ..Default::default()
        };
        let f = fv.open(&base.join(fsm::file_name(rel.0)), create).unwrap();
        f.set_len(0).unwrap();
        f.write_at(bytes, 0).unwrap();
    };
    let (h, ix) = (relfile_of(&heap), relfile_of(&index));
    put(h, &fsm::encode(&vec![255; nblocks]));
    let r = check(&fv);
    assert!(r.is_ok(), "{r}");
    assert_eq!((r.fsm_files, r.fsm_entries), (1, nblocks as u64));
    assert_eq!(r.fsm_stale, nblocks as u64, "no page of the table is empty");
    let name = fsm::file_name(h.0);
    put(h, &fsm::encode(&vec![255; nblocks + 2]));
    let r = check(&fv);
    assert!(r.is_ok(), "{r}");
    assert_eq!(r.fsm_stale, nblocks as u64 + 2, "past the end: stale");
    // A B-tree page in the heap's file (copied from the index, checksum intact): step 4
    // reports the heap, and step 7 the map's entry for it.
    let saved = page_of(&fv, &heap, 1);
    let mut leaf = page_of(&fv, &index, 1);
    put_page(&fv, &heap, 1, &mut leaf);
    assert_finds(
        &check(&fv),
        &format!("block 1: free-space map {name}: room recorded on a page that is not a heap page"),
    );
    put_page(&fv, &heap, 1, &mut saved.clone());
    let mut torn = fsm::encode(&[1, 2, 3]);
    *torn.last_mut().unwrap() ^= 1;
    put(h, &torn);
    let crc = format!("free-space map {name}: CRC mismatch");
    one_problem(&check(&fv), Some(h), None, &crc);
    fv.remove(&base.join(&name)).unwrap();
    put(ix, &fsm::encode(&[1]));
    let btree = format!(
        "free-space map {}: a B-tree has no free-space map",
        fsm::file_name(ix.0)
    );
    one_problem(&check(&fv), Some(ix), None, &btree);
    fv.remove(&base.join(fsm::file_name(ix.0))).unwrap();
    put(RelFileId(99998), &fsm::encode(&[1]));
    let lone = "free-space map 99998_fsm: its relation file does not exist";
    one_problem(&check(&fv), Some(RelFileId(99998)), None, lone);
}

#[test]
fn an_unclean_directory_is_refused() {
    let fv = FaultVfs::new(FaultConfig::new(4));
    let vfs: Arc<dyn Vfs> = Arc::new(fv.clone());
    Storage::initdb(vfs.clone(), Path::new(DIR)).unwrap();
    let st = Storage::open(vfs.clone(), Path::new(DIR), StorageConfig::default()).unwrap();
    // Still running (control file says in production).
    let e = verify(vfs, Path::new(DIR)).unwrap_err();
    assert_eq!(e.sqlstate, SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
    drop(st);
}

/// A version whose `xmin` is below the control file's oldest xid names a transaction whose
/// status the store has forgotten (a freeze that never happened, or a control file from the
/// future): reported with its file and block, and so are the catalog's.
#[test]
fn an_xid_below_the_oldest_xid_is_reported() {
    let (fv, _, _) = database(20);
    let dir = Path::new(DIR);
    let mut ctl = walnut_storage::control::ControlFile::read(&fv, dir).unwrap();
    ctl.oldest_xid = walnut_common::Xid(ctl.next_xid.0);
    ctl.write(&fv, dir).unwrap();
    let r = check(&fv);
    assert_finds(&r, "block 0: tuple 1: xmin 3 is below the oldest xid");
    assert!(
        r.problems
            .iter()
            .any(|p| p.to_string().contains("base/1") || p.to_string().contains("catalog")),
        "the catalog's rows too:\n{r}"
    );
}
