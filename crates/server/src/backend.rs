//! Backends: each connection runs on its own OS thread (`backend-<pid>`, PostgreSQL's process
//! per connection) with its own single-threaded tokio runtime, which drives pgwire for that
//! connection only. The [`Session`] lives on that thread and its methods are called directly:
//! when a statement blocks (row lock, WAL flush, fsync) it blocks only its own connection's
//! runtime, never a shared tokio worker; the listener and every other connection run on other
//! threads. This costs no thread hop per protocol message (an earlier design that sent each
//! message to a separate session thread spent most of pgbench select-only's CPU in context
//! switches).
//!
//! The [`Registry`] counts sessions (for `max_connections`) and maps a backend's pid to its
//! cancel key and cancel flag (for CancelRequest, which arrives on another connection).

use parking_lot::{Condvar, Mutex};
use pgwire::messages::startup::SecretKey;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use walnut_common::config::Config;
use walnut_common::{Error, ErrorKind, Result, SqlState};
use walnut_sql::session::Session;
use walnut_sql::storage::Engine;

/// A connection's session, owned by the connection's backend thread.
pub struct Backend {
    session: Mutex<Option<Session>>,
    slot: Arc<CancelSlot>,
    pid: i32,
    /// Dropped after the session is terminated (field order): frees the connection slot.
    _reservation: Reservation,
}

/// What a new session reports once it exists.
pub struct SessionStart {
    /// ParameterStatus pairs from [`Session::startup_parameters`].
    pub parameters: Vec<(String, String)>,
}

impl Backend {
    /// Creates the session with `Session::new(engine, config, options)` on the calling thread
    /// (the connection's backend thread), tells it its pid and `database` (the name the
    /// client connected with: `pg_backend_pid()`, the progress views) and who `client` is
    /// (its `pg_stat_activity` row), and registers it for cancellation.
    ///
    /// # Errors
    /// The errors of `Session::new`.
    pub async fn start(
        reservation: Reservation,
        secret: SecretKey,
        engine: Arc<dyn Engine>,
        config: Arc<Config>,
        options: Vec<(String, String)>,
        database: &str,
        client: walnut_sql::activity::ClientIdentity,
    ) -> Result<(Backend, SessionStart)> {
        let pid = reservation.pid;
        let mut session = Session::new(engine, config, &options)?;
        session.set_backend(pid, database);
        session.set_client(client);
        let slot = Arc::new(CancelSlot {
            secret,
            flag: session.cancel_flag(),
            busy: Mutex::new(false),
        });
        reservation.registry.register(pid, slot.clone());
        let start = SessionStart {
            parameters: session.startup_parameters(),
        };
        Ok((
            Backend {
                session: Mutex::new(Some(session)),
                slot,
                pid,
                _reservation: reservation,
            },
            start,
        ))
    }

    /// The backend's process id (as sent in BackendKeyData).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Runs `f` with the session, on this (the connection's own) thread, and returns its result.
    ///
    /// # Errors
    /// 57P01 (cancellation) if the session is gone: the server terminated it.
    pub async fn call<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut Session) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.slot.start();
        let mut guard = self.session.lock();
        let result = match guard.as_mut() {
            Some(session) => Ok(f(session)),
            None => Err(Error::terminated()),
        };
        drop(guard);
        self.slot.finish();
        result
    }

    /// As [`Backend::call`] (kept for call sites that expect another message right after).
    ///
    /// # Errors
    /// As for [`Backend::call`].
    pub async fn call_expecting_more<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut Session) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.call(f).await
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(mut session) = self.session.lock().take() {
            session.terminate();
            tracing::debug!(pid = self.pid, "backend exited");
        }
    }
}

/// A session's cancel key and flag.
pub struct CancelSlot {
    secret: SecretKey,
    flag: Arc<AtomicBool>,
    /// True while a job is queued or running. Guarded so that a cancel cannot set the flag
    /// after the job it was meant for has finished (it would cancel the next one).
    busy: Mutex<bool>,
}

impl CancelSlot {
    fn start(&self) {
        *self.busy.lock() = true;
    }

    fn finish(&self) {
        let mut busy = self.busy.lock();
        *busy = false;
        self.flag.store(false, Ordering::Release);
    }

    /// Sets the cancel flag if a job is in flight (PostgreSQL ignores a cancel for an idle
    /// backend). Returns whether it did.
    fn cancel(&self) -> bool {
        let busy = self.busy.lock();
        if *busy {
            self.flag.store(true, Ordering::Release);
        }
        *busy
    }
}

/// All sessions of a server: the connection count and the cancel keys.
pub struct Registry {
    max_connections: usize,
    state: Mutex<RegistryState>,
    /// Notified whenever a session ends.
    ended: Condvar,
    next_pid: AtomicI32,
    random: RandomState,
    cancels_delivered: AtomicU64,
}

struct RegistryState {
    /// Sessions starting or running (each holds a [`Reservation`]).
    count: usize,
    slots: HashMap<i32, Arc<CancelSlot>>,
}

/// One reserved connection slot; dropping it frees the slot and forgets the cancel key.
pub struct Reservation {
    registry: Arc<Registry>,
    pid: i32,
}

