//! Physical replication slots (PostgreSQL's `src/backend/replication/slot.c`): named positions
//! that keep the WAL a standby or `pg_receivewal` still needs from being recycled, and persist
//! across restarts.
//!
//! Each slot is one file, `DATADIR/pg_replslot/NAME.slot`, 28 bytes, little-endian:
//!
//! ```text
//!  0 u32 magic "WSLT" (0x544C_5357)
//!  4 u32 version (1)
//!  8 u64 restart_lsn   the oldest WAL the slot keeps; 0 = none reserved yet
//! 16 u32 invalidation  0 = valid, 1 = wal_removed (max_slot_wal_keep_size)
//! 20 u32 reserved
//! 24 u32 crc32c of bytes 0..24
//! ```
//!
//! Invariants:
//! 1. The WAL from every valid slot's *saved* `restart_lsn` on is kept: the checkpoint writes
//!    the slots whose position moved (`save`) before it computes what to recycle, and it uses
//!    the saved positions (PostgreSQL 18's `last_saved_restart_lsn`). A crash then restarts a
//!    slot at a position whose WAL still exists.
//! 2. A file is created and replaced whole (`durable_replace`: temporary file, fsync, rename,
//!    fsync of the directory) and removed with an fsync of the directory: after a crash a slot
//!    exists with its last saved state, or not at all. Leftover `*.tmp` files are removed at
//!    load.
//! 3. One walsender at a time uses a slot (`acquire`); the slot is released when its guard
//!    drops.
//!
//! Crash windows: during creation (before the rename: no slot; after: the slot with its first
//! position); during an advance (the file keeps the older position, which keeps more WAL);
//! during a drop (before the removal reaches the disk the slot may come back after a crash,
//! holding WAL until dropped again, as in PostgreSQL).

use crate::control::durable_replace;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use walnut_common::{Error, Lsn, Result, SqlState};
use walnut_io::{OpenMode, Vfs};

const MAGIC: u32 = 0x544C_5357;
const VERSION: u32 = 1;
const FILE_LEN: usize = 28;
/// Longest slot name, bytes (PostgreSQL's `NAMEDATALEN - 1`).
pub const MAX_NAME_LEN: usize = 63;

/// Why a slot stopped keeping WAL (PostgreSQL's `ReplicationSlotInvalidationCause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalidation {
    /// Its WAL was removed: it fell more than `max_slot_wal_keep_size` behind.
    WalRemoved,
}

impl Invalidation {
    /// The name `pg_replication_slots.invalidation_reason` shows.
    pub fn name(self) -> &'static str {
        match self {
            Invalidation::WalRemoved => "wal_removed",
        }
    }
}

/// One slot, as `pg_replication_slots` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    /// Its name.
    pub name: String,
    /// The oldest WAL it keeps (`None`: none reserved yet).
    pub restart_lsn: Option<Lsn>,
    /// The walsender using it.
    pub active_pid: Option<i32>,
    /// Set once it stopped keeping WAL.
    pub invalidated: Option<Invalidation>,
    /// A temporary slot: never written to disk, dropped with its connection.
    pub temporary: bool,
}

#[derive(Debug)]
struct Slot {
    restart_lsn: u64,
    /// What the file says.
    saved_restart_lsn: u64,
    invalidated: Option<Invalidation>,
    saved_invalidated: Option<Invalidation>,
    active_pid: Option<i32>,
    /// A temporary slot's connection (its backend pid): it holds the slot until it ends.
    owner: Option<i32>,
}

/// Every slot of a data directory.
pub struct ReplicationSlots {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    slots: Mutex<BTreeMap<String, Slot>>,
    /// In-memory WAL holds (base backups in progress): (last id, id -> LSN). Taken, and read
    /// with the slots, under the `slots` lock first.
    holds: Mutex<(u64, BTreeMap<u64, u64>)>,
}

/// WAL kept for as long as this lives ([`ReplicationSlots::hold`]): a base backup's.
#[derive(Debug)]
pub struct WalHold {
    slots: Arc<ReplicationSlots>,
    id: u64,
    lsn: Lsn,
}

impl WalHold {
    /// The WAL from here on is kept.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }
}

