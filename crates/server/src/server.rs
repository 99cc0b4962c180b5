//! The listener: accepts TCP connections and runs each on its own backend thread (with its own
//! single-threaded runtime, see [`crate::backend`]) with a fresh [`Conn`]; shuts down on request.
//!
//! Shutdown (SIGINT/SIGTERM in `walnut serve`, or [`ServerHandle::shutdown`]):
//! 1. stop accepting;
//! 2. drop every connection task, which drops its `Conn` and so closes its backend's job
//!    channel; each backend thread calls `Session::terminate` (rolling back) and exits;
//! 3. set every session's cancel flag, so a statement still running (waiting on a row lock)
//!    stops with 57014 and its thread can exit;
//! 4. wait for all backend threads (bounded), after which the caller may close the engine.

use crate::backend::Registry;
use crate::config::ServerConfig;
use crate::protocol::{Conn, Shared};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use walnut_sql::storage::Engine;

/// A running server.
pub struct ServerHandle {
    addrs: Vec<SocketAddr>,
    stop: watch::Sender<bool>,
    acceptors: Vec<JoinHandle<()>>,
    registry: Arc<Registry>,
}

/// Resolves `listen_addresses` (comma-separated; `*` = every address, `localhost`).
async fn resolve(listen_addresses: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let mut out = Vec::new();
    for host in listen_addresses
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
    {
        match host {
            "*" => {
                out.push(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
                out.push(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
            }
            "localhost" => out.push(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)),
            _ => match host.parse::<IpAddr>() {
                Ok(ip) => out.push(SocketAddr::new(ip, port)),
                Err(_) => out.extend(tokio::net::lookup_host((host, port)).await?),
            },
        }
    }
    out.dedup();
    Ok(out)
}

/// Binds the listening sockets and starts accepting. Port 0 binds an ephemeral port (see
/// [`ServerHandle::local_addr`]).
///
/// # Errors
/// If no address could be bound.
pub async fn start(config: &ServerConfig, engine: Arc<dyn Engine>) -> io::Result<ServerHandle> {
    let registry = Registry::new(config.max_connections);
    let shared = Arc::new(Shared {
        engine,
        auth: config.auth.clone(),
        config: config.config.clone(),
        registry: registry.clone(),
        wal_source: config.wal_source.clone(),
    });
    let (stop, stop_rx) = watch::channel(false);
    let mut addrs: Vec<SocketAddr> = Vec::new();
    let mut acceptors = Vec::new();
    let mut last_error = None;
    for addr in resolve(&config.listen_addresses, config.port).await? {
        // With port 0 and several addresses, bind them all to the first one's port.
        let addr = match (addr.port(), addrs.first()) {
            (0, Some(first)) => SocketAddr::new(addr.ip(), first.port()),
            _ => addr,
        };
        let listener = match bind(addr) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("could not bind to address \"{addr}\": {e}");
                last_error = Some(e);
                continue;
            }
        };
        let local = listener.local_addr()?;
        let family = if local.is_ipv4() { "IPv4" } else { "IPv6" };
        tracing::info!(
            "listening on {family} address \"{}\", port {}",
            local.ip(),
            local.port()
        );
        addrs.push(local);
        acceptors.push(tokio::spawn(accept_loop(
            listener,
            shared.clone(),
            stop_rx.clone(),
            config.tls.clone(),
        )));
    }
    if addrs.is_empty() {
        return Err(last_error.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "listen_addresses names no address",
            )
        }));
    }
    Ok(ServerHandle {
        addrs,
        stop,
        acceptors,
        registry,
    })
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    tls: Option<pgwire::tokio::TlsAcceptor>,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            accepted = listener.accept() => accepted,
        };
        let (socket, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("could not accept new connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let conn = Conn::new(shared.clone());
        let tls = tls.clone();
        let mut stop = stop.clone();
        // Each connection gets its own OS thread and single-threaded runtime (see
        // crate::backend): its session may block there without stalling anyone else.
        let socket = match socket.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("could not hand over connection: {e}");
                continue;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("backend".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::warn!("could not start a connection runtime: {e}");
                        return;
                    }
                };
                rt.block_on(async move {
                    let socket = match tokio::net::TcpStream::from_std(socket) {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::warn!("could not register connection: {e}");
                            return;
                        }
                    };
                    let _ = socket.set_nodelay(true);
                    tokio::select! {
                        result = crate::protocol::serve(socket, tls, conn) => {
                            if let Err(e) = result {
                                tracing::debug!(%peer, "connection ended with error: {e}");
                            }
                        }
                        _ = stop.wait_for(|s| *s) => {}
                    }
                });
            });
        if let Err(e) = spawned {
            tracing::warn!("could not start a backend thread: {e}");
        }
    }
}

impl ServerHandle {
    /// The first bound address (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// All bound addresses.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The session registry (connection count, cancel keys).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Stops accepting, closes every connection, cancels running statements and waits up to
    /// `timeout` for every backend thread to finish. Returns whether all finished.
    pub async fn shutdown(self, timeout: Duration) -> bool {
        let _ = self.stop.send(true);
        for acceptor in self.acceptors {
            let _ = acceptor.await;
        }
        let registry = self.registry.clone();
        // Connection tasks see the stop signal and drop their Conn (and job channel); keep
        // cancelling whatever statement is still running until every backend has exited.
        let all_ended = tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + timeout;
            loop {
                registry.cancel_all();
                let step = deadline
                    .saturating_duration_since(std::time::Instant::now())
                    .min(Duration::from_millis(100));
                if registry.wait_all_ended(step) {
                    return true;
                }
                if std::time::Instant::now() >= deadline {
                    return false;
                }
            }
        })
        .await
        .unwrap_or(false);
        if !all_ended {
            tracing::warn!(
                sessions = self.registry.connection_count(),
                "sessions still running after {timeout:?}; shutting down anyway"
            );
        }
        all_ended
    }
}
