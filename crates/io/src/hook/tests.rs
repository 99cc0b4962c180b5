//! A [`HookVfs`] whose hooks override nothing is the file system it wraps, call for call and
//! result for result, trait defaults included; and each call reaches the hook of its own name.

use super::*;
use std::sync::Mutex;

type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, line: String) {
    log.lock().unwrap().push(line);
}

/// A file system that logs every call with its arguments, overrides every defaulted method of
/// [`FileIo`] and [`Vfs`], and returns values no default would (so that a call answered by a
/// trait default instead of the inner one shows).
struct Tracer {
    log: Log,
}

struct TracerFile {
    log: Log,
    path: PathBuf,
}

struct TracerFlush {
    log: Log,
    dir: PathBuf,
}

impl Vfs for Tracer {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        note(&self.log, format!("open {} {mode:?}", path.display()));
        Ok(Arc::new(TracerFile {
            log: self.log.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        note(&self.log, format!("remove {}", path.display()));
        Err(io::Error::from_raw_os_error(2))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        note(
            &self.log,
            format!("rename {} {}", from.display(), to.display()),
        );
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        note(&self.log, format!("sync_dir {}", dir.display()));
        Err(io::Error::from_raw_os_error(5))
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        note(&self.log, format!("create_dir_all {}", dir.display()));
        Ok(())
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        note(&self.log, format!("list_dir {}", dir.display()));
        Ok(vec!["a".into(), "b".into()])
    }
    fn exists(&self, path: &Path) -> bool {
        note(&self.log, format!("exists {}", path.display()));
        true
    }
    fn cache_flusher(&self, dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        note(&self.log, format!("cache_flusher {}", dir.display()));
        Ok(Some(Arc::new(TracerFlush {
            log: self.log.clone(),
            dir: dir.to_path_buf(),
        })))
    }
}

impl FileIo for TracerFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        note(
            &self.log,
            format!("read_at {} {} {offset}", self.path.display(), buf.len()),
        );
        buf.fill(0xAB);
        Ok(buf.len().min(3))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        note(
            &self.log,
            format!("write_at {} {buf:?} {offset}", self.path.display()),
        );
        Ok(())
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        note(
            &self.log,
            format!(
                "write_vectored_at {} {bufs:?} {offset}",
                self.path.display()
            ),
        );
        Err(io::Error::from_raw_os_error(28))
    }
    fn sync_data(&self) -> io::Result<()> {
        note(&self.log, format!("sync_data {}", self.path.display()));
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        note(&self.log, format!("sync_all {}", self.path.display()));
        Err(io::Error::from_raw_os_error(28))
    }
    fn len(&self) -> io::Result<u64> {
        note(&self.log, format!("len {}", self.path.display()));
        Ok(77)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        note(&self.log, format!("set_len {} {len}", self.path.display()));
        Ok(())
    }
    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        note(
            &self.log,
            format!("write_back {} {offset} {len}", self.path.display()),
        );
        Ok(())
    }
    fn flush_range(&self, offset: u64, len: u64) -> io::Result<()> {
        note(
            &self.log,
            format!("flush_range {} {offset} {len}", self.path.display()),
        );
        Ok(())
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        note(
            &self.log,
            format!("allocate {} {offset} {len}", self.path.display()),
        );
        Ok(())
    }
    fn raw_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        note(&self.log, format!("raw_fd {}", self.path.display()));
        None
    }
    fn allocated_bytes(&self) -> io::Result<u64> {
        note(
            &self.log,
            format!("allocated_bytes {}", self.path.display()),
        );
        Ok(4242)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        note(
            &self.log,
            format!(
                "read_exact_at {} {} {offset}",
                self.path.display(),
                buf.len()
            ),
        );
        buf.fill(0xCD);
        Ok(())
    }
}

impl CacheFlush for TracerFlush {
    fn flush(&self) -> io::Result<()> {
        note(&self.log, format!("flush {}", self.dir.display()));
        Ok(())
    }
    fn describe(&self) -> String {
        format!("tracer flush of {}", self.dir.display())
    }
}