impl Drop for WalHold {
    fn drop(&mut self) {
        self.slots.holds.lock().1.remove(&self.id);
    }
}

impl std::fmt::Debug for ReplicationSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationSlots")
            .field("dir", &self.dir)
            .field("slots", &*self.slots.lock())
            .finish()
    }
}

/// A slot in use by one walsender ([`ReplicationSlots::acquire`]); dropping it releases it.
#[derive(Debug)]
pub struct AcquiredSlot {
    slots: Arc<ReplicationSlots>,
    name: String,
}

impl AcquiredSlot {
    /// The slot's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The slot's restart position (`None`: none reserved).
    pub fn restart_lsn(&self) -> Option<Lsn> {
        let all = self.slots.slots.lock();
        all.get(&self.name)
            .map(|s| s.restart_lsn)
            .filter(|&l| l != 0)
            .map(Lsn)
    }

    /// The receiver has flushed everything before `lsn`: the slot need keep only what follows
    /// (PostgreSQL's `PhysicalConfirmReceivedLocation`). Saved at the next checkpoint. Never
    /// moves backwards, and never moves an invalidated slot.
    pub fn confirm(&self, lsn: Lsn) {
        let mut all = self.slots.slots.lock();
        if let Some(s) = all.get_mut(&self.name) {
            if s.invalidated.is_none() && lsn.0 > s.restart_lsn {
                s.restart_lsn = lsn.0;
            }
        }
    }
}

impl Drop for AcquiredSlot {
    fn drop(&mut self) {
        if let Some(s) = self.slots.slots.lock().get_mut(&self.name) {
            // A temporary slot stays with its connection.
            s.active_pid = s.owner;
        }
    }
}

fn encode(restart_lsn: u64, invalidated: Option<Invalidation>) -> Vec<u8> {
    let mut b = Vec::with_capacity(FILE_LEN);
    b.extend_from_slice(&MAGIC.to_le_bytes());
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&restart_lsn.to_le_bytes());
    b.extend_from_slice(&u32::from(invalidated.is_some()).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    let crc = walnut_common::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn decode(b: &[u8]) -> Option<(u64, Option<Invalidation>)> {
    if b.len() != FILE_LEN {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
    if u32_at(0) != MAGIC || u32_at(4) != VERSION || walnut_common::crc32c(&b[..24]) != u32_at(24) {
        return None;
    }
    let lsn = u64::from_le_bytes(b[8..16].try_into().expect("8"));
    let inval = match u32_at(16) {
        0 => None,
        1 => Some(Invalidation::WalRemoved),
        _ => return None,
    };
    Some((lsn, inval))
}

/// Checks a slot name: lower-case letters, digits and underscores, 1 to 63 bytes
/// (PostgreSQL's `ReplicationSlotValidateName`).
///
/// # Errors
/// 42602 with PostgreSQL's messages.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::user(
            SqlState::INVALID_NAME,
            format!("replication slot name \"{name}\" is too short"),
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::user(
            SqlState::NAME_TOO_LONG,
            format!("replication slot name \"{name}\" is too long"),
        ));
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
    {
        return Err(Error::user(
            SqlState::INVALID_NAME,
            format!("replication slot name \"{name}\" contains invalid character"),
        )
        .with_detail(
            "Replication slot names may only contain lower case letters, numbers, and the underscore character.",
        ));
    }
    Ok(())
}

fn does_not_exist(name: &str) -> Error {
    Error::user(
        SqlState::UNDEFINED_OBJECT,
        format!("replication slot \"{name}\" does not exist"),
    )
}

