//! The free-space map of a heap: for each page, how much room it had when last looked at, so
//! that an insert that finds the relation's insert target full can reuse a page VACUUM freed
//! before it extends the relation (PostgreSQL's `freespace.c`; DESIGN.md, "Free-space map").
//!
//! As in PostgreSQL, free space is kept in categories of 32 bytes (one byte per page: 255 is
//! 8160 bytes or more), and the map is a hint: a page may have less room than its entry says
//! (an insert filled it since), so whoever takes a page from it checks the page itself and
//! records what it found. Like PostgreSQL's, nothing of it is logged; unlike PostgreSQL's
//! FSM fork, which goes through the buffer pool, walnut keeps it in memory and writes the maps
//! that changed to `base/<relfile>_fsm` at each checkpoint ([`encode`], [`decode`]; the
//! storage manager loads one when it opens the relation). Redo of pruning and vacuum records
//! records the pages' room, so a standby and crash recovery keep the map too.
//!
//! # The file, byte by byte (little-endian)
//! ```text
//!  0 u32  magic 0x4d534657 ("WFSM")
//!  4 u16  format version (1)
//!  6 u16  zero
//!  8 u32  n: entries that follow (blocks 0 .. n; later blocks have none)
//! 12 u32  crc32c of bytes 0..12 and of the n entries
//! 16 u8 × n  each block's category
//! ```
//!
//! The map is a max-tree over the categories (PostgreSQL's FSM pages are the same, over a page
//! each): a search for a category descends to the leftmost page that has it, in O(log pages).

use parking_lot::Mutex;
use walnut_common::{BlockNumber, Error, Result};

/// The first four bytes of a map file ("WFSM", little-endian).
pub const FSM_MAGIC: u32 = 0x4d53_4657;
/// The map file's format version.
pub const FSM_VERSION: u16 = 1;
/// Bytes before the entries.
const FSM_HEADER: usize = 16;

/// Bytes per category.
pub const CATEGORY_BYTES: usize = 32;

/// The category of a page with `free` bytes of room (rounded down: the page has at least
/// `category × 32` bytes).
pub fn category(free: usize) -> u8 {
    (free / CATEGORY_BYTES).min(255) as u8
}

/// The category a page needs to have room for `need` bytes (rounded up).
fn needed(need: usize) -> u8 {
    need.div_ceil(CATEGORY_BYTES).min(255) as u8
}

/// One relation's map.
#[derive(Debug, Default)]
pub struct FreeSpaceMap {
    tree: Mutex<Tree>,
}

/// A max-tree over a power-of-two number of leaves: `nodes[1]` is the root, the children of
/// node `i` are `2i` and `2i + 1`, and leaf `b` (block `b`) is `nodes[leaves + b]`.
#[derive(Debug, Default)]
struct Tree {
    leaves: usize,
    nodes: Vec<u8>,
    /// A leaf changed since [`FreeSpaceMap::take_changed`] last took the map.
    changed: bool,
}

impl Tree {
    fn grow_to(&mut self, block: usize) {
        if block < self.leaves {
            return;
        }
        let leaves = (block + 1).next_power_of_two().max(64);
        let mut nodes = vec![0u8; 2 * leaves];
        nodes[leaves..leaves + self.leaves].copy_from_slice(&self.nodes[self.leaves..]);
        for i in (1..leaves).rev() {
            nodes[i] = nodes[2 * i].max(nodes[2 * i + 1]);
        }
        self.leaves = leaves;
        self.nodes = nodes;
    }

    fn set(&mut self, block: usize, cat: u8) {
        self.grow_to(block);
        let mut i = self.leaves + block;
        if self.nodes[i] == cat {
            return;
        }
        self.changed = true;
        self.nodes[i] = cat;
        while i > 1 {
            i /= 2;
            let m = self.nodes[2 * i].max(self.nodes[2 * i + 1]);
            if self.nodes[i] == m {
                break;
            }
            self.nodes[i] = m;
        }
    }

    /// The leftmost leaf at or after `from` with a category of `cat` or more, in the subtree
    /// of node `i`, which covers leaves `lo .. lo + width`.
    fn find(&self, i: usize, lo: usize, width: usize, from: usize, cat: u8) -> Option<usize> {
        if self.nodes[i] < cat || lo + width <= from {
            return None;
        }
        if width == 1 {
            return Some(lo);
        }
        let half = width / 2;
        self.find(2 * i, lo, half, from, cat)
            .or_else(|| self.find(2 * i + 1, lo + half, half, from, cat))
    }
}

