//! Identifier newtypes. Each is a plain integer with a name, so that an LSN can never be passed
//! where a block number is expected.

use std::fmt;

/// Log sequence number: a byte position in the WAL stream, counted from 0 since `initdb`.
///
/// A record's LSN is the position of its first byte; a page LSN is the *end* position of the last
/// record that changed the page (PostgreSQL's convention: `PageSetLSN(page, EndRecPtr)`).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The invalid LSN (0). No record starts at 0: the stream begins at [`Lsn::FIRST`].
    pub const INVALID: Lsn = Lsn(0);
    /// Position of the first record written by `initdb`, in bytes.
    pub const FIRST: Lsn = Lsn(8);

    /// True unless this is [`Lsn::INVALID`].
    pub fn is_valid(self) -> bool {
        self.0 != 0
    }
}

impl fmt::Display for Lsn {
    /// PostgreSQL's `%X/%X` notation: high and low 32 bits in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

/// Block number within a relation file (block `n` starts at byte `n * BLCKSZ`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockNumber(pub u32);

impl BlockNumber {
    /// Marks "no block" in links such as a B-tree page's right sibling.
    pub const INVALID: BlockNumber = BlockNumber(u32::MAX);
}

/// Identifies one relation file (a heap or an index) on disk: `base/<id>`.
///
/// TRUNCATE gives a table a new `RelFileId`, as PostgreSQL gives it a new relfilenode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelFileId(pub u32);

impl RelFileId {
    /// The catalog heap, which lists every other relation.
    pub const CATALOG: RelFileId = RelFileId(1);
    /// The first id handed out to user relations.
    pub const FIRST_USER: RelFileId = RelFileId(16384);
}

/// Transaction id. 64 bits wide, so it never wraps around; a heap tuple header stores 48 of
/// them, and no xid above [`Xid::MAX_STORED`] is assigned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Xid(pub u64);

impl Xid {
    /// "No transaction": an unset `xmax`.
    pub const INVALID: Xid = Xid(0);
    /// A version's `xmin` once VACUUM found its inserter aborted: invisible to every snapshot,
    /// without the status store (which may then forget the xid). PostgreSQL keeps the xid and
    /// sets the `HEAP_XMIN_INVALID` hint bit instead.
    pub const ABORTED: Xid = Xid(1);
    /// Rows written before any transaction existed (initdb), and an `xmin` or `xmax` VACUUM
    /// froze (its commit visible to every snapshot): committed, visible to all.
    pub const FROZEN: Xid = Xid(2);
    /// The first xid handed out to a transaction.
    pub const FIRST_NORMAL: Xid = Xid(3);
    /// The largest xid a heap tuple header holds (48 bits: about 2.8 × 10^14 xids, 89 years
    /// at 100,000 transactions per second). Past it, the server refuses to assign xids
    /// (SQLSTATE 54000), as PostgreSQL stops before its 32-bit xids would wrap around.
    pub const MAX_STORED: Xid = Xid((1 << 48) - 1);

    /// True unless this is [`Xid::INVALID`].
    pub fn is_valid(self) -> bool {
        self.0 != 0
    }
}

/// Tuple identifier: the block and 1-based line-pointer slot of a heap tuple
/// (PostgreSQL's `ItemPointerData`). Encoded in 6 bytes: block u32 LE, slot u16 LE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid {
    /// Heap block holding the tuple.
    pub block: BlockNumber,
    /// 1-based line pointer number; 0 means "no tuple".
    pub slot: u16,
}

impl Tid {
    /// "No tuple".
    pub const INVALID: Tid = Tid {
        block: BlockNumber(u32::MAX),
        slot: 0,
    };
    /// Encoded size in bytes.
    pub const SIZE: usize = 6;

    /// True unless this is [`Tid::INVALID`].
    pub fn is_valid(self) -> bool {
        self.slot != 0
    }

    /// Encodes as 6 bytes: block (u32 LE), slot (u16 LE).
    pub fn to_bytes(self) -> [u8; 6] {
        let mut b = [0u8; 6];
        b[..4].copy_from_slice(&self.block.0.to_le_bytes());
        b[4..].copy_from_slice(&self.slot.to_le_bytes());
        b
    }

    /// Decodes [`Tid::to_bytes`]'s encoding; `None` if `b` is shorter than 6 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Tid> {
        let block = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        let slot = u16::from_le_bytes(b.get(4..6)?.try_into().ok()?);
        Some(Tid {
            block: BlockNumber(block),
            slot,
        })
    }
}
