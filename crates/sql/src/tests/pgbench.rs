//! pgbench's statements: `pgbench -i` (client- and server-side generation, COPY in awkward
//! chunks) and the TPC-B-like script through prepared statements and the plan cache.

use super::*;

const PGBENCH_DDL: &[&str] = &[
    "drop table if exists pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    "create table pgbench_history(tid int,bid int,aid    int,delta int,mtime timestamp,filler char(22))",
    "create table pgbench_tellers(tid int not null,bid int,tbalance int,filler char(84)) with (fillfactor=100)",
    "create table pgbench_accounts(aid    int not null,bid int,abalance int,filler char(84)) with (fillfactor=100)",
    "create table pgbench_branches(bid int not null,bbalance int,filler char(88)) with (fillfactor=100)",
];

const ACCOUNTS: i64 = 5000;

/// pgbench -i's client-side sequence, with COPY data in awkward chunks.
fn pgbench_init(s: &mut Session) {
    for sql in PGBENCH_DDL {
        ok(s, sql);
    }
    let notices = s.take_notices();
    assert_eq!(notices.len(), 4);
    assert_eq!(
        notices[0].message,
        "table \"pgbench_accounts\" does not exist, skipping"
    );
    assert_eq!(tag(s, "begin"), "BEGIN");
    assert_eq!(
        tag(
            s,
            "truncate table pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers"
        ),
        "TRUNCATE TABLE"
    );
    let copy = |s: &mut Session, table: &str, data: String, chunk: usize| {
        match ok(s, &format!("copy {table} from stdin with (freeze on)")) {
            Output::CopyIn { .. } => {}
            other => panic!("{other:?}"),
        }
        for c in data.as_bytes().chunks(chunk) {
            s.copy_data(c).expect("copy data");
        }
        match s.copy_done().expect("copy done") {
            Output::Command { tag } => tag,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(copy(s, "pgbench_branches", "1\t0\t\n".into(), 3), "COPY 1");
    let tellers: String = (1..=10).map(|t| format!("{t}\t1\t0\t\n")).collect();
    assert_eq!(copy(s, "pgbench_tellers", tellers, 7), "COPY 10");
    let accounts: String = (1..=ACCOUNTS)
        .map(|a| format!("{a}\t1\t0\t\n"))
        .collect::<String>()
        + "\\.\n";
    assert_eq!(
        copy(s, "pgbench_accounts", accounts, 4093),
        format!("COPY {ACCOUNTS}")
    );
    assert_eq!(s.txn_status(), TxnStatus::InBlock);
    assert_eq!(tag(s, "commit"), "COMMIT");
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    for t in [
        "pgbench_branches",
        "pgbench_tellers",
        "pgbench_accounts",
        "pgbench_history",
    ] {
        assert_eq!(tag(s, &format!("vacuum analyze {t}")), "VACUUM");
    }
    assert_eq!(
        tag(s, "alter table pgbench_branches add primary key (bid)"),
        "ALTER TABLE"
    );
    assert_eq!(
        tag(s, "alter table pgbench_tellers add primary key (tid)"),
        "ALTER TABLE"
    );
    assert_eq!(
        tag(
            s,
            "alter table pgbench_accounts add constraint pgbench_accounts_pkey primary key (aid)"
        ),
        "ALTER TABLE"
    );
}

#[test]
fn pgbench_init_and_tpcb_simple() {
    let e = MemEngine::new();
    let mut s = session(&e);
    pgbench_init(&mut s);
    assert_eq!(
        one(&mut s, "select count(*) from pgbench_accounts"),
        ACCOUNTS.to_string()
    );
    assert_eq!(one(&mut s, "select count(*) from pgbench_branches"), "1");
    assert_eq!(
        one(
            &mut s,
            "select length(filler) from pgbench_accounts where aid = 7"
        ),
        "0"
    );
    assert_eq!(one(&mut s, "select filler from pgbench_branches").len(), 88);

    // tpcb-like, -M simple (literals, negative delta).
    for (aid, tid, delta) in [(17, 3, -40), (17, 4, 100), (4999, 3, 7)] {
        assert_eq!(tag(&mut s, "BEGIN;"), "BEGIN");
        let up =
            format!("UPDATE pgbench_accounts SET abalance = abalance + {delta} WHERE aid = {aid};");
        assert_eq!(tag(&mut s, &up), "UPDATE 1");
        let _ = rows(
            &mut s,
            &format!("SELECT abalance FROM pgbench_accounts WHERE aid = {aid};"),
        );
        assert_eq!(
            tag(
                &mut s,
                &format!(
                    "UPDATE pgbench_tellers SET tbalance = tbalance + {delta} WHERE tid = {tid};"
                )
            ),
            "UPDATE 1"
        );
        assert_eq!(
            tag(
                &mut s,
                &format!(
                    "UPDATE pgbench_branches SET bbalance = bbalance + {delta} WHERE bid = 1;"
                )
            ),
            "UPDATE 1"
        );
        let ins = format!(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ({tid}, 1, {aid}, {delta}, CURRENT_TIMESTAMP);"
        );
        assert_eq!(tag(&mut s, &ins), "INSERT 0 1");
        assert_eq!(tag(&mut s, "END;"), "COMMIT");
    }
    assert_eq!(
        one(
            &mut s,
            "SELECT abalance FROM pgbench_accounts WHERE aid = 17"
        ),
        "60"
    );
    assert_eq!(one(&mut s, "select bbalance from pgbench_branches"), "67");
    assert_eq!(one(&mut s, "select sum(delta) from pgbench_history"), "67");
    assert_eq!(
        one(
            &mut s,
            "select count(*) from pgbench_history where mtime <= now()"
        ),
        "3"
    );
    assert_eq!(
        one(&mut s, "select tbalance from pgbench_tellers where tid = 3"),
        "-33"
    );
}

#[test]
fn pgbench_server_side_generate() {
    let e = MemEngine::new();
    let mut s = session(&e);
    for sql in PGBENCH_DDL {
        ok(&mut s, sql);
    }
    ok(&mut s, "begin");
    ok(
        &mut s,
        "truncate table pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    );
    assert_eq!(
        tag(
            &mut s,
            "insert into pgbench_branches(bid,bbalance) select bid, 0 from generate_series(1, 2) as bid"
        ),
        "INSERT 0 2"
    );
    assert_eq!(
        tag(&mut s, "insert into pgbench_tellers(tid,bid,tbalance) select tid, (tid - 1) / 10 + 1, 0 from generate_series(1, 20) as tid"),
        "INSERT 0 20"
    );
    assert_eq!(
        tag(&mut s, "insert into pgbench_accounts(aid,bid,abalance,filler) select aid, (aid - 1) / 1000 + 1, 0, '' from generate_series(1, 2000) as aid"),
        "INSERT 0 2000"
    );
    ok(&mut s, "commit");
    assert_eq!(
        rows(
            &mut s,
            "select bid, count(*) from pgbench_accounts group by bid order by bid"
        ),
        vec![vec!["1", "1000"], vec!["2", "1000"]]
    );
    assert_eq!(one(&mut s, "select max(bid) from pgbench_tellers"), "2");
    assert_eq!(
        rows(
            &mut s,
            "select x * 2 from generate_series(1, 3) as g(x) order by 1 desc"
        ),
        vec![vec!["6"], vec!["4"], vec!["2"]]
    );
    assert_eq!(
        one(&mut s, "select count(*) from generate_series(10, 1, -3)"),
        "4"
    );
}

#[test]
fn pgbench_prepared_scripts_and_plan_cache() {
    let e = MemEngine::new();
    let mut s = session(&e);
    pgbench_init(&mut s);
    let upd = "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;";
    let sel = "SELECT abalance FROM pgbench_accounts WHERE aid = $1;";
    let ins = "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);";
    let p_upd = s.prepare(upd, &[]).unwrap();
    assert_eq!(p_upd.param_types, vec![DataType::Int4, DataType::Int4]);
    assert!(p_upd.columns.is_none());
    let p_sel = s.prepare(sel, &[]).unwrap();
    assert_eq!(p_sel.param_types, vec![DataType::Int4]);
    assert_eq!(p_sel.columns.as_ref().unwrap()[0].name, "abalance");
    let p_ins = s.prepare(ins, &[]).unwrap();
    assert_eq!(p_ins.param_types, vec![DataType::Int4; 4]);
    let p_begin = s.prepare("BEGIN;", &[]).unwrap();
    let p_end = s.prepare("END;", &[]).unwrap();
    // The cache hands back the same plan.
    assert!(Arc::ptr_eq(&p_upd, &s.prepare(upd, &[]).unwrap()));
    assert!(Arc::ptr_eq(&p_sel, &s.prepare(sel, &[]).unwrap()));
    assert!(!Arc::ptr_eq(&p_sel, &s.prepare(sel, &[20]).unwrap()));

    for i in 0..50 {
        let aid = 1 + (i * 97) % ACCOUNTS as i32;
        s.execute(&p_begin, vec![]).unwrap();
        assert_eq!(s.txn_status(), TxnStatus::InBlock);
        let out = s
            .execute(&p_upd, vec![Value::Int4(5), Value::Int4(aid)])
            .unwrap();
        assert!(
            matches!(out, Output::Command { ref tag } if tag == "UPDATE 1"),
            "{out:?}"
        );
        match s.execute(&p_sel, vec![Value::Int4(aid)]).unwrap() {
            Output::Rows { rows, tag, .. } => {
                assert_eq!(tag, "SELECT 1");
                assert!(rows[0][0].as_i64().unwrap() >= 5);
            }
            other => panic!("{other:?}"),
        }
        s.execute(
            &p_ins,
            vec![
                Value::Int4(1),
                Value::Int4(1),
                Value::Int4(aid),
                Value::Int4(5),
            ],
        )
        .unwrap();
        s.execute(&p_end, vec![]).unwrap();
        s.sync().unwrap();
        assert_eq!(s.txn_status(), TxnStatus::Idle);
    }
    assert_eq!(
        one(&mut s, "select sum(abalance) from pgbench_accounts"),
        "250"
    );
    assert_eq!(one(&mut s, "select count(*) from pgbench_history"), "50");
    // Select-only outside a block autocommits.
    let before = e.commits();
    s.execute(&p_sel, vec![Value::Int4(1)]).unwrap();
    assert_eq!(e.commits(), before + 1);
    assert_eq!(s.txn_status(), TxnStatus::Idle);
}