impl FreeSpaceMap {
    /// Records that block `block` has `free` bytes of room.
    pub fn record(&self, block: BlockNumber, free: usize) {
        let cat = category(free);
        let mut t = self.tree.lock();
        if cat == 0 && block.0 as usize >= t.leaves {
            return; // nothing to remember, and no need to grow
        }
        t.set(block.0 as usize, cat);
    }

    /// The first block, other than `avoid`, whose entry says it has room for `need` bytes;
    /// `None` also when `need` is more than the highest category promises (255 × 32 bytes: a
    /// new page is the only sure place for it).
    pub fn search(&self, need: usize, avoid: Option<BlockNumber>) -> Option<BlockNumber> {
        let t = self.tree.lock();
        if t.leaves == 0 || need > 255 * CATEGORY_BYTES {
            return None;
        }
        let cat = needed(need).max(1);
        let first = t.find(1, 0, t.leaves, 0, cat)?;
        match avoid {
            Some(a) if a.0 as usize == first => t.find(1, 0, t.leaves, first + 1, cat),
            _ => Some(first),
        }
        .map(|b| BlockNumber(b as u32))
    }

    /// Forgets every block at or after `from` (VACUUM truncated them away).
    pub fn forget_from(&self, from: BlockNumber) {
        let mut t = self.tree.lock();
        for b in from.0 as usize..t.leaves {
            t.set(b, 0);
        }
    }

    /// The categories of blocks `0 .. nblocks` (no trailing zeros) if any changed since the
    /// last call, and marks the map unchanged; `None` if nothing changed. The checkpoint
    /// writes what it returns ([`encode`]) and calls [`FreeSpaceMap::mark_changed`] if the
    /// write fails.
    pub fn take_changed(&self, nblocks: u32) -> Option<Vec<u8>> {
        let mut t = self.tree.lock();
        if !t.changed {
            return None;
        }
        t.changed = false;
        let n = t.leaves.min(nblocks as usize);
        let leaves = &t.nodes[t.leaves..t.leaves + n];
        let used = leaves.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
        Some(leaves[..used].to_vec())
    }

    /// Marks the map changed, so that the next checkpoint writes it (after a failed write).
    pub fn mark_changed(&self) {
        self.tree.lock().changed = true;
    }

    /// Sets the entries of blocks `0 .. cats.len()` from a map file's categories (the
    /// relation's first open), leaving the map unchanged as far as the checkpoint goes.
    pub fn load(&self, cats: &[u8]) {
        let mut t = self.tree.lock();
        for (b, &c) in cats.iter().enumerate() {
            if c != 0 {
                t.set(b, c);
            }
        }
        t.changed = false;
    }

    /// The room block `block`'s entry records, bytes (a multiple of [`CATEGORY_BYTES`]).
    pub fn recorded(&self, block: BlockNumber) -> usize {
        let t = self.tree.lock();
        let b = block.0 as usize;
        if b < t.leaves {
            t.nodes[t.leaves + b] as usize * CATEGORY_BYTES
        } else {
            0
        }
    }
}

/// The name of relation file `relfile`'s map file in `base` (PostgreSQL's FSM fork has the
/// same suffix).
pub fn file_name(relfile: u32) -> String {
    format!("{relfile}_fsm")
}

/// The relation file a map file's name belongs to: `Some(n)` for `"<n>_fsm"`.
pub fn relfile_of(name: &str) -> Option<u32> {
    name.strip_suffix("_fsm")?.parse().ok()
}

/// A map file holding categories `cats` (one byte per block from block 0; the format is in
/// the module documentation).
pub fn encode(cats: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(FSM_HEADER + cats.len());
    b.extend_from_slice(&FSM_MAGIC.to_le_bytes());
    b.extend_from_slice(&FSM_VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&(cats.len() as u32).to_le_bytes());
    let crc = walnut_common::crc32c_append(walnut_common::crc32c(&b), cats);
    b.extend_from_slice(&crc.to_le_bytes());
    b.extend_from_slice(cats);
    b
}

