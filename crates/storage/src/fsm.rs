//! The free-space map of a heap: for each page, how much room it had when last looked at, so
//! that an insert that finds the relation's insert target full can reuse a page VACUUM freed
//! before it extends the relation (PostgreSQL's `freespace.c`; DESIGN.md, "Free-space map").
//!
//! As in PostgreSQL, free space is kept in categories of 32 bytes (one byte per page: 255 is
//! 8160 bytes or more), and the map is a hint: a page may have less room than its entry says
//! (an insert filled it since), so whoever takes a page from it checks the page itself and
//! records what it found. Unlike PostgreSQL's, walnut's map lives in memory only (no FSM fork,
//! nothing logged): it starts empty at every start and on a standby, and VACUUM fills it.
//!
//! The map is a max-tree over the categories (PostgreSQL's FSM pages are the same, over a page
//! each): a search for a category descends to the leftmost page that has it, in O(log pages).

use parking_lot::Mutex;
use walnut_common::BlockNumber;

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
        *self = Tree { leaves, nodes };
    }

    fn set(&mut self, block: usize, cat: u8) {
        self.grow_to(block);
        let mut i = self.leaves + block;
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