/// Makes every call of [`Vfs`], [`FileIo`] and [`CacheFlush`] once, logging each result
/// after the calls it caused.
fn exercise(v: &dyn Vfs, log: &Log) {
    let p = Path::new("/d/f");
    let result = |what: &str, r: String| note(log, format!("= {what}: {r}"));
    let mode = OpenMode {
        create: true,
        dsync: true,
        ..Default::default()
    };
    let f = v.open(p, mode).unwrap();
    result(
        "remove",
        format!("{:?}", v.remove(p).map_err(|e| e.raw_os_error())),
    );
    result(
        "rename",
        format!("{:?}", v.rename(p, Path::new("/d/g")).is_ok()),
    );
    result(
        "sync_dir",
        format!(
            "{:?}",
            v.sync_dir(Path::new("/d")).map_err(|e| e.raw_os_error())
        ),
    );
    result(
        "create_dir_all",
        format!("{:?}", v.create_dir_all(Path::new("/d/e")).is_ok()),
    );
    result(
        "list_dir",
        format!("{:?}", v.list_dir(Path::new("/d")).unwrap()),
    );
    result("exists", format!("{:?}", v.exists(p)));
    let mut buf = [0u8; 5];
    result(
        "read_at",
        format!("{:?} {buf:?}", f.read_at(&mut buf, 9).unwrap()),
    );
    let mut buf = [0u8; 6];
    f.read_exact_at(&mut buf, 10).unwrap();
    result("read_exact_at", format!("{buf:?}"));
    result("write_at", format!("{:?}", f.write_at(b"xyz", 11).is_ok()));
    result(
        "write_vectored_at",
        format!(
            "{:?}",
            f.write_vectored_at(&[b"ab", b"c"], 19)
                .map_err(|e| e.raw_os_error())
        ),
    );
    result("sync_data", format!("{:?}", f.sync_data().is_ok()));
    result(
        "sync_all",
        format!("{:?}", f.sync_all().map_err(|e| e.raw_os_error())),
    );
    result("len", format!("{:?}", f.len().unwrap()));
    result("set_len", format!("{:?}", f.set_len(12).is_ok()));
    result("write_back", format!("{:?}", f.write_back(13, 14).is_ok()));
    result(
        "flush_range",
        format!("{:?}", f.flush_range(15, 16).is_ok()),
    );
    result("allocate", format!("{:?}", f.allocate(17, 18).is_ok()));
    result("raw_fd", format!("{:?}", f.raw_fd().is_some()));
    result(
        "allocated_bytes",
        format!("{:?}", f.allocated_bytes().unwrap()),
    );
    let fl = v
        .cache_flusher(Path::new("/d"))
        .unwrap()
        .expect("the inner one offers one");
    result("flush", format!("{:?}", fl.flush().is_ok()));
    result("describe", fl.describe());
}

/// The calls [`exercise`] makes, by the name of their hook.
const CALLS: [&str; 22] = [
    "open",
    "remove",
    "rename",
    "sync_dir",
    "create_dir_all",
    "list_dir",
    "exists",
    "read_at",
    "read_exact_at",
    "write_at",
    "write_vectored_at",
    "sync_data",
    "sync_all",
    "len",
    "set_len",
    "write_back",
    "flush_range",
    "allocate",
    "raw_fd",
    "allocated_bytes",
    "cache_flusher",
    "flush",
];

#[test]
fn pass_through_hooks_make_exactly_the_inner_calls_with_their_results() {
    let direct: Log = Arc::default();
    exercise(
        &Tracer {
            log: direct.clone(),
        },
        &direct,
    );
    let hooked: Log = Arc::default();
    let v = HookVfs::new(
        Arc::new(Tracer {
            log: hooked.clone(),
        }),
        Arc::new(PassThrough),
    );
    exercise(&v, &hooked);
    let (direct, hooked) = (
        direct.lock().unwrap().clone(),
        hooked.lock().unwrap().clone(),
    );
    assert_eq!(hooked, direct);
    // The run made every call, each answered by the tracer, not a trait default.
    for call in CALLS {
        assert!(
            direct.iter().any(|l| l.starts_with(&format!("{call} "))),
            "{call} was not made: {direct:#?}"
        );
    }
    assert!(direct.contains(&"= allocated_bytes: 4242".to_string()));
    // The tracer's allocate succeeds; the trait's default would refuse.
    assert!(direct.contains(&"= allocate: true".to_string()));
    assert!(direct.contains(&"= describe: tracer flush of /d".to_string()));
}

/// Hooks that log the name of each hook called, then pass the call on.
struct Naming {
    log: Log,
}

impl Naming {
    fn saw(&self, hook: &str) {
        note(&self.log, format!("hook {hook}"));
    }
}