/// The categories a map file holds.
///
/// # Errors
/// Corruption (XX001) if the file is shorter than its header says, has another magic number
/// or version, or fails its CRC.
pub fn decode(b: &[u8]) -> Result<Vec<u8>> {
    let word = |at: usize| {
        b.get(at..at + 4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    };
    if b.len() < FSM_HEADER || word(0) != Some(FSM_MAGIC) {
        return Err(Error::corruption("no valid header"));
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if version != FSM_VERSION {
        return Err(Error::corruption(format!(
            "format version {version}, expected {FSM_VERSION}"
        )));
    }
    let n = word(8).unwrap_or(0) as usize;
    let cats = &b[FSM_HEADER..];
    if cats.len() != n {
        return Err(Error::corruption(format!(
            "{} entries, the header says {n}",
            cats.len()
        )));
    }
    if walnut_common::crc32c_append(walnut_common::crc32c(&b[..12]), cats) != word(12).unwrap_or(0)
    {
        return Err(Error::corruption("CRC mismatch"));
    }
    Ok(cats.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a plain vector of categories: every search finds the leftmost block with
        /// room, other than the one to avoid.
        #[test]
        fn search_finds_the_leftmost_page_with_room(
            ops in proptest::collection::vec((0u32..300, 0usize..8192), 1..200),
            probes in proptest::collection::vec((0usize..8200, proptest::option::of(0u32..300)), 1..50),
        ) {
            let fsm = FreeSpaceMap::default();
            let mut model = vec![0u8; 300];
            for (b, free) in ops {
                fsm.record(BlockNumber(b), free);
                model[b as usize] = category(free);
            }
            for (need, avoid) in probes {
                let cat = needed(need).max(1);
                let want = (0..300u32)
                    .find(|&b| model[b as usize] >= cat && Some(b) != avoid)
                    .filter(|_| need <= 255 * CATEGORY_BYTES)
                    .map(BlockNumber);
                prop_assert_eq!(fsm.search(need, avoid.map(BlockNumber)), want);
            }
            for b in 0..300u32 {
                prop_assert_eq!(fsm.recorded(BlockNumber(b)), model[b as usize] as usize * CATEGORY_BYTES);
            }
        }
    }

    /// The checkpoint's view: a changed map is taken once (up to the relation's end, without
    /// trailing zeros), a loaded one is unchanged, and the file round-trips; a flipped bit, a
    /// short file or another version does not decode.
    #[test]
    fn a_changed_map_is_taken_once_and_its_file_round_trips() {
        let fsm = FreeSpaceMap::default();
        assert_eq!(fsm.take_changed(100), None);
        fsm.record(BlockNumber(2), 100);
        fsm.record(BlockNumber(7), 8000);
        assert_eq!(fsm.take_changed(5), Some(vec![0, 0, 3]), "cut at the end");
        assert_eq!(fsm.take_changed(100), None, "taken");
        fsm.record(BlockNumber(2), 100);
        assert_eq!(
            fsm.take_changed(100),
            None,
            "the same category is no change"
        );
        fsm.forget_from(BlockNumber(7));
        let cats = fsm.take_changed(100).unwrap();
        assert_eq!(cats, vec![0, 0, 3]);
        let file = encode(&cats);
        assert_eq!(decode(&file).unwrap(), cats);
        let other = FreeSpaceMap::default();
        other.load(&decode(&file).unwrap());
        assert_eq!(other.recorded(BlockNumber(2)), 3 * CATEGORY_BYTES);
        assert_eq!(other.take_changed(100), None, "a loaded map is unchanged");
        for at in 0..file.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x10;
            assert!(decode(&bad).is_err(), "a flipped bit at byte {at}");
        }
        assert!(decode(&file[..file.len() - 1]).is_err());
        assert_eq!(relfile_of(&file_name(16384)), Some(16384));
        assert_eq!(relfile_of("16384"), None);
    }

    #[test]
    fn categories_round_the_safe_way() {
        assert_eq!(category(31), 0);
        assert_eq!(category(32), 1);
        assert_eq!(category(9000), 255);
        assert_eq!(needed(1), 1);
        assert_eq!(needed(32), 1);
        assert_eq!(needed(33), 2);
        let fsm = FreeSpaceMap::default();
        fsm.record(BlockNumber(3), 63); // category 1: 32 bytes promised
        assert_eq!(fsm.search(32, None), Some(BlockNumber(3)));
        assert_eq!(fsm.search(33, None), None);
        assert_eq!(fsm.search(32, Some(BlockNumber(3))), None);
        assert_eq!(fsm.search(0, None), Some(BlockNumber(3)));
        // More than the top category promises: only a new page.
        fsm.record(BlockNumber(4), 9000);
        assert_eq!(fsm.search(255 * 32, None), Some(BlockNumber(4)));
        assert_eq!(fsm.search(255 * 32 + 1, None), None);
    }
}
