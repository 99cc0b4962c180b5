//! The progress views over the model engine: a COPY's row as another session sees it, chunk
//! by chunk, and its removal however the COPY ends; `pg_backend_pid()`.

use super::*;

const COPY_COLUMNS: &str = "pid, datid, datname, relid, command, type, bytes_processed, \
                            bytes_total, tuples_processed, tuples_excluded, tuples_skipped";

fn copy_rows(s: &mut Session) -> Vec<Vec<String>> {
    rows(
        s,
        &format!("select {COPY_COLUMNS} from pg_stat_progress_copy"),
    )
}

#[test]
fn copy_progress_row_follows_the_copy_chunk_by_chunk() {
    let e = MemEngine::new();
    let mut a = session(&e);
    let mut b = session(&e);
    a.set_backend(4242, "shop");
    b.set_backend(4243, "shop");
    assert_eq!(one(&mut a, "select pg_backend_pid()"), "4242");
    ok(&mut a, "create table t (k int primary key, v text)");
    let oid = one(&mut b, "select oid from pg_class where relname = 't'");
    assert!(copy_rows(&mut b).is_empty(), "no COPY yet");

    ok(&mut a, "copy t from stdin");
    // Two whole lines and half of a third: two rows in, every byte counted.
    let first = b"1\tone\n2\ttwo\n3\tth";
    a.copy_data(first).unwrap();
    let row = |bytes: usize, tuples: u64| {
        vec![
            "4242".to_string(),
            "5".into(),
            "shop".into(),
            oid.clone(),
            "COPY FROM".into(),
            "PIPE".into(),
            bytes.to_string(),
            "0".into(),
            tuples.to_string(),
            "0".into(),
            "0".into(),
        ]
    };
    assert_eq!(copy_rows(&mut b), vec![row(first.len(), 2)]);
    let second = b"ree\n4\tfour\n";
    a.copy_data(second).unwrap();
    assert_eq!(copy_rows(&mut b), vec![row(first.len() + second.len(), 4)]);
    // The COPY's own session sees its row too (pid = pg_backend_pid()).
    assert!(matches!(a.copy_done().unwrap(), Output::Command { tag } if tag == "COPY 4"));
    assert!(copy_rows(&mut b).is_empty(), "the row goes with the COPY");
    assert_eq!(one(&mut b, "select count(*) from t"), "4");
}

#[test]
fn copy_progress_row_goes_however_the_copy_ends() {
    let e = MemEngine::new();
    let mut a = session(&e);
    let mut b = session(&e);
    ok(&mut a, "create table t (k int primary key, v text)");
    // A bad line ends the COPY.
    ok(&mut a, "copy t from stdin");
    a.copy_data(b"1\tx\n").unwrap();
    assert_eq!(copy_rows(&mut b).len(), 1);
    assert!(a.copy_data(b"oops\n").is_err());
    assert!(copy_rows(&mut b).is_empty(), "after an error");
    // CopyFail.
    ok(&mut a, "copy t from stdin");
    a.copy_data(b"1\tx\n").unwrap();
    assert_eq!(copy_rows(&mut b)[0][8], "1");
    let _ = a.copy_fail("client gave up");
    assert!(copy_rows(&mut b).is_empty(), "after CopyFail");
    // Inside a block, the row lasts until CopyDone, not until COMMIT.
    ok(&mut a, "begin");
    ok(&mut a, "copy t from stdin");
    a.copy_data(b"5\tx\n").unwrap();
    assert_eq!(copy_rows(&mut b).len(), 1);
    a.copy_done().unwrap();
    assert!(copy_rows(&mut b).is_empty(), "after CopyDone in a block");
    ok(&mut a, "commit");
    // The connection ends mid-COPY; the defaults of a session the front end never named.
    ok(&mut a, "copy t from stdin");
    a.copy_data(b"6\tx\n").unwrap();
    let r = copy_rows(&mut b);
    assert_eq!((r[0][0].as_str(), r[0][2].as_str()), ("0", "postgres"));
    a.terminate();
    assert!(copy_rows(&mut b).is_empty(), "after the session ended");
}

#[test]
fn create_index_view_has_postgres_columns_and_is_empty_when_idle() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(&mut s, "create table t (k int, v text)");
    ok(&mut s, "insert into t values (1, 'a'), (2, 'b')");
    ok(&mut s, "alter table t add primary key (k)");
    match ok(&mut s, "select * from pg_stat_progress_create_index") {
        Output::Rows { columns, rows, .. } => {
            let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "pid",
                    "datid",
                    "datname",
                    "relid",
                    "index_relid",
                    "command",
                    "phase",
                    "lockers_total",
                    "lockers_done",
                    "current_locker_pid",
                    "blocks_total",
                    "blocks_done",
                    "tuples_total",
                    "tuples_done",
                    "partitions_total",
                    "partitions_done"
                ]
            );
            assert!(rows.is_empty(), "{rows:?}");
        }
        other => panic!("{other:?}"),
    }
    match ok(&mut s, "select * from pg_catalog.pg_stat_progress_copy") {
        Output::Rows { columns, rows, .. } => {
            let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names.join(", "), COPY_COLUMNS);
            assert!(rows.is_empty(), "{rows:?}");
        }
        other => panic!("{other:?}"),
    }
}
