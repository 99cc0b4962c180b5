//! The simple-query parse cache: statements that differ only in their literals share one parse
//! tree.
//!
//! With the simple query protocol a client sends its values inline, so the same statement
//! arrives as new text each time (pgbench's simple mode: `UPDATE pgbench_accounts SET abalance
//! = abalance + -4125 WHERE aid = 870231;`), the plan cache keyed by text never hits, and
//! sqlparser ran for every statement: a fifth of the server's CPU time on pgbench
//! simple-update. PostgreSQL's `pg_stat_statements` normalizes queries the same way (its
//! `generate_normalized_query`) to count them together; here the normal form keys a cache of
//! parse trees.
//!
//! 1. [`shape`] scans the text once: numeric literals (`123`, `1.5`) and plain string literals
//!    (`'it''s'`) become markers of their kind in the key, and their values and positions
//!    (line, column in characters, as sqlparser counts) are collected. Anything the scan does
//!    not fully understand (comments, `$`, backslashes, `E'...'` and other prefixed strings,
//!    exponents, non-ASCII outside quotes) means no key: the statement is parsed as usual.
//! 2. On a miss the statement is parsed by sqlparser; [`Template::new`] then pairs every
//!    literal expression of the tree (`Expr::Value`, found by the visitor) with the scanned
//!    literal at the same position. Only if the pairing is one-to-one in both directions, and
//!    the statement is a query, INSERT, UPDATE or DELETE, is the tree cached. A literal the
//!    parser keeps elsewhere (a typed string such as `DATE '...'`, a type modifier such as
//!    `varchar(10)`) is not an `Expr::Value` and so prevents caching.
//! 3. On a hit the cached tree is cloned and each literal expression gets the new value of
//!    its paired literal ([`Template::instantiate`]).
//!
//! Two texts with the same key have the same tokens except for the literals' values, and the
//! parser's tree does not depend on those values, so the instantiated tree equals what parsing
//! the new text would give. The property test in `tests.rs` checks exactly that.

use sqlparser::ast::{visit_expressions_mut, Expr, Statement, Value};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

/// A literal found by [`shape`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Literal {
    /// The value as sqlparser holds it: `Value::Number(digits, false)` or
    /// `Value::SingleQuotedString(unescaped)`.
    pub value: Value,
    /// Line and column (1-based, in characters) of its first character.
    pub at: (u64, u64),
}

/// The key of `sql` (its text with each literal replaced by a marker of its kind) and its
/// literals in text order, or `None` if the text holds anything the scan does not handle.
pub(crate) fn shape(sql: &str) -> Option<(String, Vec<Literal>)> {
    let chars: Vec<char> = sql.chars().collect();
    let mut key = String::with_capacity(sql.len());
    let mut lits = Vec::new();
    let (mut line, mut col) = (1u64, 1u64);
    let mut i = 0;
    // Advances over chars[i..j], keeping line and column.
    let advance = |from: usize, to: usize, line: &mut u64, col: &mut u64| {
        for &c in &chars[from..to] {
            if c == '\n' {
                *line += 1;
                *col = 1;
            } else {
                *col += 1;
            }
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let start = (line, col);
        let j = if c.is_ascii_alphabetic() || c == '_' {
            let mut j = i + 1;
            while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            if j < chars.len() && chars[j] == '\'' {
                return None; // E'..', B'..', X'..', N'..'
            }
            key.extend(&chars[i..j]);
            j
        } else if c.is_ascii_digit() {
            let mut j = i + 1;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            let mut decimal = false;
            if j < chars.len() && chars[j] == '.' {
                decimal = true;
                j += 1;
                let digits = j;
                while j < chars.len() && chars[j].is_ascii_digit() {
                    j += 1;
                }
                if j == digits {
                    return None; // `1.`
                }
            }
            if j < chars.len()
                && (chars[j].is_ascii_alphanumeric() || matches!(chars[j], '_' | '.'))
            {
                return None; // exponents, suffixes, `1.2.3`
            }
            key.push_str(if decimal { "\u{1}d" } else { "\u{1}i" });
            lits.push(Literal {
                value: Value::Number(chars[i..j].iter().collect(), false),
                at: start,
            });
            j
        } else if c == '\'' {
            let mut s = String::new();
            let mut j = i + 1;
            loop {
                match chars.get(j) {
                    None => return None,
                    Some('\\') => return None,
                    Some('\'') if chars.get(j + 1) == Some(&'\'') => {
                        s.push('\'');
                        j += 2;
                    }
                    Some('\'') => break,
                    Some(&ch) => {
                        s.push(ch);
                        j += 1;
                    }
                }
            }
            key.push_str("\u{1}s");
            lits.push(Literal {
                value: Value::SingleQuotedString(s),
                at: start,
            });
            j + 1
        } else if c == '"' {
            let mut j = i + 1;
            loop {
                match chars.get(j) {
                    None => return None,
                    Some('"') if chars.get(j + 1) == Some(&'"') => j += 2,
                    Some('"') => break,
                    Some(_) => j += 1,
                }
            }
            key.extend(&chars[i..=j]);
            j + 1
        } else if c == '$'
            || c == '\\'
            || c == '&'
            || c == '\u{1}'
            || !c.is_ascii()
            || (c == '-' && chars.get(i + 1) == Some(&'-'))
            || (c == '/' && chars.get(i + 1) == Some(&'*'))
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            return None;
        } else {
            key.push(c);
            i + 1
        };
        advance(i, j, &mut line, &mut col);
        i = j;
    }
    Some((key, lits))
}