impl ReplicationSlots {
    /// Loads `DATADIR/pg_replslot` (created if missing): every valid `*.slot` file; leftover
    /// temporary files are removed, and a file that fails its checks is an error (a slot must
    /// not silently stop keeping WAL).
    ///
    /// # Errors
    /// I/O errors; corruption for a malformed slot file.
    pub fn load(vfs: Arc<dyn Vfs>, datadir: &Path) -> Result<Arc<ReplicationSlots>> {
        let dir = datadir.join("pg_replslot");
        vfs.create_dir_all(&dir).map_err(|e| {
            Error::io(
                format!("could not create directory \"{}\"", dir.display()),
                e,
            )
        })?;
        let names = vfs
            .list_dir(&dir)
            .map_err(|e| Error::io(format!("could not read directory \"{}\"", dir.display()), e))?;
        let mut slots = BTreeMap::new();
        for file in names {
            let path = dir.join(&file);
            if file.ends_with(".tmp") {
                vfs.remove(&path).map_err(|e| {
                    Error::io(format!("could not remove \"{}\"", path.display()), e)
                })?;
                continue;
            }
            let Some(name) = file.strip_suffix(".slot") else {
                continue;
            };
            let f = vfs
                .open(&path, OpenMode::default())
                .map_err(|e| Error::io(format!("could not open \"{}\"", path.display()), e))?;
            let mut b = vec![0u8; FILE_LEN];
            let len = f.len().map_err(|e| Error::io("could not stat", e))? as usize;
            let ok = len == FILE_LEN && f.read_exact_at(&mut b, 0).is_ok();
            let Some((lsn, invalidated)) = decode(&b).filter(|_| ok) else {
                return Err(Error::corruption(format!(
                    "replication slot file \"{}\" is corrupt",
                    path.display()
                )));
            };
            slots.insert(
                name.to_string(),
                Slot {
                    restart_lsn: lsn,
                    saved_restart_lsn: lsn,
                    invalidated,
                    saved_invalidated: invalidated,
                    active_pid: None,
                    owner: None,
                },
            );
        }
        Ok(Arc::new(ReplicationSlots {
            vfs,
            dir,
            slots: Mutex::new(slots),
            holds: Mutex::new((0, BTreeMap::new())),
        }))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.slot"))
    }

    /// Creates a slot, durably, with `restart_lsn` reserved if given (`RESERVE_WAL`: the
    /// caller passes the current redo point, whose WAL every checkpoint still keeps). With
    /// `temporary_for = Some(pid)` the slot is temporary: in memory only, held by connection
    /// `pid` and dropped when it ends ([`Self::drop_temporary`]).
    ///
    /// # Errors
    /// 42602/42622 for a bad name, 42710 if it exists, 53400 at `max` slots, I/O errors.
    pub fn create(
        &self,
        name: &str,
        restart_lsn: Option<Lsn>,
        max: usize,
        temporary_for: Option<i32>,
    ) -> Result<()> {
        validate_name(name)?;
        let mut all = self.slots.lock();
        if all.contains_key(name) {
            return Err(Error::user(
                SqlState::DUPLICATE_OBJECT,
                format!("replication slot \"{name}\" already exists"),
            ));
        }
        if all.len() >= max {
            return Err(Error::user(
                SqlState::CONFIGURATION_LIMIT_EXCEEDED,
                "all replication slots are in use",
            )
            .with_detail("Free one or increase \"max_replication_slots\"."));
        }
        let lsn = restart_lsn.map_or(0, |l| l.0);
        if temporary_for.is_none() {
            durable_replace(&*self.vfs, &self.path(name), &encode(lsn, None))?;
        }
        all.insert(
            name.to_string(),
            Slot {
                restart_lsn: lsn,
                saved_restart_lsn: lsn,
                invalidated: None,
                saved_invalidated: None,
                active_pid: temporary_for,
                owner: temporary_for,
            },
        );
        Ok(())
    }

    /// Drops every temporary slot of connection `pid` (it ended).
    pub fn drop_temporary(&self, pid: i32) {
        self.slots.lock().retain(|_, s| s.owner != Some(pid));
    }

    /// Reserves WAL for slot `name` from the position `at()` returns, durably (PostgreSQL's
    /// `ReplicationSlotReserveWal`). `at` is called under the slots' lock, which the checkpoint
    /// also takes to read the oldest slot position after it has set its redo point: so either
    /// the checkpoint sees this reservation, or `at` (the WAL's redo point) already returns the
    /// checkpoint's new redo point, whose WAL it keeps.
    ///
    /// # Errors
    /// 42704 if there is no such slot; I/O errors.
    pub fn reserve(&self, name: &str, at: impl FnOnce() -> Lsn) -> Result<Lsn> {
        let mut all = self.slots.lock();
        let s = all.get_mut(name).ok_or_else(|| does_not_exist(name))?;
        let lsn = at();
        if s.owner.is_none() {
            durable_replace(&*self.vfs, &self.path(name), &encode(lsn.0, s.invalidated))?;
        }
        s.restart_lsn = lsn.0;
        s.saved_restart_lsn = lsn.0;
        s.saved_invalidated = s.invalidated;
        Ok(lsn)
    }

