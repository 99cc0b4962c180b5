//! The 8 KiB slotted page shared by heap and B-tree pages (after PostgreSQL's
//! `src/include/storage/bufpage.h`).
//!
//! ```text
//! offset  size  field
//!  0      8     page_lsn   end LSN of the last WAL record that changed the page
//!  8      4     checksum   CRC-32C of the page with this field zeroed (set on write-out)
//! 12      2     kind       0 = new (all zero), 1 = heap, 2 = B-tree, 3 = B-tree meta,
//!                          4 = sequence
//! 14      2     lower      end of the line-pointer array
//! 16      2     upper      start of item space (items grow down from `special`)
//! 18      2     special    start of the kind-specific trailer (BLCKSZ for heap pages)
//! 20      2     flags      bit 0: PD_HAS_FREE_LINES (an unused line pointer may exist)
//! 22      2     reserved   zero
//! 24      4*n   line pointers: u16 item offset, u16 item length
//!               (offset 0: no item; length 0 = unused, free for a new item; length 1 = dead)
//! ...           free space
//! upper..       items
//! special..     trailer
//! ```
//! Slots are 1-based in TIDs: line pointer `i` (0-based) is slot `i + 1`.
//! All integers are little-endian. Bytes read from disk are validated (`Page::check`) before
//! any accessor trusts `lower`/`upper`/`special`; accessors on a validated page then only index
//! within bounds they have checked.
//!
//! Assertions (on in release builds) guard what walnut itself writes: the header bounds
//! `PAGE_HEADER_SIZE <= lower <= upper <= special <= BLCKSZ` before and after every change, the
//! line-pointer index and the item's place before it is written, and the free-space arithmetic
//! after. A page read from disk (or restored from a full-page image) is never asserted on:
//! [`check`]/[`check_header`] turn what is wrong with it into a corruption error (XX001).

use walnut_common::{Error, Lsn, Result, BLCKSZ};

/// Size of the fixed page header, bytes.
pub const PAGE_HEADER_SIZE: usize = 24;
/// Size of one line pointer, bytes.
pub const LINE_POINTER_SIZE: usize = 4;
/// Size of a B-tree page's trailer (right link, left link, level, flags, reserved), bytes.
pub const BTREE_SPECIAL_SIZE: usize = 16;
/// Most line pointers a page can have (every item takes at least one byte of item space).
pub const MAX_LINE_POINTERS: usize = (BLCKSZ - PAGE_HEADER_SIZE) / (LINE_POINTER_SIZE + 1);

// Offsets and lengths are u16 fields, and `special` may be BLCKSZ itself.
const _: () = assert!(BLCKSZ <= u16::MAX as usize);
const _: () = assert!(BLCKSZ.is_multiple_of(4096));
// The line-pointer array starts right after the header, on a line-pointer boundary.
const _: () = assert!(PAGE_HEADER_SIZE.is_multiple_of(LINE_POINTER_SIZE));
// Every page kind has room for its header, its trailer, a line pointer and a (non-empty) item.
const _: () = assert!(PAGE_HEADER_SIZE + BTREE_SPECIAL_SIZE + LINE_POINTER_SIZE < BLCKSZ);
// Slots are 1-based u16s in TIDs and WAL records: the last one fits.
const _: () = assert!(MAX_LINE_POINTERS < u16::MAX as usize);

/// `flags` bit: the page may have an unused line pointer (PostgreSQL's `PD_HAS_FREE_LINES`), so
/// a new item looks for one before it grows the array. A hint: set by [`compact`] when it leaves
/// one, cleared by [`place_item`] when a search finds none.
pub const PD_HAS_FREE_LINES: u16 = 1;

/// Length field of a dead line pointer (offset 0): its item is gone but something may still
/// point at its slot (an index entry), so the slot is not reused (PostgreSQL's `LP_DEAD`).
pub const LP_DEAD_LEN: usize = 1;

/// Length-field bit of a redirect line pointer (offset 0): its item is gone, and the low 15
/// bits name the slot (1-based, on the same page) that an index lookup goes on to. A heap
/// chain's root becomes one when pruning removes it while newer versions of its row remain on
/// the page (PostgreSQL's `LP_REDIRECT`; storage DESIGN.md, "Same-page updates").
pub const LP_REDIRECT: usize = 0x8000;