/// A cached parse tree and, for each of its literal expressions in visiting order, the index
/// of the scanned literal it holds.
pub(crate) struct Template {
    stmt: Statement,
    slots: Vec<usize>,
}

impl Template {
    /// Pairs the literal expressions of `stmt` (parsed from a text with literals `lits`) with
    /// `lits` by position. `None` unless the pairing is one-to-one and the statement is a query
    /// or a row write.
    pub(crate) fn new(mut stmt: Statement, lits: &[Literal]) -> Option<Template> {
        if !matches!(
            stmt,
            Statement::Query(_)
                | Statement::Insert(_)
                | Statement::Update { .. }
                | Statement::Delete(_)
        ) {
            return None;
        }
        let mut slots = Vec::with_capacity(lits.len());
        let mut used = vec![false; lits.len()];
        let flow = visit_expressions_mut(&mut stmt, |e| {
            if let Expr::Value(v) = e {
                let at = (v.span.start.line, v.span.start.column);
                match lits.iter().position(|l| l.at == at) {
                    Some(k) if !used[k] && lits[k].value == v.value => {
                        used[k] = true;
                        slots.push(k);
                    }
                    _ => return ControlFlow::Break(()),
                }
            }
            ControlFlow::Continue(())
        });
        if flow.is_break() || used.iter().any(|u| !u) {
            return None;
        }
        Some(Template { stmt, slots })
    }

    /// The parse tree of a text with this template's key and literals `lits`.
    pub(crate) fn instantiate(&self, lits: &[Literal]) -> Statement {
        let mut stmt = self.stmt.clone();
        let mut n = 0;
        let _ = visit_expressions_mut(&mut stmt, |e| {
            if let Expr::Value(v) = e {
                v.value = lits[self.slots[n]].value.clone();
                n += 1;
            }
            ControlFlow::<()>::Continue(())
        });
        debug_assert_eq!(n, self.slots.len());
        stmt
    }
}

/// Templates by key, bounded: when full it is emptied (statements of a workload come back and
/// refill it at once).
#[derive(Default)]
pub(crate) struct ParseCache {
    map: HashMap<String, Arc<Template>>,
}

/// Keys kept at most.
const PARSE_CACHE_CAPACITY: usize = 256;

