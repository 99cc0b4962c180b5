//! The transaction-block state machine (PostgreSQL's `xact.c` block states, reduced to four).
//!
//! ```text
//!             BEGIN                       error
//!   Idle ─────────────────► Explicit ─────────────► Failed
//!    │ ▲                     │   ▲                    │
//!    │ └── COMMIT/ROLLBACK ──┘   │ BEGIN (warning)    │ COMMIT (answers ROLLBACK) / ROLLBACK
//!    │ ▲                                             ▼
//!    │ └─────────────────────────────────────────── Idle
//!    │ multi-statement simple query
//!    └──────────────► Implicit ── end of the query (commit) / error (rollback) ──► Idle
//! ```
//!
//! - **Idle**: each statement runs in its own transaction and commits when it succeeds.
//! - **Implicit**: a simple query of several statements outside a block runs as one
//!   transaction, committed at the end, rolled back on error.
//! - **Explicit**: after BEGIN. An error moves to Failed and rolls the engine transaction back at
//!   once.
//! - **Failed**: every statement but COMMIT and ROLLBACK gets 25P02; COMMIT answers ROLLBACK.
//!   `SET`s made in the block are undone when it ends.
//!
//! Every end of a transaction goes through [`TxnBlock::commit`] or [`TxnBlock::abort`], which
//! also end it in the session's parameters ([`Gucs::end_txn`]).

use super::gucs::Gucs;
use crate::plan::TxnModes;
use crate::storage::{Engine, Isolation, Transaction};
use crate::types::{Notice, Output, TxnStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use walnut_common::{Error, Result, SqlState};

/// Transaction-block state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Block {
    /// No block: each statement commits on its own.
    Idle,
    /// Running a multi-statement simple query outside a block.
    Implicit,
    /// After BEGIN.
    Explicit,
    /// An error happened in the block.
    Failed,
}

/// The session's block state and its engine transaction, if one is open.
pub(crate) struct TxnBlock {
    state: Block,
    txn: Option<Box<dyn Transaction>>,
    /// Transaction start (CURRENT_TIMESTAMP), µs since 2000-01-01.
    start: i64,
    /// The open transaction is READ ONLY: statements that write fail with 25006.
    read_only: bool,
    /// A statement that reads or writes data has run in the open transaction, so it can no
    /// longer become READ WRITE (nor change its isolation level, which the engine checks).
    queried: bool,
}

/// What a transaction starts with: `default_transaction_isolation` and
/// `default_transaction_read_only`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TxnDefaults {
    pub isolation: Isolation,
    pub read_only: bool,
}