    /// Drops a slot, durably, for connection `by` (a temporary slot's own connection may drop
    /// it).
    ///
    /// # Errors
    /// 42704 if there is none, 55006 while another walsender uses it, I/O errors.
    pub fn drop_slot(&self, name: &str, by: i32) -> Result<()> {
        let mut all = self.slots.lock();
        let s = all.get(name).ok_or_else(|| does_not_exist(name))?;
        if s.owner == Some(by) {
            all.remove(name);
            return Ok(());
        }
        if let Some(pid) = s.active_pid {
            return Err(Error::user(
                SqlState::OBJECT_IN_USE,
                format!("replication slot \"{name}\" is active for PID {pid}"),
            ));
        }
        let path = self.path(name);
        self.vfs
            .remove(&path)
            .map_err(|e| Error::io(format!("could not remove \"{}\"", path.display()), e))?;
        if let Err(e) = self.vfs.sync_dir(&self.dir) {
            walnut_common::panic_fatal(&format!(
                "could not fsync directory \"{}\": {e}",
                self.dir.display()
            ));
        }
        all.remove(name);
        Ok(())
    }

    /// Takes a slot for walsender `pid`.
    ///
    /// # Errors
    /// 42704 if there is none; 55006 if another walsender uses it; 55000 if it was invalidated
    /// (PostgreSQL's "can no longer get changes from replication slot").
    pub fn acquire(self: &Arc<Self>, name: &str, pid: i32) -> Result<AcquiredSlot> {
        let mut all = self.slots.lock();
        let s = all.get_mut(name).ok_or_else(|| does_not_exist(name))?;
        if let Some(other) = s.active_pid.filter(|&p| s.owner != Some(pid) || p != pid) {
            return Err(Error::user(
                SqlState::OBJECT_IN_USE,
                format!("replication slot \"{name}\" is active for PID {other}"),
            ));
        }
        if let Some(why) = s.invalidated {
            return Err(Error::user(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("can no longer get changes from replication slot \"{name}\""),
            )
            .with_detail(format!(
                "This replication slot has been invalidated due to \"{}\"; a new base backup (or a new slot) is needed.",
                why.name()
            )));
        }
        s.active_pid = Some(pid);
        Ok(AcquiredSlot {
            slots: self.clone(),
            name: name.to_string(),
        })
    }

    /// A slot's restart position and state, if it exists (READ_REPLICATION_SLOT).
    pub fn get(&self, name: &str) -> Option<SlotInfo> {
        self.slots.lock().get(name).map(|s| info(name, s))
    }

    /// Every slot, by name (`pg_replication_slots`).
    pub fn list(&self) -> Vec<SlotInfo> {
        self.slots.lock().iter().map(|(n, s)| info(n, s)).collect()
    }

    /// Writes every slot whose position or state moved since it was last saved (PostgreSQL's
    /// `CheckPointReplicationSlots`), before the checkpoint decides what WAL to recycle.
    ///
    /// # Errors
    /// I/O errors (a failed fsync PANICs inside `durable_replace`).
    pub fn save(&self) -> Result<()> {
        // Under the lock, as create, reserve and drop write theirs: a slot dropped (or
        // dropped and created again) meanwhile is never written back with an old state.
        let mut all = self.slots.lock();
        for (name, s) in all.iter_mut() {
            if s.restart_lsn != s.saved_restart_lsn || s.invalidated != s.saved_invalidated {
                // A temporary slot has no file: a crash ends it.
                if s.owner.is_none() {
                    durable_replace(
                        &*self.vfs,
                        &self.path(name),
                        &encode(s.restart_lsn, s.invalidated),
                    )?;
                }
                s.saved_restart_lsn = s.restart_lsn;
                s.saved_invalidated = s.invalidated;
            }
        }
        Ok(())
    }

