//! COPY FROM STDIN: the text format, errors, cancellation and chunking.

use super::*;

#[test]
fn copy_streams_and_reports_errors() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table c (a int primary key, b text, d char(3), e boolean)",
    );
    let data =
        "1\thello\\tworld\tx\tt\n2\t\\N\t\\N\tf\n3\tback\\\\slash\\n\tyz\ton\r\n4\tlast\t\t\\N";
    // Byte-at-a-time delivery; the last line has no newline.
    assert!(matches!(
        ok(&mut s, "copy c (a, b, d, e) from stdin"),
        Output::CopyIn { columns: 4 }
    ));
    for b in data.as_bytes() {
        s.copy_data(std::slice::from_ref(b)).unwrap();
    }
    assert!(matches!(s.copy_done().unwrap(), Output::Command { tag } if tag == "COPY 4"));
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(
        rows(&mut s, "select a, b, d, e from c order by a"),
        vec![
            vec!["1", "hello\tworld", "x  ", "t"],
            vec!["2", "NULL", "NULL", "f"],
            vec!["3", "back\\slash\n", "yz ", "t"],
            vec!["4", "last", "   ", "NULL"],
        ]
    );

    // A bad line: 22P04 with the line number; the COPY (autocommit) is rolled back.
    ok(&mut s, "copy c from stdin");
    s.copy_data(b"10\ta\tb\tt\n11\tonly two\n")
        .map(|_| ())
        .and_then(|_| s.copy_done().map(|_| ()))
        .map_or_else(
            |e| {
                assert_eq!(e.sqlstate, SqlState::BAD_COPY_FILE_FORMAT);
                assert_eq!(e.message, "missing data for column \"d\"");
                assert_eq!(e.detail.as_deref(), Some("COPY c, line 2"));
            },
            |_| panic!("expected an error"),
        );
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(one(&mut s, "select count(*) from c"), "4");
    // Conversion errors keep their SQLSTATE and get the context.
    ok(&mut s, "copy c from stdin");
    let e1 = s.copy_data(b"x\ta\tb\tt\n").unwrap_err();
    assert_eq!(
        (e1.sqlstate, e1.detail.as_deref()),
        (
            SqlState::INVALID_TEXT_REPRESENTATION,
            Some("COPY c, line 1")
        )
    );
    assert_eq!(s.copy_data(b"ignored").map(|_| 1).unwrap(), 1);
    // Extra columns.
    ok(&mut s, "copy c from stdin");
    assert_eq!(
        s.copy_data(b"20\ta\tb\tt\textra\n").unwrap_err().sqlstate,
        SqlState::BAD_COPY_FILE_FORMAT
    );
    // In a block, a COPY stays in the block; CopyFail fails the block.
    ok(&mut s, "begin");
    ok(&mut s, "copy c from stdin");
    s.copy_data(b"30\ta\tb\tt\n").unwrap();
    s.copy_done().unwrap();
    assert_eq!(s.txn_status(), TxnStatus::InBlock);
    ok(&mut s, "copy c from stdin");
    let f = s.copy_fail("client gave up");
    assert_eq!(
        (f.sqlstate, f.message.as_str()),
        (
            SqlState::QUERY_CANCELED,
            "COPY from stdin failed: client gave up"
        )
    );
    assert_eq!(s.txn_status(), TxnStatus::Failed);
    ok(&mut s, "rollback");
    assert_eq!(one(&mut s, "select count(*) from c"), "4");
    // Cancel between rows.
    ok(&mut s, "copy c from stdin");
    s.cancel_flag().store(true, Ordering::Relaxed);
    assert_eq!(
        s.copy_data(b"40\ta\tb\tt\n").unwrap_err().sqlstate,
        SqlState::QUERY_CANCELED
    );
    assert!(!s.cancel_flag().load(Ordering::Relaxed));
    // The end marker stops the data.
    ok(&mut s, "copy c from stdin");
    s.copy_data(b"50\ta\tb\tt\n\\.\ngarbage\n").unwrap();
    assert!(matches!(s.copy_done().unwrap(), Output::Command { tag } if tag == "COPY 1"));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// However the COPY stream is chunked, the same rows arrive.
        #[test]
        fn copy_chunking_is_irrelevant(cuts in proptest::collection::vec(0usize..400, 0..12),
                                       texts in proptest::collection::vec("[a-z\\t\\\\\n é]{0,6}", 1..8)) {
            let e = MemEngine::new();
            let mut s = session(&e);
            ok(&mut s, "create table c (a int primary key, b text)");
            let mut data = String::new();
            for (i, t) in texts.iter().enumerate() {
                let esc = t.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n");
                data.push_str(&format!("{i}\t{esc}\n"));
            }
            let bytes = data.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            ok(&mut s, "copy c from stdin");
            let mut at = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                s.copy_data(&bytes[at..c]).unwrap();
                at = c;
            }
            let done = matches!(s.copy_done().unwrap(), Output::Command { .. });
            prop_assert!(done);
            let got = rows(&mut s, "select b from c order by a");
            let want: Vec<Vec<String>> = texts.iter().map(|t| vec![t.clone()]).collect();
            prop_assert_eq!(got, want);
        }
    }
}