impl ParseCache {
    /// The template for `key`, if cached.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<Template>> {
        self.map.get(key).cloned()
    }

    /// Caches `t` under `key`.
    pub(crate) fn put(&mut self, key: String, t: Template) {
        if self.map.len() >= PARSE_CACHE_CAPACITY {
            self.map.clear();
        }
        self.map.insert(key, Arc::new(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .pop()
            .unwrap()
    }

    /// The template made from `first`, instantiated with `second`'s literals, if both texts
    /// have the same key and the template was accepted.
    fn through_cache(first: &str, second: &str) -> Option<Statement> {
        let (k1, l1) = shape(first)?;
        let (k2, l2) = shape(second)?;
        assert_eq!(k1, k2, "{first:?} and {second:?} must share a key");
        Some(Template::new(parse(first), &l1)?.instantiate(&l2))
    }

    /// Statement shapes with `{}` for literals: (text, kinds) where kind is i, d or s.
    const SHAPES: &[&str] = &[
        "UPDATE pgbench_accounts SET abalance = abalance + {i} WHERE aid = {i}",
        "SELECT abalance FROM pgbench_accounts WHERE aid = {i}",
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ({i}, {i}, {i}, {i}, CURRENT_TIMESTAMP)",
        "select * from t where a = {s} and b > {d} order by 1 limit {i} offset {i}",
        "insert into t values ({i}, {s}), ({i}, {s})",
        "delete from t where k in ({i}, {i}, -{i}) and v <> {s}",
        "select {i} + {i} * {d}, {s} || {s} from t",
        "select interval {s}, x from \"T\"\"x\" where y = {s}",
        "select {i},\n  {s}\n, {d} from t where\n\ta = {i}",
    ];

    fn fill(shape: &str, ints: &[u32], strs: &[String], decs: &[(u32, u32)]) -> String {
        let (mut i, mut s, mut d) = (0, 0, 0);
        let mut out = String::new();
        let mut rest = shape;
        while let Some(p) = rest.find('{') {
            out.push_str(&rest[..p]);
            match &rest[p..p + 3] {
                "{i}" => {
                    out.push_str(&ints[i % ints.len()].to_string());
                    i += 1;
                }
                "{d}" => {
                    let (a, b) = decs[d % decs.len()];
                    out.push_str(&format!("{a}.{b}"));
                    d += 1;
                }
                _ => {
                    out.push('\'');
                    out.push_str(&strs[s % strs.len()].replace('\'', "''"));
                    out.push('\'');
                    s += 1;
                }
            }
            rest = &rest[p + 3..];
        }
        out.push_str(rest);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// A tree made from one text and given another text's literals equals the tree of the
        /// other text.
        #[test]
        fn instantiated_tree_equals_a_fresh_parse(
            which in 0..SHAPES.len(),
            a in proptest::collection::vec(0u32..100_000, 1..6),
            b in proptest::collection::vec(0u32..100_000, 1..6),
            sa in proptest::collection::vec("[a-z '\"é0-9]{0,8}", 1..4),
            sb in proptest::collection::vec("[a-z '\"é0-9]{0,8}", 1..4),
            da in proptest::collection::vec((0u32..1000, 0u32..1000), 1..3),
            db in proptest::collection::vec((0u32..1000, 0u32..1000), 1..3),
        ) {
            let first = fill(SHAPES[which], &a, &sa, &da);
            let second = fill(SHAPES[which], &b, &sb, &db);
            let got = through_cache(&first, &second).expect("these shapes are cacheable");
            prop_assert_eq!(got, parse(&second));
        }
    }

    #[test]
    fn the_scan_refuses_what_it_does_not_understand() {
        for sql in [
            "select E'a\\nb'",
            "select 'a\\b'",
            "select $1",
            "select 1 -- c",
            "select /* c */ 1",
            "select 1e5",
            "select 1.",
            "select .5",
            "select 'é' || ü",
            "select U&'d\\0061t'",
            "select 'unterminated",
        ] {
            assert!(shape(sql).is_none(), "{sql}");
        }
        let (key, lits) = shape("select 'it''s', x1, 20 from t").unwrap();
        assert_eq!(key, "select \u{1}s, x1, \u{1}i from t");
        assert_eq!(
            lits,
            vec![
                Literal {
                    value: Value::SingleQuotedString("it's".into()),
                    at: (1, 8)
                },
                Literal {
                    value: Value::Number("20".into(), false),
                    at: (1, 21)
                },
            ]
        );
    }

    #[test]
    fn literals_the_parser_keeps_elsewhere_prevent_caching() {
        for sql in [
            "select date '2020-01-01' from t",
            "create table t (a varchar(10))",
            "select 'a' 'b'",
            "set x = 1",
        ] {
            let (_, lits) = shape(sql).unwrap();
            assert!(Template::new(parse(sql), &lits).is_none(), "{sql}");
        }
    }
}