    /// Keeps the WAL from `at()` on until the hold drops (a base backup's; not persisted: a
    /// crash ends the backup). `at` is called under the slots' lock, as in [`Self::reserve`].
    pub fn hold(self: &Arc<Self>, at: impl FnOnce() -> Lsn) -> WalHold {
        let _slots = self.slots.lock();
        let lsn = at();
        let mut holds = self.holds.lock();
        holds.0 += 1;
        let id = holds.0;
        holds.1.insert(id, lsn.0);
        WalHold {
            slots: self.clone(),
            id,
            lsn,
        }
    }

    /// The oldest saved restart position of a valid slot, and the oldest hold, if any: the
    /// checkpoint bounds the first by `max_slot_wal_keep_size`, never the second.
    pub fn min_saved_restart_lsn(&self) -> (Option<Lsn>, Option<Lsn>) {
        let slots = self.slots.lock();
        let from_slots = slots
            .values()
            .filter(|s| s.invalidated.is_none() && s.saved_restart_lsn != 0)
            .map(|s| s.saved_restart_lsn)
            .min()
            .map(Lsn);
        let holds = self.holds.lock();
        (from_slots, holds.1.values().copied().min().map(Lsn))
    }

    /// Invalidates, durably, every valid slot whose restart position is below `keep_from`,
    /// the start of the oldest segment the checkpoint keeps (PostgreSQL's
    /// `InvalidateObsoleteReplicationSlots` with `RS_INVAL_WAL_REMOVED`). Returns their names.
    ///
    /// # Errors
    /// I/O errors writing the slot files.
    pub fn invalidate_below(&self, keep_from: Lsn) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for (name, s) in self.slots.lock().iter_mut() {
            // The saved position, which the checkpoint kept WAL for: the in-memory one may have
            // moved past `keep_from` since, but a crash would bring back the saved one.
            if s.invalidated.is_none()
                && s.saved_restart_lsn != 0
                && s.saved_restart_lsn < keep_from.0
            {
                s.invalidated = Some(Invalidation::WalRemoved);
                names.push(name.clone());
            }
        }
        if !names.is_empty() {
            self.save()?;
        }
        Ok(names)
    }
}

