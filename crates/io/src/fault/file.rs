//! [`FileIo`] and [`Vfs`] over the state of a [`FaultVfs`], and its device cache flush.

use super::*;
use crate::{CacheFlush, DIRECT_IO_ALIGN};

struct FaultFile {
    vfs: FaultVfs,
    ino: u64,
    path: PathBuf,
    mode: OpenMode,
}

impl FaultFile {
    /// O_DIRECT's rule: the buffer's address, the offset and the length aligned to
    /// [`DIRECT_IO_ALIGN`], or EINVAL.
    // `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace says 1.80).
    #[allow(clippy::manual_is_multiple_of)]
    fn check_direct(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let a = DIRECT_IO_ALIGN as u64;
        let addr = buf.as_ptr() as u64;
        if self.mode.direct && (addr % a != 0 || off % a != 0 || buf.len() as u64 % a != 0) {
            return Err(io::Error::from_raw_os_error(22)); // EINVAL, as O_DIRECT gives
        }
        Ok(())
    }

    fn sync(&self, what: &str) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.syncs += 1;
        if let Some(e) = st.sync_fault(what, &self.path) {
            // The kernel marks the pages clean after a failed writeback: the data stays
            // readable but will never reach the disk unless written again.
            st.inodes
                .get_mut(&self.ino)
                .expect("open inode")
                .pending
                .clear();
            return Err(e);
        }
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        for op in std::mem::take(&mut node.pending) {
            apply(&mut node.durable, &op);
        }
        Ok(())
    }
}

impl FileIo for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.check_direct(buf, offset)?;
        let mut st = self.vfs.lock();
        st.seq += 1;
        let data = &st.inodes[&self.ino].data;
        let off = offset as usize;
        if off >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - off);
        buf[..n].copy_from_slice(&data[off..off + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_direct(buf, offset)?;
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.writes += 1;
        let mut len = buf.len();
        let mut fail = None;
        if st.subject(&self.path) {
            st.write_calls += 1;
            let n = st.write_calls;
            let (p_eio, p_enospc) = (st.plan.write_eio, st.plan.write_enospc);
            if st.rng.chance(p_eio) {
                st.stats.injected_eio += 1;
                return Err(eio("write", &self.path));
            }
            if st.plan.write_enospc_at == Some(n) || st.rng.chance(p_enospc) {
                st.stats.injected_enospc += 1;
                // A short write: a sector-aligned prefix made it.
                let sectors = (buf.len() / 512) as u64;
                len = (st.rng.below(sectors + 1) * 512) as usize;
                fail = Some(enospc());
            }
        }
        let sync_now = self.mode.dsync || self.mode.sync;
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        if len > 0 {
            write_into(&mut node.data, offset, &buf[..len]);
            let first = offset / 4096;
            let last = (offset + len as u64 - 1) / 4096;
            node.allocated.extend(first..=last);
            let op = PendingOp::Write {
                off: offset,
                bytes: buf[..len].to_vec(),
                cached: false,
            };
            if sync_now && fail.is_none() {
                for p in std::mem::take(&mut node.pending) {
                    apply(&mut node.durable, &p);
                }
                apply(&mut node.durable, &op);
            } else {
                node.pending.push(op);
            }
        }
        match fail {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync("fdatasync")
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync("fsync")
    }

    fn len(&self) -> io::Result<u64> {
        let st = self.vfs.lock();
        Ok(st.inodes[&self.ino].data.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        node.data.resize(len as usize, 0);
        node.pending.push(PendingOp::SetLen(len));
        Ok(())
    }

    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.write_backs += 1;
        if let Some(e) = st.sync_fault("sync_file_range", &self.path) {
            st.inodes
                .get_mut(&self.ino)
                .expect("open inode")
                .pending
                .clear();
            return Err(e);
        }
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        let end = (offset + len).min(node.data.len() as u64);
        if offset >= end {
            return Ok(());
        }
        // Writing back sends the range's current bytes; the parts of older unsynced writes
        // inside it are superseded (their pages now hold the newer bytes) and can no longer
        // reach the disk on their own: a write wholly inside is dropped, one that overlaps the
        // range is cut to its parts outside it. (Keeping the overlapped part would let a later
        // sync or crash image apply it over the written-back bytes once a cache flush had made
        // those durable and taken them off the pending list: older bytes over newer.)
        let mut kept = Vec::with_capacity(node.pending.len());
        for op in std::mem::take(&mut node.pending) {
            match op {
                PendingOp::Write {
                    off,
                    bytes,
                    cached: false,
                } if off < end && off + bytes.len() as u64 > offset => {
                    let w_end = off + bytes.len() as u64;
                    if off < offset {
                        kept.push(PendingOp::Write {
                            off,
                            bytes: bytes[..(offset - off) as usize].to_vec(),
                            cached: false,
                        });
                    }
                    if w_end > end {
                        kept.push(PendingOp::Write {
                            off: end,
                            bytes: bytes[(end - off) as usize..].to_vec(),
                            cached: false,
                        });
                    }
                }
                op => kept.push(op),
            }
        }
        node.pending = kept;
        let bytes = node.data[offset as usize..end as usize].to_vec();
        node.pending.push(PendingOp::Write {
            off: offset,
            bytes,
            cached: true,
        });
        Ok(())
    }

    /// Modelled as [`FileIo::write_back`]: the range's bytes reach the device, still to be made
    /// durable by a cache flush or a sync.
    fn flush_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let len = if len == 0 {
            self.len()?.saturating_sub(offset)
        } else {
            len
        };
        self.write_back(offset, len)
    }

    /// Modelled as an unsynced write of zeros over the part of the range past the file's
    /// end (bytes the file holds are left alone): a power loss may drop it, tear it or order
    /// it after later writes into the range, so the file may come back shorter, or a later
    /// unsynced write there may be lost, as the contract allows. Subject to the plan's write
    /// faults (counted as a `write_at`): an injected EIO or ENOSPC fails it whole, changing
    /// nothing.
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.writes += 1;
        if st.subject(&self.path) {
            st.write_calls += 1;
            let n = st.write_calls;
            let (p_eio, p_enospc) = (st.plan.write_eio, st.plan.write_enospc);
            if st.rng.chance(p_eio) {
                st.stats.injected_eio += 1;
                return Err(eio("fallocate", &self.path));
            }
            if st.plan.write_enospc_at == Some(n) || st.rng.chance(p_enospc) {
                st.stats.injected_enospc += 1;
                return Err(enospc());
            }
        }
        let end = offset
            .checked_add(len)
            .ok_or_else(|| io::Error::from_raw_os_error(27))?; // EFBIG
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        if len > 0 {
            node.allocated.extend(offset / 4096..end.div_ceil(4096));
        }
        let old = node.data.len() as u64;
        if end > old {
            let start = offset.max(old);
            let zeros = vec![0u8; (end - start) as usize];
            write_into(&mut node.data, start, &zeros);
            node.pending.push(PendingOp::Write {
                off: start,
                bytes: zeros,
                cached: false,
            });
        }
        Ok(())
    }

    fn allocated_bytes(&self) -> io::Result<u64> {
        let st = self.vfs.lock();
        Ok(st.inodes[&self.ino].allocated.len() as u64 * 4096)
    }
}

