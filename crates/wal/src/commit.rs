//! What a commit asks of the WAL and what it gets back: one options type, [`CommitOpts`], from
//! the session's parameters down to the group-commit leader, and one outcome type,
//! [`CommitOutcome`], back up to the session. The storage engine and the SQL layer pass them
//! through unchanged (DESIGN.md, "The commit path").

use crate::guc::{COMMIT_DELAY, COMMIT_SIBLINGS, SYNCHRONOUS_COMMIT};
use std::sync::atomic::{AtomicU64, Ordering};
use walnut_common::guc::{GucDef, Val};
use walnut_common::{Error, Lsn};

/// A committing session's identity, which the adaptive group commit tracks to predict who may
/// still join a group (PostgreSQL keys the same knowledge by backend). Ids are never reused in
/// a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId(pub u64);

impl SessionId {
    /// A new id, never handed out before in this process.
    pub fn next() -> SessionId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        SessionId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// `synchronous_commit`: what a commit waits for before it is acknowledged. With
/// `synchronous_standby_names` set, `on`, `remote_write` and `remote_apply` also wait for the
/// synchronous standbys to flush, write or replay the commit record
/// ([`crate::senders::WalSenders::wait_for`]); without, they wait for the local flush only,
/// as in PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynchronousCommit {
    /// Acknowledge once the commit record is inserted; the WAL writer flushes it within
    /// `wal_writer_delay` (three times that at most, as PostgreSQL). A crash may lose the last
    /// commits, never corrupt anything.
    Off,
    /// Wait for the local flush.
    Local,
    /// Wait for the local flush (and, with synchronous standbys, their flush).
    On,
    /// As `on` here (with synchronous standbys: their write).
    RemoteWrite,
    /// As `on` here (with synchronous standbys: their replay).
    RemoteApply,
}

impl SynchronousCommit {
    /// The level a parameter value names.
    ///
    /// # Panics
    /// If `v` is not one of `synchronous_commit`'s values (the registry admits no other).
    pub fn from_val(v: &Val) -> SynchronousCommit {
        match v {
            Val::Enum("off") => SynchronousCommit::Off,
            Val::Enum("local") => SynchronousCommit::Local,
            Val::Enum("on") => SynchronousCommit::On,
            Val::Enum("remote_write") => SynchronousCommit::RemoteWrite,
            Val::Enum("remote_apply") => SynchronousCommit::RemoteApply,
            other => panic!("not a synchronous_commit value: {other:?}"),
        }
    }

    /// The commit waits for its record to be durable before it is acknowledged.
    pub fn waits_for_flush(self) -> bool {
        self != SynchronousCommit::Off
    }

    /// What the commit waits for from synchronous standbys, if any are configured.
    pub fn sync_level(self) -> Option<crate::senders::SyncLevel> {
        use crate::senders::SyncLevel;
        match self {
            SynchronousCommit::On => Some(SyncLevel::Flush),
            SynchronousCommit::RemoteWrite => Some(SyncLevel::Write),
            SynchronousCommit::RemoteApply => Some(SyncLevel::Apply),
            SynchronousCommit::Off | SynchronousCommit::Local => None,
        }
    }
}

/// A commit's settings, from the committing session's parameters to the WAL flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitOpts {
    /// Who commits.
    pub session: SessionId,
    /// `synchronous_commit`.
    pub synchronous_commit: SynchronousCommit,
    /// `commit_delay`, µs: with `group_commit = fixed` the leader sleeps this long before
    /// flushing if at least `commit_siblings` other transactions are active. 0 = never.
    pub commit_delay_us: u32,
    /// `commit_siblings`: other active transactions needed for the delay.
    pub commit_siblings: u32,
}

fn int(def: &'static GucDef) -> u32 {
    match def.default_value() {
        Val::Int(v) => v as u32,
        other => panic!("parameter \"{}\" is not an integer: {other:?}", def.name),
    }
}

impl CommitOpts {
    /// `session`'s commit with every parameter at its default.
    pub fn new(session: SessionId) -> CommitOpts {
        CommitOpts {
            session,
            synchronous_commit: SynchronousCommit::from_val(&SYNCHRONOUS_COMMIT.default_value()),
            commit_delay_us: int(&COMMIT_DELAY),
            commit_siblings: int(&COMMIT_SIBLINGS),
        }
    }
}

/// What a commit did, from the WAL back to the session.
#[derive(Debug)]
pub struct CommitOutcome {
    /// End of the commit record; [`Lsn::INVALID`] if the transaction wrote nothing and needed
    /// no record.
    pub lsn: Lsn,
    /// The commit record was durable when the commit returned (false only with
    /// `synchronous_commit = off`).
    pub durable: bool,
    /// Work after the commit that failed (removing a dropped relation's file, reloading the
    /// catalog cache). The commit stands: each was logged as a WARNING and is retried later;
    /// the session sends them to the client as WARNING notices, as PostgreSQL does.
    pub warnings: Vec<Error>,
}

impl CommitOutcome {
    /// The outcome of a transaction that wrote nothing: no record, nothing to wait for.
    pub fn read_only() -> CommitOutcome {
        CommitOutcome {
            lsn: Lsn::INVALID,
            durable: true,
            warnings: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_come_from_the_parameters() {
        let s = SessionId::next();
        let o = CommitOpts::new(s);
        assert_eq!(o.session, s);
        assert_eq!(o.synchronous_commit, SynchronousCommit::On);
        assert_eq!((o.commit_delay_us, o.commit_siblings), (0, 5));
        assert_ne!(SessionId::next(), s);
        assert!(!SynchronousCommit::Off.waits_for_flush());
        assert!(SynchronousCommit::RemoteApply.waits_for_flush());
    }
}