fn info(name: &str, s: &Slot) -> SlotInfo {
    SlotInfo {
        name: name.to_string(),
        restart_lsn: (s.restart_lsn != 0).then_some(Lsn(s.restart_lsn)),
        active_pid: s.active_pid,
        invalidated: s.invalidated,
        temporary: s.owner.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(dir: &Path) -> Arc<ReplicationSlots> {
        ReplicationSlots::load(Arc::new(walnut_io::RealVfs), dir).unwrap()
    }

    #[test]
    fn slots_persist_their_saved_position_and_keep_wal_from_it() {
        let tmp = tempfile::tempdir().unwrap();
        let s = slots(tmp.path());
        s.create("s1", Some(Lsn(1000)), 10, None).unwrap();
        s.create("s2", None, 10, None).unwrap();
        assert_eq!(s.min_saved_restart_lsn().0, Some(Lsn(1000)));
        let a = s.acquire("s1", 7).unwrap();
        assert_eq!(
            s.acquire("s1", 8).unwrap_err().sqlstate,
            SqlState::OBJECT_IN_USE
        );
        assert_eq!(
            s.drop_slot("s1", 0).unwrap_err().sqlstate,
            SqlState::OBJECT_IN_USE
        );
        a.confirm(Lsn(5000));
        a.confirm(Lsn(4000));
        assert_eq!(a.restart_lsn(), Some(Lsn(5000)));
        // Unsaved: the WAL from the saved position is still kept.
        assert_eq!(s.min_saved_restart_lsn().0, Some(Lsn(1000)));
        // A restart before the checkpoint's save finds the old position.
        assert_eq!(
            slots(tmp.path()).get("s1").unwrap().restart_lsn,
            Some(Lsn(1000))
        );
        s.save().unwrap();
        assert_eq!(s.min_saved_restart_lsn().0, Some(Lsn(5000)));
        drop(a);
        let again = slots(tmp.path());
        assert_eq!(again.get("s1").unwrap().restart_lsn, Some(Lsn(5000)));
        assert_eq!(again.get("s2").unwrap().restart_lsn, None);
        again.drop_slot("s2", 0).unwrap();
        assert!(slots(tmp.path()).get("s2").is_none());
    }

    #[test]
    fn names_limits_and_invalidation() {
        let tmp = tempfile::tempdir().unwrap();
        let s = slots(tmp.path());
        for bad in ["", "Upper", "a-b", &"x".repeat(64)] {
            assert!(s.create(bad, None, 10, None).is_err(), "{bad:?}");
        }
        s.create("a", Some(Lsn(100)), 2, None).unwrap();
        assert_eq!(
            s.create("a", None, 2, None).unwrap_err().sqlstate,
            SqlState::DUPLICATE_OBJECT
        );
        s.create("b", Some(Lsn(900)), 2, None).unwrap();
        assert_eq!(
            s.create("c", None, 2, None).unwrap_err().sqlstate,
            SqlState::CONFIGURATION_LIMIT_EXCEEDED
        );
        assert_eq!(s.invalidate_below(Lsn(500)).unwrap(), vec!["a".to_string()]);
        assert_eq!(s.min_saved_restart_lsn().0, Some(Lsn(900)));
        let e = s.acquire("a", 1).unwrap_err();
        assert!(e.message.contains("can no longer get changes"), "{e}");
        assert_eq!(
            slots(tmp.path()).get("a").unwrap().invalidated,
            Some(Invalidation::WalRemoved)
        );
        assert_eq!(
            s.drop_slot("zz", 0).unwrap_err().sqlstate,
            SqlState::UNDEFINED_OBJECT
        );
        // A hold keeps WAL like a slot, until it drops.
        let h = s.hold(|| Lsn(300));
        assert_eq!(s.min_saved_restart_lsn(), (Some(Lsn(900)), Some(Lsn(300))));
        drop(h);
        assert_eq!(s.min_saved_restart_lsn(), (Some(Lsn(900)), None));
    }

    #[test]
    fn a_temporary_slot_lives_in_memory_with_its_connection() {
        let tmp = tempfile::tempdir().unwrap();
        let s = slots(tmp.path());
        s.create("t", Some(Lsn(700)), 10, Some(42)).unwrap();
        assert!(s.get("t").unwrap().temporary);
        assert_eq!(s.get("t").unwrap().active_pid, Some(42));
        assert_eq!(s.min_saved_restart_lsn().0, Some(Lsn(700)));
        // Its own connection streams on it; another cannot.
        assert_eq!(
            s.acquire("t", 43).unwrap_err().sqlstate,
            SqlState::OBJECT_IN_USE
        );
        let a = s.acquire("t", 42).unwrap();
        a.confirm(Lsn(800));
        drop(a);
        assert_eq!(s.get("t").unwrap().active_pid, Some(42));
        s.save().unwrap();
        assert_eq!(s.min_saved_restart_lsn().0, Some(Lsn(800)));
        // Never on disk, and gone with its connection.
        assert!(slots(tmp.path()).get("t").is_none());
        assert_eq!(
            s.drop_slot("t", 43).unwrap_err().sqlstate,
            SqlState::OBJECT_IN_USE
        );
        s.drop_temporary(42);
        assert!(s.get("t").is_none());
        s.create("u", None, 10, Some(5)).unwrap();
        s.drop_slot("u", 5).unwrap();
        assert!(s.list().is_empty());
    }

    #[test]
    fn a_corrupt_slot_file_is_an_error_and_temporary_files_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        slots(tmp.path())
            .create("s", Some(Lsn(8)), 10, None)
            .unwrap();
        let dir = tmp.path().join("pg_replslot");
        std::fs::write(dir.join("t.tmp"), b"partial").unwrap();
        let s = slots(tmp.path());
        assert!(!dir.join("t.tmp").exists());
        assert_eq!(s.list().len(), 1);
        let mut b = std::fs::read(dir.join("s.slot")).unwrap();
        b[9] ^= 1;
        std::fs::write(dir.join("s.slot"), b).unwrap();
        let e = ReplicationSlots::load(Arc::new(walnut_io::RealVfs), tmp.path()).unwrap_err();
        assert_eq!(e.sqlstate, SqlState::DATA_CORRUPTED);
    }
}