/// 25P02, for statements in a failed block.
pub(crate) fn in_failed_block() -> Error {
    Error::user(
        SqlState::IN_FAILED_SQL_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

fn command(tag: &str) -> Output {
    Output::Command { tag: tag.into() }
}

impl TxnBlock {
    /// Idle, no transaction.
    pub(crate) fn new() -> TxnBlock {
        TxnBlock {
            state: Block::Idle,
            txn: None,
            start: 0,
            read_only: false,
            queried: false,
        }
    }

    /// The block state.
    pub(crate) fn state(&self) -> Block {
        self.state
    }

    /// Inside a block (implicit, explicit or failed).
    pub(crate) fn in_block(&self) -> bool {
        self.state != Block::Idle
    }

    /// The status ReadyForQuery reports.
    pub(crate) fn status(&self) -> TxnStatus {
        match self.state {
            Block::Idle | Block::Implicit => TxnStatus::Idle,
            Block::Explicit => TxnStatus::InBlock,
            Block::Failed => TxnStatus::Failed,
        }
    }

    /// The transaction's start (CURRENT_TIMESTAMP), µs since 2000-01-01.
    pub(crate) fn start(&self) -> i64 {
        self.start
    }

    /// An engine transaction is open.
    pub(crate) fn has_txn(&self) -> bool {
        self.txn.is_some()
    }

    /// The open engine transaction.
    pub(crate) fn txn(&mut self) -> Option<&mut (dyn Transaction + 'static)> {
        self.txn.as_deref_mut()
    }

    /// Takes the open transaction out for a statement (put it back with [`TxnBlock::put`]).
    pub(crate) fn take(&mut self) -> Option<Box<dyn Transaction>> {
        self.txn.take()
    }

    /// Puts back what [`TxnBlock::take`] took.
    pub(crate) fn put(&mut self, txn: Box<dyn Transaction>) {
        debug_assert!(self.txn.is_none());
        self.txn = Some(txn);
    }

    /// A simple query of several statements starts outside a block.
    pub(crate) fn begin_implicit(&mut self) {
        if self.state == Block::Idle {
            self.state = Block::Implicit;
        }
    }

    /// Opens the engine transaction with `defaults` if none is open.
    ///
    /// # Errors
    /// The engine's (0A000 for REPEATABLE READ on a hot standby).
    pub(crate) fn ensure(
        &mut self,
        engine: &dyn Engine,
        cancel: &Arc<AtomicBool>,
        defaults: TxnDefaults,
    ) -> Result<()> {
        if self.txn.is_none() {
            let mut txn = engine.begin(cancel.clone())?;
            txn.set_isolation(defaults.isolation)?;
            self.txn = Some(txn);
            self.start = walnut_common::value::now_timestamp();
            self.read_only = defaults.read_only;
            self.queried = false;
        }
        Ok(())
    }

    /// The open transaction's isolation level and READ ONLY mode, if one is open.
    pub(crate) fn modes(&self) -> Option<(Isolation, bool)> {
        self.txn.as_ref().map(|t| (t.isolation(), self.read_only))
    }

    /// A statement that reads or writes data is about to run in the open transaction.
    pub(crate) fn note_query(&mut self) {
        self.queried = true;
    }

    /// The transaction is READ ONLY (the open one, also while a statement has taken it out
    /// with [`TxnBlock::take`]).
    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    /// Applies `modes` to the open transaction (PostgreSQL's `check_transaction_isolation` and
    /// `check_transaction_read_only`): READ ONLY at any time, READ WRITE and a change of level
    /// only before its first query.
    ///
    /// # Errors
    /// 25001 after a query; the engine's (0A000 for REPEATABLE READ on a hot standby).
    pub(crate) fn set_modes(&mut self, modes: TxnModes) -> Result<()> {
        let Some(t) = self.txn.as_deref_mut() else {
            return Ok(());
        };
        if let Some(level) = modes.isolation {
            t.set_isolation(level)?;
        }
        match modes.read_only {
            Some(false) if self.read_only && self.queried => Err(Error::user(
                SqlState::ACTIVE_SQL_TRANSACTION,
                "transaction read-write mode must be set before any query",
            )),
            Some(ro) => {
                self.read_only = ro;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Commits the open transaction, if any, and returns to Idle. Warnings about work after
    /// the durable commit become notices.
    ///
    /// # Errors
    /// The commit's (then the transaction is over, rolled back).
    pub(crate) fn commit(&mut self, gucs: &mut Gucs, notices: &mut Vec<Notice>) -> Result<()> {
        self.state = Block::Idle;
        let r = match self.txn.take() {
            Some(t) => t.commit(&gucs.commit).map(|outcome| {
                notices.extend(outcome.warnings.into_iter().map(|e| Notice {
                    severity: "WARNING",
                    sqlstate: e.sqlstate,
                    message: e.message,
                    detail: e.detail,
                }));
            }),
            None => Ok(()),
        };
        gucs.end_txn(r.is_ok());
        r
    }

    /// Rolls the open transaction back, if any, and returns to Idle.
    pub(crate) fn abort(&mut self, gucs: &mut Gucs) {
        if let Some(t) = self.txn.take() {
            t.rollback();
        }
        self.state = Block::Idle;
        gucs.end_txn(false);
    }

    /// An error inside a block: the engine transaction ends now; the block stays failed until
    /// ROLLBACK or COMMIT (SETs are undone then).
    pub(crate) fn fail(&mut self) {
        if let Some(t) = self.txn.take() {
            t.rollback();
        }
        self.state = Block::Failed;
    }

    /// An error in parsing a simple query: an explicit block fails.
    pub(crate) fn parse_error(&mut self) {
        if self.state == Block::Explicit {
            self.fail();
        }
    }

    /// BEGIN, with the modes `named` and else `defaults` (inside a block: a warning, and the
    /// block keeps its modes).
    ///
    /// # Errors
    /// 25P02 in a failed block; the engine's; 25001 for a level named after a statement of an
    /// implicit block.
    pub(crate) fn begin(
        &mut self,
        engine: &dyn Engine,
        cancel: &Arc<AtomicBool>,
        notices: &mut Vec<Notice>,
        named: TxnModes,
        defaults: TxnDefaults,
    ) -> Result<Output> {
        match self.state {
            Block::Idle | Block::Implicit => {
                if self.txn.is_some() {
                    // An implicit block that already ran a statement.
                    self.set_modes(named)?;
                } else {
                    let first = TxnDefaults {
                        isolation: named.isolation.unwrap_or(defaults.isolation),
                        read_only: named.read_only.unwrap_or(defaults.read_only),
                    };
                    self.ensure(engine, cancel, first)?;
                }
                self.state = Block::Explicit;
            }
            Block::Explicit => notices.push(Notice::new(
                "WARNING",
                SqlState::ACTIVE_SQL_TRANSACTION,
                "there is already a transaction in progress",
            )),
            Block::Failed => return Err(in_failed_block()),
        }
        Ok(command("BEGIN"))
    }

    /// COMMIT: commits a block, answers ROLLBACK in a failed one, warns outside one.
    ///
    /// # Errors
    /// The commit's.
    pub(crate) fn commit_command(
        &mut self,
        gucs: &mut Gucs,
        notices: &mut Vec<Notice>,
    ) -> Result<Output> {
        match self.state {
            Block::Idle => {
                notices.push(no_transaction_warning());
                Ok(command("COMMIT"))
            }
            Block::Explicit | Block::Implicit => {
                self.commit(gucs, notices)?;
                Ok(command("COMMIT"))
            }
            Block::Failed => {
                self.abort(gucs);
                Ok(command("ROLLBACK"))
            }
        }
    }

    /// ROLLBACK (warns outside a block).
    pub(crate) fn rollback_command(
        &mut self,
        gucs: &mut Gucs,
        notices: &mut Vec<Notice>,
    ) -> Output {
        if self.state == Block::Idle {
            notices.push(no_transaction_warning());
        }
        self.abort(gucs);
        command("ROLLBACK")
    }

    /// PostgreSQL's end-of-statement rules: on success, commit if the statement ran on its
    /// own (`autocommit`; with `copy_open` a COPY is still streaming and the commit waits for
    /// its end); on error, roll back outside a block or fail the block.
    ///
    /// # Errors
    /// `r`'s error, or the commit's.
    pub(crate) fn finish_statement(
        &mut self,
        r: Result<Output>,
        autocommit: bool,
        copy_open: bool,
        gucs: &mut Gucs,
        notices: &mut Vec<Notice>,
        cancel: &AtomicBool,
    ) -> Result<Output> {
        match r {
            Ok(out) => {
                let ends = match self.state {
                    Block::Idle => true,
                    // A COPY that ran as the last statement of an implicit block.
                    Block::Implicit => !copy_open,
                    Block::Explicit | Block::Failed => false,
                };
                if autocommit && ends {
                    self.commit(gucs, notices)?;
                }
                Ok(out)
            }
            Err(e) => {
                if e.sqlstate == SqlState::QUERY_CANCELED {
                    cancel.store(false, Ordering::Relaxed);
                }
                match self.state {
                    Block::Explicit => self.fail(),
                    Block::Failed => {}
                    Block::Idle | Block::Implicit => self.abort(gucs),
                }
                Err(e)
            }
        }
    }
}

/// 25P01 WARNING `there is no transaction in progress`.
fn no_transaction_warning() -> Notice {
    Notice::new(
        "WARNING",
        SqlState::NO_ACTIVE_SQL_TRANSACTION,
        "there is no transaction in progress",
    )
}