// Slot numbers fit the low 15 bits.
const _: () = assert!(MAX_LINE_POINTERS < LP_REDIRECT);

/// Page kinds (the `kind` header field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum PageKind {
    /// An all-zero page that was never initialized (PostgreSQL's `PageIsNew`).
    New = 0,
    /// Heap page.
    Heap = 1,
    /// B-tree page (leaf or internal).
    BTree = 2,
    /// B-tree meta page (block 0 of an index).
    BTreeMeta = 3,
    /// A sequence's one page (`crate::seq`).
    Sequence = 4,
}

/// A page image: exactly `BLCKSZ` bytes.
pub type PageBuf = [u8; BLCKSZ];

/// A zeroed page on the heap (allocated zeroed, never built on the stack).
pub fn zeroed() -> Box<PageBuf> {
    vec![0u8; BLCKSZ]
        .into_boxed_slice()
        .try_into()
        .expect("BLCKSZ bytes")
}

/// A copy of `p` on the heap: what a write-out or a WAL record takes of a pinned page.
pub fn boxed_copy(p: &PageBuf) -> Box<PageBuf> {
    let mut c = zeroed();
    c.copy_from_slice(p);
    c
}

fn rd16(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}
fn wr16(p: &mut [u8], at: usize, v: u16) {
    p[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// (lower, upper, special).
fn bounds(p: &PageBuf) -> (usize, usize, usize) {
    (
        rd16(p, 14) as usize,
        rd16(p, 16) as usize,
        rd16(p, 18) as usize,
    )
}

/// Asserts the header bounds of an initialized page in memory (one that walnut built, or that
/// passed [`check_header`] when it was read). O(1).
#[inline]
fn assert_bounds(p: &PageBuf) {
    let (lower, upper, special) = bounds(p);
    assert!(
        PAGE_HEADER_SIZE <= lower && lower <= upper && upper <= special && special <= BLCKSZ,
        "page header bounds broken: lower {lower}, upper {upper}, special {special}"
    );
    assert!(
        (lower - PAGE_HEADER_SIZE).is_multiple_of(LINE_POINTER_SIZE),
        "page lower {lower} is not at a line-pointer boundary"
    );
}

/// Page LSN.
pub fn lsn(p: &PageBuf) -> Lsn {
    Lsn(u64::from_le_bytes(p[0..8].try_into().expect("8 bytes")))
}

/// Sets the page LSN (step 6 of the write protocol: after the WAL record is inserted).
pub fn set_lsn(p: &mut PageBuf, lsn: Lsn) {
    p[0..8].copy_from_slice(&lsn.0.to_le_bytes());
}

/// Page kind, or `None` if the field holds an unknown value.
pub fn kind(p: &PageBuf) -> Option<PageKind> {
    Some(match rd16(p, 12) {
        0 => PageKind::New,
        1 => PageKind::Heap,
        2 => PageKind::BTree,
        3 => PageKind::BTreeMeta,
        4 => PageKind::Sequence,
        _ => return None,
    })
}

/// True for an all-zero (never initialized) page.
pub fn is_new(p: &PageBuf) -> bool {
    rd16(p, 12) == 0 && rd16(p, 18) == 0
}

/// Initializes an empty page of `kind` with `special_size` bytes of trailer.
pub fn init(p: &mut PageBuf, kind: PageKind, special_size: usize) {
    assert!(kind != PageKind::New, "init of a page as kind New");
    assert!(
        special_size <= BLCKSZ - PAGE_HEADER_SIZE,
        "trailer of {special_size} bytes does not fit a page"
    );
    p.fill(0);
    wr16(p, 12, kind as u16);
    wr16(p, 14, PAGE_HEADER_SIZE as u16);
    let special = (BLCKSZ - special_size) as u16;
    wr16(p, 16, special);
    wr16(p, 18, special);
    assert_bounds(p);
}

/// Computes the checksum of a page image (CRC-32C with the checksum field taken as zero).
pub fn compute_checksum(p: &PageBuf) -> u32 {
    let c = walnut_common::crc32c(&p[0..8]);
    let c = walnut_common::crc32c_append(c, &[0u8; 4]);
    walnut_common::crc32c_append(c, &p[12..])
}

/// Stores the checksum (done on every write-out).
pub fn set_checksum(p: &mut PageBuf) {
    let c = compute_checksum(p);
    p[8..12].copy_from_slice(&c.to_le_bytes());
}

/// Validates a page read from disk: an all-zero page is accepted as new; otherwise the
/// checksum must match and the header fields must be consistent.
///
/// # Errors
/// A corruption error naming what is wrong.
pub fn check(p: &PageBuf) -> Result<()> {
    if p.iter().all(|&b| b == 0) {
        return Ok(());
    }
    let stored = u32::from_le_bytes(p[8..12].try_into().expect("4 bytes"));
    let computed = compute_checksum(p);
    if stored != computed {
        return Err(Error::corruption(format!(
            "page verification failed, calculated checksum {computed:08X} but expected {stored:08X}"
        )));
    }
    check_header(p)
}

/// Validates header consistency without the checksum (used on full-page images from WAL,
/// whose CRC was already checked).
///
/// # Errors
/// A corruption error.
pub fn check_header(p: &PageBuf) -> Result<()> {
    let (lower, upper, special) = bounds(p);
    // The trailer each kind has: accessors of the trailer (B-tree links, level) index from
    // `special` and rely on it. An initialized page is never of kind New (an all-zero page,
    // the only New one, does not get here from `check`).
    let special_want = match kind(p) {
        Some(PageKind::Heap | PageKind::BTreeMeta) => Some(BLCKSZ),
        Some(PageKind::BTree) => Some(BLCKSZ - BTREE_SPECIAL_SIZE),
        Some(PageKind::Sequence) => Some(BLCKSZ - 8),
        Some(PageKind::New) | None => None,
    };
    if special_want != Some(special) {
        return Err(Error::corruption(format!(
            "page header is corrupt: kind {}, special {special}",
            rd16(p, 12)
        )));
    }
    if lower < PAGE_HEADER_SIZE
        || !(lower - PAGE_HEADER_SIZE).is_multiple_of(LINE_POINTER_SIZE)
        || lower > upper
        || upper > special
        || special > BLCKSZ
    {
        return Err(Error::corruption(format!(
            "page header is corrupt: lower {lower}, upper {upper}, special {special}"
        )));
    }
    for i in 0..slot_count(p) {
        let (off, len) = line_pointer(p, i);
        let bad_redirect = off == 0
            && len > LP_DEAD_LEN
            && (len & LP_REDIRECT == 0
                || !(1..=slot_count(p)).contains(&(len & !LP_REDIRECT))
                || len & !LP_REDIRECT == i + 1);
        if (off != 0 && (off < upper || off + len > special)) || bad_redirect {
            return Err(Error::corruption(format!(
                "line pointer {i} is corrupt: offset {off}, length {len}"
            )));
        }
    }
    Ok(())
}

/// Number of line pointers.
pub fn slot_count(p: &PageBuf) -> usize {
    (rd16(p, 14) as usize).saturating_sub(PAGE_HEADER_SIZE) / LINE_POINTER_SIZE
}

/// (offset, length) of line pointer `i` (0-based).
pub fn line_pointer(p: &PageBuf, i: usize) -> (usize, usize) {
    let at = PAGE_HEADER_SIZE + i * LINE_POINTER_SIZE;
    (rd16(p, at) as usize, rd16(p, at + 2) as usize)
}

/// Writes line pointer `i`; the caller is about to make it slot `i` of the array (so `lower`
/// already covers it or is about to).
fn set_line_pointer(p: &mut PageBuf, i: usize, off: usize, len: usize) {
    let (_, _, special) = bounds(p);
    assert!(
        i < MAX_LINE_POINTERS,
        "line pointer index {i} beyond {MAX_LINE_POINTERS}"
    );
    let at = PAGE_HEADER_SIZE + i * LINE_POINTER_SIZE;
    // The item lies after the line-pointer array it belongs to and before the trailer.
    assert!(
        at + LINE_POINTER_SIZE <= off && len > 0 && off + len <= special,
        "item at {off} of {len} bytes is outside the item space of line pointer {i} (special {special})"
    );
    wr16(p, at, off as u16);
    wr16(p, at + 2, len as u16);
}

/// Item bytes of line pointer `i`, or `None` if unused or out of range.
pub fn item(p: &PageBuf, i: usize) -> Option<&[u8]> {
    if i >= slot_count(p) {
        return None;
    }
    let (off, len) = line_pointer(p, i);
    if off == 0 {
        return None;
    }
    p.get(off..off + len)
}

/// Mutable item bytes of line pointer `i`.
pub fn item_mut(p: &mut PageBuf, i: usize) -> Option<&mut [u8]> {
    if i >= slot_count(p) {
        return None;
    }
    let (off, len) = line_pointer(p, i);
    if off == 0 {
        return None;
    }
    p.get_mut(off..off + len)
}

/// True if line pointer `i` exists and is unused (offset 0, length 0): free for a new item.
pub fn is_unused(p: &PageBuf, i: usize) -> bool {
    i < slot_count(p) && line_pointer(p, i) == (0, 0)
}

/// True if line pointer `i` exists and is dead (offset 0, length [`LP_DEAD_LEN`]).
pub fn is_dead(p: &PageBuf, i: usize) -> bool {
    i < slot_count(p) && line_pointer(p, i) == (0, LP_DEAD_LEN)
}

/// The line-pointer index (0-based) that redirect line pointer `i` names, or `None` if `i` is
/// not a redirect.
pub fn redirect_target(p: &PageBuf, i: usize) -> Option<usize> {
    if i >= slot_count(p) {
        return None;
    }
    match line_pointer(p, i) {
        (0, len) if len & LP_REDIRECT != 0 => (len & !LP_REDIRECT).checked_sub(1),
        _ => None,
    }
}

/// Makes line pointer `i`, which holds an item or is a redirect, a redirect to line pointer
/// `target` (0-based; another one that holds an item). The item's bytes stay until
/// [`compact`].
pub fn set_redirect(p: &mut PageBuf, i: usize, target: usize) {
    assert!(
        item(p, i).is_some() || redirect_target(p, i).is_some(),
        "line pointer {i} made a redirect holds no item and is no redirect"
    );
    assert!(
        target != i && item(p, target).is_some(),
        "redirect of line pointer {i} to {target}, which holds no item"
    );
    let at = PAGE_HEADER_SIZE + i * LINE_POINTER_SIZE;
    wr16(p, at, 0);
    wr16(p, at + 2, (LP_REDIRECT | (target + 1)) as u16);
}

/// Marks line pointer `i`, which holds an item or is a redirect, dead (the item's bytes stay
/// until [`compact`]).
pub fn set_dead(p: &mut PageBuf, i: usize) {
    assert!(
        item(p, i).is_some() || redirect_target(p, i).is_some(),
        "line pointer {i} marked dead holds no item and is no redirect"
    );
    let at = PAGE_HEADER_SIZE + i * LINE_POINTER_SIZE;
    wr16(p, at, 0);
    wr16(p, at + 2, LP_DEAD_LEN as u16);
}

/// Marks line pointer `i`, which holds an item or is a redirect, unused (the bytes stay until
/// [`compact`]).
pub fn set_unused(p: &mut PageBuf, i: usize) {
    assert!(
        item(p, i).is_some() || redirect_target(p, i).is_some(),
        "line pointer {i} marked unused holds no item and is no redirect"
    );
    let at = PAGE_HEADER_SIZE + i * LINE_POINTER_SIZE;
    wr16(p, at, 0);
    wr16(p, at + 2, 0);
}

/// Marks dead line pointer `i` unused (VACUUM, once nothing points at its slot any more); it
/// is free for a new item after [`compact`] sets [`PD_HAS_FREE_LINES`].
pub fn set_dead_unused(p: &mut PageBuf, i: usize) {
    assert!(is_dead(p, i), "line pointer {i} made unused is not dead");
    let at = PAGE_HEADER_SIZE + i * LINE_POINTER_SIZE;
    wr16(p, at + 2, 0);
}

/// Removes the items at line pointers `idxs` (ascending, distinct, each holding an item) from
/// the line-pointer array, shifting the later ones down so that the others keep their order,
/// then compacts (PostgreSQL's `PageIndexMultiDelete`; B-tree pages, whose order is their
/// line-pointer order). Deterministic: redo repeats it byte for byte.
pub fn delete_items(p: &mut PageBuf, idxs: &[usize]) {
    assert_bounds(p);
    assert!(
        idxs.windows(2).all(|w| w[0] < w[1]),
        "line pointers to delete are not ascending: {idxs:?}"
    );
    let n = slot_count(p);
    let kept: Vec<(usize, usize)> = (0..n)
        .filter(|i| idxs.binary_search(i).is_err())
        .map(|i| line_pointer(p, i))
        .collect();
    for &i in idxs {
        assert!(
            item(p, i).is_some(),
            "line pointer {i} deleted holds no item"
        );
    }
    for (k, &(off, len)) in kept.iter().enumerate() {
        let at = PAGE_HEADER_SIZE + k * LINE_POINTER_SIZE;
        wr16(p, at, off as u16);
        wr16(p, at + 2, len as u16);
    }
    let lower = PAGE_HEADER_SIZE + kept.len() * LINE_POINTER_SIZE;
    p[lower..PAGE_HEADER_SIZE + n * LINE_POINTER_SIZE].fill(0);
    wr16(p, 14, lower as u16);
    compact(p);
    assert_eq!(
        slot_count(p),
        n - idxs.len(),
        "line pointers after a delete"
    );
}

fn flags(p: &PageBuf) -> u16 {
    rd16(p, 20)
}

fn set_flag(p: &mut PageBuf, bit: u16, on: bool) {
    let f = flags(p);
    wr16(p, 20, if on { f | bit } else { f & !bit });
}

/// Repacks a page's items against its trailer, in line-pointer order, so that the space of
/// items removed by [`set_dead`]/[`set_unused`] becomes free space; drops unused line pointers
/// at the end of the array and zeroes the free space (PostgreSQL's `PageRepairFragmentation`
/// and `PageTruncateLinePointerArray`). Deterministic: redo repeats it byte for byte.
pub fn compact(p: &mut PageBuf) {
    assert_bounds(p);
    let (_, upper, special) = bounds(p);
    let mut n = slot_count(p);
    while n > 0 && line_pointer(p, n - 1) == (0, 0) {
        n -= 1;
    }
    let lower = PAGE_HEADER_SIZE + n * LINE_POINTER_SIZE;
    let items: Vec<u8> = p[upper..special].to_vec();
    let mut at = special;
    let mut any_unused = false;
    for i in 0..n {
        let (off, len) = line_pointer(p, i);
        if off == 0 {
            any_unused |= len == 0;
            continue;
        }
        at -= len;
        p[at..at + len].copy_from_slice(&items[off - upper..off - upper + len]);
        set_line_pointer(p, i, at, len);
    }
    assert!(
        lower <= at,
        "compacted items at {at} overlap line pointers ending at {lower}"
    );
    p[lower..at].fill(0);
    wr16(p, 14, lower as u16);
    wr16(p, 16, at as u16);
    set_flag(p, PD_HAS_FREE_LINES, any_unused);
    assert_bounds(p);
}

/// Adds an item, into the first unused line pointer if the page has one, else at the end of the
/// array (PostgreSQL's `PageAddItem` without a given offset). Returns its 0-based index. The
/// caller checked [`fits`] (which counts a new line pointer, so the check does not depend on
/// whether one is reused).
pub fn place_item(p: &mut PageBuf, data: &[u8]) -> usize {
    let i = if flags(p) & PD_HAS_FREE_LINES != 0 {
        (0..slot_count(p))
            .find(|&i| line_pointer(p, i) == (0, 0))
            .unwrap_or(slot_count(p))
    } else {
        slot_count(p)
    };
    put_item(p, i, data);
    i
}

/// Puts an item at line pointer `i`, which is unused or the next one past the array, as
/// [`place_item`] chose it (its redo): appending clears [`PD_HAS_FREE_LINES`], which
/// [`place_item`] appends only when no unused line pointer is left, so that redo leaves the
/// same bytes.
pub fn put_item(p: &mut PageBuf, i: usize, data: &[u8]) {
    if i < slot_count(p) {
        add_item_at_unused(p, i, data);
    } else {
        append_item(p, data);
        set_flag(p, PD_HAS_FREE_LINES, false);
    }
}

/// Puts an item into unused line pointer `i`.
fn add_item_at_unused(p: &mut PageBuf, i: usize, data: &[u8]) {
    assert_bounds(p);
    assert!(is_unused(p, i), "line pointer {i} is not unused");
    assert!(!data.is_empty(), "empty item");
    let (lower, upper, _) = bounds(p);
    assert!(
        upper - lower >= data.len(),
        "item of {} bytes does not fit",
        data.len()
    );
    let at = upper - data.len();
    p[at..upper].copy_from_slice(data);
    set_line_pointer(p, i, at, data.len());
    wr16(p, 16, at as u16);
    assert_bounds(p);
}

/// Free bytes between the line pointers and the items (0 for a new, all-zero page).
pub fn free_space(p: &PageBuf) -> usize {
    let (lower, upper, _) = bounds(p);
    // Holds for every page in memory: validated on read (`check_header`), kept by `add_item`.
    assert!(lower <= upper, "page lower {lower} above upper {upper}");
    upper - lower
}

/// Start of the trailer.
pub fn special_offset(p: &PageBuf) -> usize {
    rd16(p, 18) as usize
}

/// True if an item of `len` bytes plus a new line pointer fits.
pub fn fits(p: &PageBuf, len: usize) -> bool {
    free_space(p) >= len + LINE_POINTER_SIZE
}

/// Adds an item at line pointer index `pos` (0-based), shifting later line pointers up
/// (B-tree order) when `pos < slot_count`. Returns `pos`.
///
/// The caller checked [`fits`]; adding to a full page is a bug (asserted).
pub fn add_item(p: &mut PageBuf, pos: usize, data: &[u8]) -> usize {
    assert_bounds(p);
    let (lower, upper, special) = bounds(p);
    let n = (lower - PAGE_HEADER_SIZE) / LINE_POINTER_SIZE;
    assert!(pos <= n, "line pointer index {pos} beyond {n}");
    assert!(!data.is_empty(), "empty item");
    assert!(
        upper - lower >= data.len() + LINE_POINTER_SIZE,
        "item of {} bytes does not fit",
        data.len()
    );
    // The free-space arithmetic: the grown line-pointer array ends at or before the new item.
    let (lower_new, upper_new) = (lower + LINE_POINTER_SIZE, upper - data.len());
    assert!(
        lower_new <= upper_new,
        "item at {upper_new} overlaps line pointer {n}"
    );
    p[upper_new..upper].copy_from_slice(data);
    if pos < n {
        let from = PAGE_HEADER_SIZE + pos * LINE_POINTER_SIZE;
        p.copy_within(from..lower, from + LINE_POINTER_SIZE);
    }
    set_line_pointer(p, pos, upper_new, data.len());
    wr16(p, 16, upper_new as u16);
    wr16(p, 14, lower_new as u16);
    // Read back what was written: the header (so its bounds hold) and the new line pointer.
    assert_eq!(
        bounds(p),
        (lower_new, upper_new, special),
        "page header after adding an item"
    );
    assert_eq!(
        line_pointer(p, pos),
        (upper_new, data.len()),
        "line pointer {pos} after adding it"
    );
    pos
}

/// Appends an item after the last line pointer; returns its 0-based index.
pub fn append_item(p: &mut PageBuf, data: &[u8]) -> usize {
    let n = slot_count(p);
    add_item(p, n, data)
}

/// Total bytes of items plus line pointers in use (for split decisions).
pub fn used_space(p: &PageBuf) -> usize {
    let (_, upper, special) = bounds(p);
    assert!(
        upper <= special,
        "page upper {upper} above special {special}"
    );
    (special - upper) + slot_count(p) * LINE_POINTER_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trip() {
        let mut p = [0u8; BLCKSZ];
        assert!(is_new(&p));
        check(&p).unwrap();
        init(&mut p, PageKind::Heap, 0);
        assert_eq!(free_space(&p), BLCKSZ - PAGE_HEADER_SIZE);
        add_item(&mut p, 0, b"first");
        add_item(&mut p, 1, b"third");
        add_item(&mut p, 1, b"second");
        assert_eq!(item(&p, 0).unwrap(), b"first");
        assert_eq!(item(&p, 1).unwrap(), b"second");
        assert_eq!(item(&p, 2).unwrap(), b"third");
        assert_eq!(item(&p, 3), None);
        set_lsn(&mut p, Lsn(1234));
        set_checksum(&mut p);
        check(&p).unwrap();
        assert_eq!(lsn(&p), Lsn(1234));
        p[5000] ^= 1;
        assert!(check(&p).is_err(), "a flipped bit must fail the checksum");
    }

    #[test]
    fn fills_up_exactly() {
        let mut p = [0u8; BLCKSZ];
        // A page with a 16-byte trailer: B-tree pages have one (heap pages have none).
        init(&mut p, PageKind::BTree, BTREE_SPECIAL_SIZE);
        let mut n = 0;
        while fits(&p, 100) {
            add_item(&mut p, n, &[7u8; 100]);
            n += 1;
        }
        assert_eq!(n, (BLCKSZ - PAGE_HEADER_SIZE - 16) / 104);
        set_checksum(&mut p);
        check(&p).unwrap();
    }

    fn heap_page_with(items: &[&[u8]]) -> PageBuf {
        let mut p = [0u8; BLCKSZ];
        init(&mut p, PageKind::Heap, 0);
        for it in items {
            append_item(&mut p, it);
        }
        p
    }

    #[test]
    fn compaction_frees_removed_items_and_new_items_reuse_unused_line_pointers() {
        let items: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 100 + i as usize]).collect();
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let mut p = heap_page_with(&refs);
        let full = free_space(&p);
        set_unused(&mut p, 1);
        set_dead(&mut p, 3);
        set_unused(&mut p, 5); // the last: the array shrinks by it
        compact(&mut p);
        assert_eq!(slot_count(&p), 5);
        assert_eq!(free_space(&p), full + 101 + 103 + 105 + LINE_POINTER_SIZE);
        for i in [0, 2, 4] {
            assert_eq!(
                item(&p, i),
                Some(&items[i][..]),
                "item {i} kept, at its slot"
            );
        }
        assert!(is_unused(&p, 1) && is_dead(&p, 3) && item(&p, 3).is_none());
        check_header(&p).unwrap();
        // A new item takes the unused line pointer; the next one appends.
        assert_eq!(place_item(&mut p, b"new"), 1);
        assert_eq!(place_item(&mut p, b"newer"), 5);
        assert_eq!(item(&p, 1), Some(&b"new"[..]));
        // Redo puts an item into the same unused line pointer, byte for byte.
        let mut q = heap_page_with(&refs);
        set_unused(&mut q, 1);
        set_dead(&mut q, 3);
        set_unused(&mut q, 5);
        compact(&mut q);
        put_item(&mut q, 1, b"new");
        put_item(&mut q, 5, b"newer");
        assert!(p[..] == q[..], "redo's page differs");
        // A dead line pointer with a length other than 1 is corruption on disk.
        let at = PAGE_HEADER_SIZE + 3 * LINE_POINTER_SIZE + 2;
        wr16(&mut q, at, 2);
        assert!(check_header(&q).is_err());
    }

    #[test]
    fn deleted_items_leave_the_others_in_order_and_a_dead_one_becomes_unused() {
        let items: Vec<Vec<u8>> = (0..6u8).map(|i| vec![b'a' + i; 3 + i as usize]).collect();
        let refs: Vec<&[u8]> = items.iter().map(|v| v.as_slice()).collect();
        let mut p = heap_page_with(&refs);
        let free = free_space(&p);
        delete_items(&mut p, &[1, 4]);
        assert_eq!(slot_count(&p), 4);
        for (k, i) in [0, 2, 3, 5].into_iter().enumerate() {
            assert_eq!(item(&p, k), Some(&items[i][..]));
        }
        assert_eq!(free_space(&p), free + 4 + 7 + 2 * LINE_POINTER_SIZE);
        check_header(&p).unwrap();
        // VACUUM: a dead line pointer made unused is reused by the next item.
        set_dead(&mut p, 1);
        compact(&mut p);
        set_dead_unused(&mut p, 1);
        compact(&mut p);
        assert!(is_unused(&p, 1));
        assert_eq!(place_item(&mut p, b"new"), 1);
        // The last line pointer made unused is dropped from the array.
        set_dead(&mut p, 3);
        set_dead_unused(&mut p, 3);
        compact(&mut p);
        assert_eq!(slot_count(&p), 3);
    }

    #[test]
    #[should_panic(expected = "is not dead")]
    fn making_a_live_line_pointer_unused_through_vacuum_panics() {
        let mut p = heap_page_with(&[b"one"]);
        set_dead_unused(&mut p, 0);
    }

    // The assertions fire when what walnut is about to write breaks the page's invariants.

    #[test]
    #[should_panic(expected = "line pointer index 3 beyond 1")]
    fn adding_past_the_line_pointer_array_panics() {
        let mut p = heap_page_with(&[b"one"]);
        add_item(&mut p, 3, b"two");
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn adding_to_a_full_page_panics() {
        let mut p = heap_page_with(&[&[1u8; BLCKSZ - PAGE_HEADER_SIZE - 2 * LINE_POINTER_SIZE]]);
        add_item(&mut p, 1, b"x");
    }

    #[test]
    #[should_panic(expected = "empty item")]
    fn adding_an_empty_item_panics() {
        let mut p = heap_page_with(&[]);
        add_item(&mut p, 0, b"");
    }

    #[test]
    #[should_panic(expected = "page header bounds broken: lower 8192, upper 8189")]
    fn a_broken_header_in_memory_panics_before_a_write() {
        let mut p = heap_page_with(&[b"one"]);
        wr16(&mut p, 14, 8192); // lower above upper: a bug elsewhere scribbled on the header
        add_item(&mut p, 1, b"two");
    }

    #[test]
    #[should_panic(expected = "page lower 8192 above upper 8189")]
    fn free_space_of_a_broken_header_panics() {
        let mut p = heap_page_with(&[b"one"]);
        wr16(&mut p, 14, 8192);
        free_space(&p);
    }

    #[test]
    #[should_panic(expected = "is outside the item space of line pointer 0")]
    fn a_line_pointer_past_the_trailer_panics() {
        let mut p = [0u8; BLCKSZ];
        init(&mut p, PageKind::BTree, BTREE_SPECIAL_SIZE);
        set_line_pointer(&mut p, 0, BLCKSZ - BTREE_SPECIAL_SIZE - 4, 8);
    }

    #[test]
    #[should_panic(expected = "is outside the item space of line pointer 2")]
    fn a_line_pointer_over_the_line_pointer_array_panics() {
        let mut p = heap_page_with(&[b"one", b"two"]);
        set_line_pointer(&mut p, 2, PAGE_HEADER_SIZE + 8, 4);
    }

    #[test]
    #[should_panic(expected = "trailer of 8192 bytes does not fit a page")]
    fn a_trailer_larger_than_the_page_panics() {
        let mut p = [0u8; BLCKSZ];
        init(&mut p, PageKind::Heap, BLCKSZ);
    }

    // A page read from disk is never asserted on: it passes `check` or gets XX001.

    #[test]
    fn a_damaged_page_with_a_valid_checksum_is_a_corruption_error() {
        type Damage = fn(&mut PageBuf);
        let cases: [(&str, Damage); 8] = [
            ("a B-tree page without its trailer", |p| {
                wr16(p, 12, PageKind::BTree as u16)
            }),
            ("a heap page with a trailer", |p| {
                wr16(p, 18, (BLCKSZ - BTREE_SPECIAL_SIZE) as u16)
            }),
            ("an initialized page of kind New", |p| wr16(p, 12, 0)),
            ("an unknown kind", |p| wr16(p, 12, 9)),
            ("lower above upper", |p| wr16(p, 14, 8184)),
            ("lower inside the header", |p| wr16(p, 14, 20)),
            ("lower between line pointers", |p| wr16(p, 14, 30)),
            ("an item past the end of the page", |p| {
                wr16(p, PAGE_HEADER_SIZE + 2, 1000)
            }),
        ];
        for (what, damage) in cases {
            let mut p = heap_page_with(&[b"first item", b"second item"]);
            damage(&mut p);
            set_checksum(&mut p);
            let e = check(&p).expect_err(what);
            assert_eq!(e.sqlstate.0, "XX001", "{what}: {e}");
            let e = check_header(&p).expect_err(what);
            assert_eq!(e.sqlstate.0, "XX001", "{what}: {e}");
        }
        // The undamaged page passes.
        let mut p = heap_page_with(&[b"first item", b"second item"]);
        set_checksum(&mut p);
        check(&p).unwrap();
    }
}