impl Hooks for Naming {
    fn open(&self, vfs: &dyn Vfs, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        self.saw("open");
        vfs.open(path, mode)
    }
    fn remove(&self, vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
        self.saw("remove");
        vfs.remove(path)
    }
    fn rename(&self, vfs: &dyn Vfs, from: &Path, to: &Path) -> io::Result<()> {
        self.saw("rename");
        vfs.rename(from, to)
    }
    fn sync_dir(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
        self.saw("sync_dir");
        vfs.sync_dir(dir)
    }
    fn create_dir_all(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
        self.saw("create_dir_all");
        vfs.create_dir_all(dir)
    }
    fn list_dir(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<Vec<String>> {
        self.saw("list_dir");
        vfs.list_dir(dir)
    }
    fn exists(&self, vfs: &dyn Vfs, path: &Path) -> bool {
        self.saw("exists");
        vfs.exists(path)
    }
    fn cache_flusher(&self, vfs: &dyn Vfs, dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        self.saw("cache_flusher");
        vfs.cache_flusher(dir)
    }
    fn read_at(&self, file: FileRef<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.saw("read_at");
        file.io.read_at(buf, offset)
    }
    fn read_exact_at(&self, file: FileRef<'_>, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.saw("read_exact_at");
        file.io.read_exact_at(buf, offset)
    }
    fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        self.saw("write_at");
        file.io.write_at(buf, offset)
    }
    fn write_vectored_at(&self, file: FileRef<'_>, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.saw("write_vectored_at");
        file.io.write_vectored_at(bufs, offset)
    }
    fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
        self.saw("sync_data");
        file.io.sync_data()
    }
    fn sync_all(&self, file: FileRef<'_>) -> io::Result<()> {
        self.saw("sync_all");
        file.io.sync_all()
    }
    fn len(&self, file: FileRef<'_>) -> io::Result<u64> {
        self.saw("len");
        file.io.len()
    }
    fn set_len(&self, file: FileRef<'_>, len: u64) -> io::Result<()> {
        self.saw("set_len");
        file.io.set_len(len)
    }
    fn write_back(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        self.saw("write_back");
        file.io.write_back(offset, len)
    }
    fn flush_range(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        self.saw("flush_range");
        file.io.flush_range(offset, len)
    }
    fn allocate(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        self.saw("allocate");
        file.io.allocate(offset, len)
    }
    fn raw_fd<'a>(&self, file: FileRef<'a>) -> Option<std::os::fd::BorrowedFd<'a>> {
        self.saw("raw_fd");
        file.io.raw_fd()
    }
    fn allocated_bytes(&self, file: FileRef<'_>) -> io::Result<u64> {
        self.saw("allocated_bytes");
        file.io.allocated_bytes()
    }
    fn flush(&self, flusher: FlushRef<'_>) -> io::Result<()> {
        self.saw("flush");
        flusher.io.flush()
    }
}

#[test]
fn every_call_reaches_the_hook_of_its_name_with_its_file() {
    let log: Log = Arc::default();
    let v = HookVfs::new(
        Arc::new(Tracer { log: log.clone() }),
        Arc::new(Naming { log: log.clone() }),
    );
    exercise(&v, &log);
    let log = log.lock().unwrap().clone();
    let calls: Vec<&String> = log
        .iter()
        .filter(|l| !l.starts_with("hook ") && !l.starts_with("= "))
        .collect();
    assert_eq!(calls.len(), CALLS.len(), "{log:#?}");
    for (i, line) in log.iter().enumerate() {
        if let Some(hook) = line.strip_prefix("hook ") {
            let next = log.get(i + 1).map(String::as_str).unwrap_or("");
            assert!(
                next.starts_with(&format!("{hook} ")),
                "hook {hook} passed on {next:?}: {log:#?}"
            );
        } else if !line.starts_with("= ") {
            assert!(
                i > 0 && log[i - 1].starts_with("hook "),
                "{line} bypassed the hooks"
            );
        }
    }
    // File calls name the file they are on, as opened.
    assert!(log.contains(&"sync_data /d/f".to_string()), "{log:#?}");
}

/// A hook sees the path and mode a file was opened with, and can answer instead of it.
#[test]
fn a_hook_decides_per_file_and_overrides_only_what_it_names() {
    struct FailSyncOfWal;
    impl Hooks for FailSyncOfWal {
        fn sync_data(&self, file: FileRef<'_>) -> io::Result<()> {
            if file.path.starts_with("/wal") && file.mode.create {
                return Err(io::Error::from_raw_os_error(5));
            }
            file.io.sync_data()
        }
    }
    let log: Log = Arc::default();
    let v = HookVfs::new(
        Arc::new(Tracer { log: log.clone() }),
        Arc::new(FailSyncOfWal),
    );
    let create = OpenMode {
        create: true,
        ..Default::default()
    };
    let wal = v.open(Path::new("/wal/1"), create).unwrap();
    let data = v.open(Path::new("/base/1"), create).unwrap();
    let reopened = v.open(Path::new("/wal/1"), OpenMode::default()).unwrap();
    assert_eq!(wal.sync_data().unwrap_err().raw_os_error(), Some(5));
    data.sync_data().unwrap();
    reopened.sync_data().unwrap();
    // What the hook does not name still goes to the inner file's own method.
    wal.write_back(0, 1).unwrap();
    assert_eq!(wal.allocated_bytes().unwrap(), 4242);
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log[3..],
        [
            "sync_data /base/1".to_string(),
            "sync_data /wal/1".to_string(),
            "write_back /wal/1 0 1".to_string(),
            "allocated_bytes /wal/1".to_string(),
        ]
    );
    assert!(v.inner().exists(Path::new("/x")));
}
