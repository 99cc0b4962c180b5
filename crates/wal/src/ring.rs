//! The WAL buffer: a ring of `wal_buffers_bytes` bytes that inserters copy records into in
//! parallel, and the writer copies out of.
//!
//! It is an array of `AtomicU64` words rather than bytes behind `unsafe`: every record starts
//! 8-byte aligned and is padded to 8 bytes, so inserters always own whole words, and relaxed
//! word stores compile to plain moves. Visibility comes from the insertion slots: an inserter's
//! stores happen-before its SeqCst store that releases (or advances) its slot, and the writer
//! reads a region only after observing, with SeqCst loads, that every slot has moved past it
//! (`Wal::wait_insertions`). In the other direction, the writer's loads happen-before its
//! Release store of `write_lsn`, which an inserter Acquire-loads before reusing the region.

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct Ring {
    words: Box<[AtomicU64]>,
    /// `bytes - 1`; `bytes` is a power of two.
    mask: u64,
}

impl Ring {
    pub(crate) fn new(bytes: usize) -> Ring {
        assert!(
            bytes.is_power_of_two() && bytes >= 8,
            "WAL buffer size must be a power of two"
        );
        let words = (0..bytes / 8)
            .map(|_| AtomicU64::new(0))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ring {
            words,
            mask: bytes as u64 - 1,
        }
    }

    /// Size in bytes.
    pub(crate) fn len_bytes(&self) -> u64 {
        self.mask + 1
    }

    fn word_index(&self, lsn: u64) -> usize {
        ((lsn & self.mask) / 8) as usize
    }

    /// Copies `data` (a multiple of 8 bytes, at most the ring size) to stream position `lsn`
    /// (8-aligned), wrapping around the end of the ring.
    pub(crate) fn copy_in(&self, lsn: u64, data: &[u8]) {
        debug_assert!(lsn % 8 == 0 && data.len() % 8 == 0);
        debug_assert!(data.len() as u64 <= self.len_bytes());
        let n = self.words.len();
        let mut i = self.word_index(lsn);
        for chunk in data.chunks_exact(8) {
            let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            self.words[i].store(w, Ordering::Relaxed);
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }

    /// Copies stream bytes starting at `lsn` (8-aligned) into `out` (a multiple of 8 bytes).
    pub(crate) fn copy_out(&self, lsn: u64, out: &mut [u8]) {
        debug_assert!(lsn % 8 == 0 && out.len() % 8 == 0);
        debug_assert!(out.len() as u64 <= self.len_bytes());
        let n = self.words.len();
        let mut i = self.word_index(lsn);
        for chunk in out.chunks_exact_mut(8) {
            chunk.copy_from_slice(&self.words[i].load(Ordering::Relaxed).to_le_bytes());
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }
}
