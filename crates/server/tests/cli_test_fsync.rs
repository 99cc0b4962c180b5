//! `walnut test-fsync` through the built binary: it measures every method in a scratch
//! directory, exits 0 and leaves the directory as it found it; bad arguments exit 1.

use std::process::Command;

fn walnut() -> Command {
    Command::new(env!("CARGO_BIN_EXE_walnut"))
}

#[test]
fn test_fsync_reports_every_method() {
    let dir = tempfile::tempdir().unwrap();
    let output = walnut()
        .args(["test-fsync", "-D"])
        .arg(dir.path())
        .args(["--seconds", "0.05"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    for method in ["fdatasync", "fsync", "open_datasync", "open_sync"] {
        for io in ["buffered", "direct"] {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.split_whitespace().take(2).eq([method, io])),
                "no {method} {io} row in:\n{stdout}"
            );
        }
    }
    assert!(stdout.contains("walnut would choose (buffered): wal_sync_method = "));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn test_fsync_missing_dir_fails() {
    let dir = tempfile::tempdir().unwrap();
    let output = walnut()
        .args(["test-fsync", "-D"])
        .arg(dir.path().join("missing"))
        .args(["--seconds", "0.05"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("could not access"), "{stderr}");
}