/// The device cache flush of a [`FaultVfs`]: every written-back range becomes durable.
struct FaultCacheFlush {
    vfs: FaultVfs,
}

impl CacheFlush for FaultCacheFlush {
    fn flush(&self) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.cache_flushes += 1;
        if let Some(e) = st.sync_fault("cache flush", Path::new("<device cache>")) {
            return Err(e);
        }
        for node in st.inodes.values_mut() {
            let mut keep = Vec::with_capacity(node.pending.len());
            for op in std::mem::take(&mut node.pending) {
                if matches!(op, PendingOp::Write { cached: true, .. }) {
                    apply(&mut node.durable, &op);
                } else {
                    keep.push(op);
                }
            }
            node.pending = keep;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        "the fault-injecting device's cache flush".into()
    }
}

impl Vfs for FaultVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        let mut st = self.lock();
        st.seq += 1;
        let ino = match st.file(path) {
            Ok(ino) => ino,
            Err(e) if e.kind() == io::ErrorKind::NotFound && mode.create => {
                let parent = path.parent().unwrap_or(Path::new(""));
                if !st.dir_exists(parent) {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{}: no such directory", parent.display()),
                    ));
                }
                let ino = st.next_ino;
                st.next_ino += 1;
                st.inodes.insert(ino, Inode::default());
                st.ns_op(NsOp::Create(path.to_path_buf(), Entry::File(ino)));
                ino
            }
            Err(e) => return Err(e),
        };
        Ok(Arc::new(FaultFile {
            vfs: self.clone(),
            ino,
            path: path.to_path_buf(),
            mode,
        }))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.seq += 1;
        st.file(path)?;
        st.ns_op(NsOp::Remove(path.to_path_buf()));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.seq += 1;
        st.file(from)?;
        st.ns_op(NsOp::Rename(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.seq += 1;
        st.stats.syncs += 1;
        if !st.dir_exists(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            ));
        }
        if let Some(e) = st.sync_fault("fsync directory", dir) {
            return Err(e);
        }
        st.sync_dir(dir);
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.seq += 1;
        let mut parts = Vec::new();
        let mut p = Some(dir);
        while let Some(d) = p {
            if d.as_os_str().is_empty() || d == Path::new("/") {
                break;
            }
            parts.push(d.to_path_buf());
            p = d.parent();
        }
        for d in parts.into_iter().rev() {
            match st.ns.get(&d) {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{} is a file", d.display()),
                    ))
                }
                None => st.ns_op(NsOp::Create(d, Entry::Dir)),
            }
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.lock();
        if !st.dir_exists(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            ));
        }
        Ok(st
            .ns
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn exists(&self, path: &Path) -> bool {
        self.lock().ns.contains_key(path)
    }

    fn cache_flusher(&self, _dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        let st = self.lock();
        Ok(st
            .cache_flush
            .then(|| Arc::new(FaultCacheFlush { vfs: self.clone() }) as Arc<dyn CacheFlush>))
    }
}