impl Reservation {
    /// The pid given to this session.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = self.registry.state.lock();
        state.count -= 1;
        state.slots.remove(&self.pid);
        drop(state);
        self.registry.ended.notify_all();
    }
}

impl Registry {
    /// A registry admitting at most `max_connections` sessions.
    pub fn new(max_connections: usize) -> Arc<Registry> {
        // Pids look like PostgreSQL's but never collide with a real backend's, which would
        // confuse `pg_terminate_backend`-style tooling reading them as OS pids.
        let first_pid = 10_000 + (std::process::id() % 10_000) as i32 * 100;
        Arc::new(Registry {
            max_connections,
            state: Mutex::new(RegistryState {
                count: 0,
                slots: HashMap::new(),
            }),
            ended: Condvar::new(),
            next_pid: AtomicI32::new(first_pid),
            random: RandomState::new(),
            cancels_delivered: AtomicU64::new(0),
        })
    }

    /// Reserves a connection slot and picks a pid.
    ///
    /// # Errors
    /// 53300 "sorry, too many clients already" when `max_connections` sessions exist.
    pub fn reserve(self: &Arc<Self>) -> Result<Reservation> {
        let mut state = self.state.lock();
        if state.count >= self.max_connections {
            return Err(Error::new(
                ErrorKind::Resource,
                SqlState::TOO_MANY_CONNECTIONS,
                "sorry, too many clients already",
            ));
        }
        state.count += 1;
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        Ok(Reservation {
            registry: self.clone(),
            pid,
        })
    }

    /// A fresh random cancel key: 4 bytes for protocol 3.0, 32 bytes for 3.2.
    pub fn new_secret(&self, pid: i32, long: bool) -> SecretKey {
        let word = |i: u64| {
            self.random
                .hash_one((pid, i, Instant::now(), std::thread::current().id()))
        };
        if long {
            let mut bytes = Vec::with_capacity(32);
            for i in 0..4 {
                bytes.extend_from_slice(&word(i).to_be_bytes());
            }
            SecretKey::Bytes(bytes.into())
        } else {
            SecretKey::I32(word(0) as i32)
        }
    }

    fn register(&self, pid: i32, slot: Arc<CancelSlot>) {
        self.state.lock().slots.insert(pid, slot);
    }

    /// Handles a CancelRequest: if `(pid, secret)` names a live session with a statement in
    /// flight, sets its cancel flag. Returns whether the key matched a session.
    pub fn cancel(&self, pid: i32, secret: &SecretKey) -> bool {
        let slot = self.state.lock().slots.get(&pid).cloned();
        match slot {
            Some(slot) if slot.secret.eq_value(secret) => {
                if slot.cancel() {
                    self.cancels_delivered.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
            _ => false,
        }
    }

    /// Number of cancel requests that reached a busy session (for tests and logs).
    pub fn cancels_delivered(&self) -> u64 {
        self.cancels_delivered.load(Ordering::Relaxed)
    }

    /// Sessions starting or running.
    pub fn connection_count(&self) -> usize {
        self.state.lock().count
    }

    /// Sets every session's cancel flag (shutdown: in-flight statements stop with 57014).
    pub fn cancel_all(&self) {
        for slot in self.state.lock().slots.values() {
            slot.cancel();
        }
    }

    /// Blocks until no session exists or `timeout` passes; returns whether all ended.
    /// Call from a blocking context only.
    pub fn wait_all_ended(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock();
        while state.count > 0 {
            if self.ended.wait_until(&mut state, deadline).timed_out() {
                return state.count == 0;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_counted() {
        let registry = Registry::new(2);
        let a = registry.reserve().unwrap();
        let _b = registry.reserve().unwrap();
        let err = registry
            .reserve()
            .err()
            .expect("third reservation must fail");
        assert_eq!(err.sqlstate, SqlState::TOO_MANY_CONNECTIONS);
        assert_ne!(a.pid(), _b.pid());
        drop(a);
        assert_eq!(registry.connection_count(), 1);
        assert!(registry.reserve().is_ok());
    }

    #[test]
    fn cancel_needs_matching_key_and_busy_session() {
        let registry = Registry::new(5);
        let r = registry.reserve().unwrap();
        let flag = Arc::new(AtomicBool::new(false));
        let secret = registry.new_secret(r.pid(), false);
        let slot = Arc::new(CancelSlot {
            secret: secret.clone(),
            flag: flag.clone(),
            busy: Mutex::new(false),
        });
        registry.register(r.pid(), slot.clone());
        assert!(
            !registry.cancel(r.pid(), &SecretKey::I32(12345))
                || secret.eq_value(&SecretKey::I32(12345))
        );
        // Idle: the key matches but nothing is cancelled.
        assert!(registry.cancel(r.pid(), &secret));
        assert!(!flag.load(Ordering::Acquire));
        slot.start();
        assert!(registry.cancel(r.pid(), &secret));
        assert!(flag.load(Ordering::Acquire));
        slot.finish();
        assert!(!flag.load(Ordering::Acquire));
        drop(r);
        assert!(!registry.cancel(0, &secret));
    }
}
