//! The `walnut` binary: `initdb`, `serve`, `demo`, `test-fsync`, `passwd`, `basebackup`,
//! `verify`.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use walnut_server::config::{self, ServerConfig};
use walnut_server::{demo, engine, guc, server, test_fsync};

/// walnut: a transactional row store that speaks PostgreSQL's wire protocol.
#[derive(Parser)]
#[command(name = "walnut", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a new data directory.
    Initdb {
        /// The data directory to create (must not exist or be empty).
        #[arg(short = 'D', long = "pgdata", value_name = "DIR")]
        dir: PathBuf,
    },
    /// Run the server on a data directory.
    Serve {
        /// The data directory.
        #[arg(short = 'D', long = "pgdata", value_name = "DIR")]
        dir: PathBuf,
        /// TCP port to listen on (default: `port` in walnut.conf, else 5433).
        #[arg(short = 'p', long)]
        port: Option<u16>,
        /// Set a configuration parameter, overriding walnut.conf (repeatable).
        #[arg(short = 'c', value_name = "NAME=VALUE")]
        settings: Vec<String>,
    },
    /// Load pgbench's tables into a temporary database and run pgbench's simple-update
    /// workload against an in-process server.
    Demo {
        /// How long to run the workload.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Concurrent client connections.
        #[arg(long, default_value_t = 10)]
        clients: usize,
        /// pgbench scale factor (100,000 accounts per unit).
        #[arg(long, default_value_t = 1)]
        scale: u32,
    },
    /// Measure how fast the disk holding DIR makes WAL flushes durable, for each
    /// wal_sync_method (and fdatasync with wal_sync_range), buffered and with O_DIRECT (like
    /// pg_test_fsync).
    TestFsync {
        /// Any directory on the disk to measure, e.g. a data directory; a temporary file
        /// (walnut_probe.tmp) is written there and removed.
        #[arg(short = 'D', long = "pgdata", value_name = "DIR")]
        dir: PathBuf,
        /// Seconds to measure each method, buffered and direct (8 runs in all).
        #[arg(long, default_value_t = 2.0, value_name = "S")]
        seconds: f64,
        /// Bytes written per flush (rounded up to 4096 for O_DIRECT).
        #[arg(long, default_value_t = 8192, value_name = "BYTES")]
        size: usize,
        /// Pause after each flush, µs (0: back to back), as a paced workload does.
        #[arg(long, default_value_t = 0, value_name = "US")]
        interval_us: u64,
    },
    /// Set (or with --remove, remove) a role's password, stored as a SCRAM-SHA-256 verifier in
    /// DIR/global/pg_authid. The password is read from the first line of standard input.
    /// Connections use it where pg_hba.conf says scram-sha-256.
    Passwd {
        /// The data directory.
        #[arg(short = 'D', long = "pgdata", value_name = "DIR")]
        dir: PathBuf,
        /// The role (user name).
        #[arg(short = 'U', long = "username", value_name = "ROLE")]
        role: String,
        /// Remove the role's password instead.
        #[arg(long)]
        remove: bool,
    },
    /// Copy a running server's data directory over a replication connection (BASE_BACKUP),
    /// with the WAL that makes the copy consistent, like pg_basebackup. The copy recovers to
    /// the backup's end on its first start. A progress bar shows on a terminal; PGPASSWORD
    /// gives the password where pg_hba.conf asks for one.
    #[command(disable_help_flag = true)]
    Basebackup {
        /// The server's host.
        #[arg(short = 'h', long, default_value = "127.0.0.1")]
        host: String,
        /// The server's port.
        #[arg(short = 'p', long, default_value_t = 5433)]
        port: u16,
        /// The role to connect as (default: PGUSER, else postgres).
        #[arg(short = 'U', long = "username", value_name = "ROLE")]
        user: Option<String>,
        /// The directory to write the copy into (must not exist or be empty).
        #[arg(short = 'D', long = "pgdata", value_name = "DIR")]
        dir: PathBuf,
        /// The backup's label (in backup_label).
        #[arg(short = 'l', long, default_value = "walnut basebackup")]
        label: String,
        /// Make the copy a standby of the server: create an empty standby.signal and append
        /// primary_conninfo (user, PGPASSWORD if set, host, port), and with --slot
        /// primary_slot_name, to walnut.auto.conf (like pg_basebackup -R).
        #[arg(short = 'R', long)]
        write_recovery_conf: bool,
        /// The physical replication slot the standby streams from: checked to exist before the
        /// backup (or created, with --create-slot); written as primary_slot_name with -R.
        #[arg(short = 'S', long, value_name = "SLOTNAME")]
        slot: Option<String>,
        /// Create the --slot slot (physical, reserving WAL at once) before the backup; fails if
        /// it exists.
        #[arg(short = 'C', long, requires = "slot")]
        create_slot: bool,
        /// Print help.
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Check a cleanly shut down data directory offline: page checksums, the catalog, heaps,
    /// B-tree structure, and that every index agrees with its heap (like pg_checksums and
    /// amcheck). Exit status 0: no problems; 1: problems found (listed); 2: could not run.
    Verify {
        /// The data directory.
        #[arg(short = 'D', long = "pgdata", value_name = "DIR")]
        dir: PathBuf,
    },
    /// Promote the standby running on DIR: it stops streaming, replays the WAL it has
    /// received, and opens for writes (like pg_ctl promote). Waits until it has, unless
    /// --no-wait.
    Promote {
        /// The standby's data directory.
        #[arg(short = 'D', long = "pgdata", value_name = "DIR")]
        dir: PathBuf,
        /// Return at once instead of waiting for the promotion to end.
        #[arg(short = 'W', long = "no-wait")]
        no_wait: bool,
        /// How long to wait, seconds.
        #[arg(short = 't', long = "timeout", default_value_t = 60)]
        timeout: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Initdb { dir } => initdb(&dir),
        Command::Serve {
            dir,
            port,
            settings,
        } => serve(&dir, port, &settings),
        Command::Demo {
            seconds,
            clients,
            scale,
        } => {
            walnut_server::init_logging("warn");
            demo::run(demo::DemoOptions {
                seconds,
                clients,
                scale,
            })
        }
        Command::Basebackup {
            host,
            port,
            user,
            dir,
            label,
            write_recovery_conf,
            slot,
            create_slot,
            help: _,
        } => walnut_server::basebackup::run(&walnut_server::basebackup::BaseBackupArgs {
            conn: walnut_server::repl_client::ConnInfo {
                host,
                port,
                user: user
                    .or_else(|| std::env::var("PGUSER").ok())
                    .unwrap_or_else(|| "postgres".into()),
                password: std::env::var("PGPASSWORD").ok(),
                application_name: "walnut_basebackup".into(),
            },
            dir,
            label,
            write_recovery_conf,
            slot,
            create_slot,
        }),
        Command::TestFsync {
            dir,
            seconds,
            size,
            interval_us,
        } => test_fsync::run(&test_fsync::Options {
            dir,
            seconds,
            size,
            interval_us,
        }),
        Command::Verify { dir } => return verify(&dir),
        Command::Promote {
            dir,
            no_wait,
            timeout,
        } => promote(&dir, !no_wait, std::time::Duration::from_secs(timeout)),
        Command::Passwd { dir, role, remove } => passwd(&dir, &role, remove),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("walnut: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `walnut verify -D DIR`: prints the report; exit status 0 if nothing is wrong, 1 if the
/// check found problems, 2 if it could not run (not shut down cleanly, unreadable files).
fn verify(dir: &Path) -> ExitCode {
    match walnut_storage::verify::verify(std::sync::Arc::new(walnut_io::RealVfs), dir) {
        Ok(report) => {
            print!("{report}");
            if report.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("walnut: error: could not verify \"{}\": {e}", dir.display());
            ExitCode::from(2)
        }
    }
}

/// `walnut promote -D DIR` (PostgreSQL's `pg_ctl promote`): writes the `promote` signal file,
/// which the standby's startup thread picks up within 100 ms, then waits for `standby.signal`
/// to go (the standby removes it once its end-of-recovery checkpoint is durable).
fn promote(dir: &Path, wait: bool, timeout: std::time::Duration) -> Result<(), String> {
    use walnut_storage::standby::{PROMOTE_SIGNAL, STANDBY_SIGNAL};
    let standby = dir.join(STANDBY_SIGNAL);
    if !standby.exists() {
        return Err(format!(
            "cannot promote server: \"{}\" is not in standby mode (no {STANDBY_SIGNAL})",
            dir.display()
        ));
    }
    let signal = dir.join(PROMOTE_SIGNAL);
    std::fs::write(&signal, b"").map_err(|e| {
        format!(
            "could not write promote signal file \"{}\": {e}",
            signal.display()
        )
    })?;
    if !wait {
        println!("server promoting");
        return Ok(());
    }
    print!("waiting for server to promote...");
    let t0 = std::time::Instant::now();
    while standby.exists() {
        if t0.elapsed() >= timeout {
            println!(" stopped waiting");
            return Err("server did not promote in time".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    println!(" done\nserver promoted");
    Ok(())
}

/// `walnut passwd`: the password is the first line of standard input (without its newline).
fn passwd(dir: &Path, role: &str, remove: bool) -> Result<(), String> {
    if !dir.join("global").is_dir() {
        return Err(format!("\"{}\" is not a data directory", dir.display()));
    }
    if remove {
        walnut_server::authid::set_password(dir, role, None)?;
        println!("removed the password of role \"{role}\"");
        return Ok(());
    }
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| format!("could not read the password from standard input: {e}"))?;
    let pw = line.trim_end_matches(['\n', '\r']);
    walnut_server::authid::set_password(dir, role, Some(pw))?;
    println!("set the password of role \"{role}\" (SCRAM-SHA-256)");
    Ok(())
}

fn initdb(dir: &Path) -> Result<(), String> {
    engine::initdb(dir).map_err(|e| {
        format!(
            "could not initialize data directory \"{}\": {e}",
            dir.display()
        )
    })?;
    println!(
        "Success. The database cluster was initialized in \"{}\".",
        dir.display()
    );
    println!();
    println!(
        "Authentication is \"trust\" for connections from this machine (pg_hba.conf): any local \
         user can connect as any database user. The server listens on localhost only \
         (listen_addresses = '{}'). To require passwords, set them with `walnut passwd -D {} -U \
         ROLE` and change the method in pg_hba.conf to scram-sha-256.",
        guc::LISTEN_ADDRESSES.default,
        dir.display()
    );
    println!();
    println!("You can now start the database server using:");
    println!();
    println!("    walnut serve -D {}", dir.display());
    println!();
    println!(
        "and connect with: psql -h 127.0.0.1 -p {}",
        guc::PORT.default
    );
    Ok(())
}

fn serve(dir: &Path, port: Option<u16>, overrides: &[String]) -> Result<(), String> {
    let cfg = config::load(dir, overrides, port).map_err(|e| e.to_string())?;
    let log_level =
        |s: &walnut_common::guc::Settings| guc::tracing_level(&s.text(&guc::LOG_MIN_MESSAGES));
    walnut_server::init_logging(log_level(&cfg.settings()));
    cfg.on_reload(move |s| walnut_server::set_log_level(log_level(s)));
    let mut config = ServerConfig::new(cfg.clone());
    config.auth = std::sync::Arc::new(config::AuthConfig::load(dir).map_err(|e| e.to_string())?);
    config.tls = config::tls_acceptor(dir, &cfg.settings()).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("walnut-net")
        .build()
        .map_err(|e| format!("could not start runtime: {e}"))?;
    runtime.block_on(async move {
        let dir_owned = dir.to_path_buf();
        // Opening may run crash recovery: blocking work, off the runtime's workers.
        let cfg_open = cfg.clone();
        let handle_engine =
            tokio::task::spawn_blocking(move || engine::open(&dir_owned, &cfg_open))
                .await
                .map_err(|e| format!("could not open data directory: {e}"))?
                .map_err(|e| format!("could not open data directory \"{}\": {e}", dir.display()))?;
        let engine: std::sync::Arc<dyn walnut_sql::storage::Engine> = handle_engine.clone();
        let mut config = config;
        config.wal_source = Some(std::sync::Arc::new(
            walnut_server::protocol::walsender::WalSource {
                storage: handle_engine.storage.clone(),
            },
        ));
        let handle = server::start(&config, engine).await.map_err(|e| {
            format!(
                "could not listen on {}:{}: {e}",
                config.listen_addresses, config.port
            )
        })?;
        tracing::info!("database system is ready to accept connections");
        let signal = wait_for_signal(&cfg).await;
        tracing::info!(
            "received {signal}, shutting down: closing connections, rolling back open transactions"
        );
        handle.shutdown(Duration::from_secs(30)).await;
        // The shutdown checkpoint (so the next start replays nothing): blocking work.
        let storage = handle_engine.storage.clone();
        match tokio::task::spawn_blocking(move || storage.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("shutdown checkpoint failed: {e}"),
            Err(e) => tracing::error!("shutdown checkpoint failed: {e}"),
        }
        tracing::info!("database system is shut down");
        Ok(())
    })
}

/// Waits for SIGINT or SIGTERM and returns which; on each SIGHUP reloads the configuration
/// files (`pg_ctl reload`), off the runtime's workers.
async fn wait_for_signal(cfg: &std::sync::Arc<walnut_common::config::Config>) -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("could not install SIGTERM handler: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    let mut hup = signal(SignalKind::hangup()).ok();
    loop {
        let hangup = async {
            match hup.as_mut() {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return "SIGINT",
            _ = term.recv() => return "SIGTERM",
            _ = hangup => {
                tracing::info!("received SIGHUP, reloading configuration files");
                let cfg = cfg.clone();
                let _ = tokio::task::spawn_blocking(move || cfg.reload()).await;
            }
        }
    }
}
