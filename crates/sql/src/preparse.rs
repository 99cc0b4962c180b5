//! The pre-parser: splits a query string into statements and recognizes the utility commands
//! that sqlparser does not parse the PostgreSQL way (COPY FROM STDIN options, VACUUM, CHECKPOINT,
//! SET/RESET/SHOW) plus the transaction-control commands, which are hot in pgbench's simple mode
//! and cheap to recognize by hand.

use crate::plan::{CopyPlan, Plan, TxnModes};
use crate::storage::Isolation;
use walnut_common::{Error, Result};

/// Splits `sql` at top-level semicolons (outside quotes, comments and dollar quotes). Returns the
/// non-empty statements, trimmed.
pub(crate) fn split_statements(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    fn push<'a>(out: &mut Vec<&'a str>, s: &'a str) {
        if !is_blank(s) {
            out.push(s.trim());
        }
    }
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'$' if !(b.get(i + 1).is_some_and(|c| c.is_ascii_digit())
                || (i > 0 && is_ident_byte(b[i - 1]))) =>
            {
                // $tag$ ... $tag$
                let tag_end = b[i + 1..]
                    .iter()
                    .position(|&c| !is_ident_byte(c))
                    .map(|p| i + 1 + p);
                if let Some(te) = tag_end.filter(|&te| b[te] == b'$') {
                    let tag = &sql[i..=te];
                    match sql[te + 1..].find(tag) {
                        Some(p) => i = te + 1 + p + tag.len() - 1,
                        None => i = b.len(),
                    }
                }
            }
            b';' => {
                push(&mut out, &sql[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if start < sql.len() {
        push(&mut out, &sql[start..]);
    }
    out
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// True if `s` holds only whitespace and comments.
fn is_blank(s: &str) -> bool {
    let mut rest = s.trim_start();
    loop {
        if rest.is_empty() {
            return true;
        }
        if let Some(r) = rest.strip_prefix("--") {
            rest = r.find('\n').map(|p| &r[p..]).unwrap_or("").trim_start();
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map(|p| &r[p + 2..]).unwrap_or("").trim_start();
        } else {
            return false;
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// Unquoted word, lower-cased.
    Word(String),
    /// "Quoted" identifier.
    QIdent(String),
    Str(String),
    Num(String),
    Punct(char),
}

fn lex(s: &str) -> Result<Vec<Tok>> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '-' && c.get(i + 1) == Some(&'-') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if ch == '\''
            || ch == '"'
            || ((ch == 'e' || ch == 'E') && c.get(i + 1) == Some(&'\''))
        {
            let escapes = ch == 'e' || ch == 'E';
            let q = if escapes { '\'' } else { ch };
            i += if escapes { 2 } else { 1 };
            let mut v = String::new();
            loop {
                let Some(&x) = c.get(i) else {
                    return Err(Error::syntax("unterminated quoted string"));
                };
                i += 1;
                if x == q {
                    if c.get(i) == Some(&q) {
                        v.push(q);
                        i += 1;
                        continue;
                    }
                    break;
                }
                if escapes && x == '\\' {
                    let Some(&n) = c.get(i) else {
                        return Err(Error::syntax("unterminated quoted string"));
                    };
                    i += 1;
                    v.push(match n {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        other => other,
                    });
                    continue;
                }
                v.push(x);
            }
            out.push(if q == '"' {
                Tok::QIdent(v)
            } else {
                Tok::Str(v)
            });
        } else if ch.is_ascii_digit()
            || (ch == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let st = i;
            while i < c.len() && (c[i].is_ascii_digit() || c[i] == '.') {
                i += 1;
            }
            out.push(Tok::Num(c[st..i].iter().collect()));
        } else if ch.is_alphabetic() || ch == '_' {
            let st = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == '$') {
                i += 1;
            }
            out.push(Tok::Word(
                c[st..i].iter().collect::<String>().to_lowercase(),
            ));
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    Ok(out)
}

fn first_word(s: &str) -> String {
    s.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase()
}

fn syntax_near(t: Option<&Tok>) -> Error {
    match t {
        Some(t) => Error::syntax(format!("syntax error at or near \"{}\"", tok_text(t))),
        None => Error::syntax("syntax error at end of input"),
    }
}

fn tok_text(t: &Tok) -> String {
    match t {
        Tok::Word(w) => w.clone(),
        Tok::QIdent(s) | Tok::Str(s) | Tok::Num(s) => s.clone(),
        Tok::Punct(c) => c.to_string(),
    }
}

fn is_word(t: Option<&Tok>, w: &str) -> bool {
    matches!(t, Some(Tok::Word(x)) if x == w)
}

/// Recognizes the commands handled without sqlparser. `Ok(None)`: hand the text to sqlparser.
///
/// # Errors
/// 42601 for malformed commands of these kinds, 0A000 for unsupported variants.
pub(crate) fn preparse(stmt: &str) -> Result<Option<Plan>> {
    let w = first_word(stmt);
    let known = matches!(
        w.as_str(),
        "begin"
            | "start"
            | "commit"
            | "end"
            | "rollback"
            | "abort"
            | "set"
            | "reset"
            | "show"
            | "vacuum"
            | "analyze"
            | "analyse"
            | "checkpoint"
            | "copy"
            | "savepoint"
            | "release"
            | "discard"
            | "alter"
            | "create"
    );
    if !known {
        return Ok(None);
    }
    if w == "create" {
        // Only CREATE [TEMP] SEQUENCE is lexed here; every other CREATE goes to sqlparser.
        let rest = stmt.trim_start().get(6..).unwrap_or_default();
        if !matches!(first_word(rest).as_str(), "sequence" | "temp" | "temporary") {
            return Ok(None);
        }
    }
    if w == "alter" {
        // ALTER SYSTEM, ALTER SEQUENCE and ALTER TABLE ... ADD GENERATED are read here; a
        // table's other forms go to sqlparser, also when this lexer cannot read them.
        let rest = stmt.trim_start().get(5..).unwrap_or_default();
        match first_word(rest).as_str() {
            "system" | "sequence" => {}
            "table" => return lex(stmt).map_or(Ok(None), |t| parse_add_identity(&t)),
            _ => return Ok(None),
        }
    }
    let t = lex(stmt)?;
    if w == "create" {
        let seq = |i| is_word(t.get(i), "sequence");
        let temp = |i| is_word(t.get(i), "temp") || is_word(t.get(i), "temporary");
        if temp(1) && seq(2) {
            return Err(Error::unsupported("temporary sequences"));
        }
        return if seq(1) {
            parse_create_sequence(&t).map(Some)
        } else {
            Ok(None)
        };
    }
    if w == "alter" {
        return match &t.get(1) {
            Some(Tok::Word(w)) if w == "system" => parse_alter_system(&t).map(Some),
            _ => parse_alter_sequence(&t).map(Some),
        };
    }
    let at = |i: usize| t.get(i);
    let only_txn_words = |from: usize| {
        t[from.min(t.len())..]
            .iter()
            .all(|x| matches!(x, Tok::Word(_) | Tok::Punct(',')))
    };
    Ok(Some(match w.as_str() {
        "begin" | "start" => {
            if w == "start" && !is_word(at(1), "transaction") {
                return Err(syntax_near(at(1)));
            }
            if !only_txn_words(1) {
                return Err(syntax_near(
                    t.iter().skip(1).find(|x| !matches!(x, Tok::Word(_))),
                ));
            }
            Plan::Begin {
                modes: txn_modes(&t[1..])?,
            }
        }
        "commit" | "end" => {
            if t.iter().any(|x| matches!(x, Tok::Word(w) if w == "chain")) {
                return Err(Error::unsupported("COMMIT AND CHAIN"));
            }
            if t.len() > 2
                || (t.len() == 2 && !is_word(at(1), "work") && !is_word(at(1), "transaction"))
            {
                return Err(syntax_near(at(1)));
            }
            Plan::Commit
        }
        "rollback" | "abort" => {
            if t.iter()
                .any(|x| matches!(x, Tok::Word(w) if w == "to" || w == "savepoint"))
            {
                return Err(Error::unsupported("savepoints"));
            }
            if t.len() > 2
                || (t.len() == 2 && !is_word(at(1), "work") && !is_word(at(1), "transaction"))
            {
                return Err(syntax_near(at(1)));
            }
            Plan::Rollback
        }
        "savepoint" | "release" => return Err(Error::unsupported("savepoints")),
        "discard" => {
            use crate::plan::Discard;
            let what = match at(1) {
                Some(Tok::Word(w)) => match w.as_str() {
                    "all" => Discard::All,
                    "plans" => Discard::Plans,
                    "sequences" => Discard::Sequences,
                    "temp" | "temporary" => Discard::Temp,
                    _ => return Err(syntax_near(at(1))),
                },
                other => return Err(syntax_near(other)),
            };
            if t.len() > 2 {
                return Err(syntax_near(at(2)));
            }
            Plan::Discard(what)
        }
        "set" => parse_set(&t)?,
        "reset" => match (at(1), at(2)) {
            (Some(Tok::Word(a)), None) if a == "all" => Plan::Reset { name: None },
            (Some(Tok::Word(n) | Tok::QIdent(n)), None) => Plan::Reset {
                name: Some(n.clone()),
            },
            _ => return Err(syntax_near(at(1).or(at(2)))),
        },
        "show" => {
            let name = match (at(1), at(2)) {
                (Some(Tok::Word(a)), None) if a == "all" => None,
                (Some(Tok::Word(n) | Tok::QIdent(n)), None) => Some(n.clone()),
                (Some(Tok::Word(a)), Some(Tok::Word(b)))
                    if a == "transaction" && b == "isolation" =>
                {
                    Some("transaction_isolation".to_string())
                }
                (Some(Tok::Word(a)), Some(Tok::Word(b))) if a == "time" && b == "zone" => {
                    Some("TimeZone".to_string())
                }
                _ => return Err(syntax_near(at(1).or(at(2)))),
            };
            Plan::Show { name }
        }
        "vacuum" => parse_vacuum(&t, false)?,
        "analyze" | "analyse" => parse_vacuum(&t, true)?,
        "checkpoint" => {
            if t.len() > 1 {
                return Err(syntax_near(at(1)));
            }
            Plan::Checkpoint
        }
        "copy" => Plan::Copy(parse_copy(&t)?),
        _ => unreachable!("filtered by `known` and `alter`"),
    }))
}

/// The modes a transaction mode list (BEGIN, START TRANSACTION, SET TRANSACTION) names:
/// `ISOLATION LEVEL ...`, `READ ONLY`, `READ WRITE` (the last of each wins; `[NOT] DEFERRABLE`
/// changes nothing outside SERIALIZABLE). SERIALIZABLE is refused rather than run at a weaker
/// level: an application that asks for it relies on it.
///
/// # Errors
/// 0A000 for SERIALIZABLE and `SET TRANSACTION SNAPSHOT`; 42601 for a level that is not one
/// and for a word that is no part of a mode.
fn txn_modes(modes: &[Tok]) -> Result<TxnModes> {
    const WORDS: &[&str] = &[
        "isolation",
        "level",
        "read",
        "only",
        "write",
        "committed",
        "uncommitted",
        "repeatable",
        "serializable",
        "not",
        "deferrable",
        // BEGIN's and START's own noise words.
        "transaction",
        "work",
    ];
    if is_word(modes.first(), "snapshot") {
        return Err(Error::unsupported("SET TRANSACTION SNAPSHOT"));
    }
    if let Some(bad) = modes.iter().find(|t| match t {
        Tok::Word(w) => !WORDS.contains(&w.as_str()),
        Tok::Punct(',') => false,
        _ => true,
    }) {
        return Err(syntax_near(Some(bad)));
    }
    let mut out = TxnModes::default();
    let word = |i: usize| match modes.get(i) {
        Some(Tok::Word(w)) => w.as_str(),
        _ => "",
    };
    for k in 0..modes.len() {
        match (word(k), word(k + 1)) {
            ("read", "only") => out.read_only = Some(true),
            ("read", "write") => out.read_only = Some(false),
            _ => {}
        }
        if !(word(k) == "isolation" && word(k + 1) == "level") {
            continue;
        }
        out.isolation = Some(match (word(k + 2), word(k + 3)) {
            ("serializable", _) => {
                return Err(Error::user(
                    walnut_common::SqlState::FEATURE_NOT_SUPPORTED,
                    "transaction isolation = serializable is not supported: walnut has no \
                     serializable snapshot isolation yet (use REPEATABLE READ)",
                ))
            }
            ("repeatable", "read") => Isolation::RepeatableRead,
            ("read", "committed" | "uncommitted") => Isolation::ReadCommitted,
            _ => return Err(syntax_near(modes.get(k + 2))),
        });
    }
    Ok(out)
}

/// `VACUUM [ ( option [ value ] [, ...] ) ] [ FULL ] [ FREEZE ] [ VERBOSE ] [ ANALYZE ]
/// [ table [ ( column [, ...] ) ] [, ...] ]`, or `ANALYZE [ ( ... ) ] [ VERBOSE ] [ tables ]`
/// (`analyze_only`). Options other than VERBOSE and FREEZE are accepted and change nothing:
/// FULL does what plain VACUUM does (DESIGN.md of the storage, "VACUUM").
fn parse_vacuum(t: &[Tok], analyze_only: bool) -> Result<Plan> {
    const OPTIONS: &[&str] = &[
        "verbose",
        "analyze",
        "analyse",
        "full",
        "freeze",
        "skip_locked",
        "index_cleanup",
        "process_main",
        "process_toast",
        "truncate",
        "parallel",
        "disable_page_skipping",
        "buffer_usage_limit",
        "skip_database_stats",
        "only_database_stats",
    ];
    let mut verbose = false;
    let mut freeze = false;
    let mut i = 1;
    if matches!(t.get(i), Some(Tok::Punct('('))) {
        i += 1;
        loop {
            let Some(Tok::Word(o)) = t.get(i) else {
                return Err(syntax_near(t.get(i)));
            };
            if !OPTIONS.contains(&o.as_str()) {
                return Err(Error::syntax(format!(
                    "unrecognized {} option \"{o}\"",
                    if analyze_only { "ANALYZE" } else { "VACUUM" }
                )));
            }
            i += 1;
            // An optional value: a boolean, a number or a quoted size.
            let mut on = true;
            if let Some(Tok::Word(v) | Tok::Str(v) | Tok::Num(v)) = t.get(i) {
                on = !matches!(
                    v.to_ascii_lowercase().as_str(),
                    "false" | "off" | "0" | "no"
                );
                i += 1;
            }
            if o == "verbose" {
                verbose = on;
            }
            if o == "freeze" {
                freeze = on;
            }
            match t.get(i) {
                Some(Tok::Punct(',')) => i += 1,
                Some(Tok::Punct(')')) => {
                    i += 1;
                    break;
                }
                other => return Err(syntax_near(other)),
            }
        }
    } else {
        let words: &[&str] = if analyze_only {
            &["verbose"]
        } else {
            &["full", "freeze", "verbose", "analyze", "analyse"]
        };
        while let Some(Tok::Word(w)) = t.get(i) {
            if !words.contains(&w.as_str()) {
                break;
            }
            verbose |= w == "verbose";
            freeze |= w == "freeze";
            i += 1;
        }
    }
    let mut tables = Vec::new();
    while i < t.len() {
        let Some(Tok::Word(n) | Tok::QIdent(n)) = t.get(i) else {
            return Err(syntax_near(t.get(i)));
        };
        let mut name = n.clone();
        i += 1;
        if matches!(t.get(i), Some(Tok::Punct('.'))) {
            let Some(Tok::Word(n) | Tok::QIdent(n)) = t.get(i + 1) else {
                return Err(syntax_near(t.get(i + 1)));
            };
            name = n.clone();
            i += 2;
        }
        if matches!(t.get(i), Some(Tok::Punct('('))) {
            // A column list (ANALYZE's): nothing to do with it.
            while !matches!(t.get(i), Some(Tok::Punct(')')) | None) {
                i += 1;
            }
            if i == t.len() {
                return Err(syntax_near(None));
            }
            i += 1;
        }
        tables.push(name);
        match t.get(i) {
            Some(Tok::Punct(',')) if i + 1 < t.len() => i += 1,
            None => {}
            other => return Err(syntax_near(other)),
        }
    }
    Ok(Plan::Vacuum {
        analyze_only,
        verbose,
        freeze,
        tables,
    })
}

/// `CREATE SEQUENCE [IF NOT EXISTS] name [AS type] [INCREMENT [BY] n] [MINVALUE n | NO
/// MINVALUE] [MAXVALUE n | NO MAXVALUE] [START [WITH] n] [CACHE n] [[NO] CYCLE] [OWNED BY
/// NONE]`, the options in any order, as PostgreSQL's grammar takes them (sqlparser wants them in
/// this order, which `pg_dump`'s `START WITH` before `INCREMENT BY` is not).
///
/// # Errors
/// 42601 for a malformed statement or a repeated option; 22023 for options PostgreSQL refuses
/// ([`crate::sequence::sequence_def`]); 0A000 for `OWNED BY` a column.
fn parse_create_sequence(t: &[Tok]) -> Result<Plan> {
    let mut i = 2;
    let if_not_exists = parse_if(t, &mut i, "not")?;
    let name = parse_relation_name(t, &mut i)?;
    let c = parse_seq_clauses(t, &mut i, SeqClause::Create)?;
    if let Some(tok) = t.get(i) {
        return Err(syntax_near(Some(tok)));
    }
    if matches!(c.owned_by, Some(Some(_))) {
        return Err(Error::unsupported("CREATE SEQUENCE ... OWNED BY a column"));
    }
    Ok(Plan::CreateSequence {
        def: crate::sequence::sequence_def(name, &c.opts, None)?,
        if_not_exists,
    })
}

/// `IF [NOT] EXISTS` at `t[*i]` (`not`: "not" for IF NOT EXISTS, "" for IF EXISTS): whether it
/// is there, advancing `i` past it.
///
/// # Errors
/// 42601 for `IF` without the rest.
fn parse_if(t: &[Tok], i: &mut usize, not: &str) -> Result<bool> {
    if !is_word(t.get(*i), "if") {
        return Ok(false);
    }
    *i += 1;
    if !not.is_empty() {
        if !is_word(t.get(*i), not) {
            return Err(syntax_near(t.get(*i)));
        }
        *i += 1;
    }
    if !is_word(t.get(*i), "exists") {
        return Err(syntax_near(t.get(*i)));
    }
    *i += 1;
    Ok(true)
}

/// Where sequence options are written: which clauses besides the common ones are allowed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SeqClause {
    /// CREATE SEQUENCE: `OWNED BY`.
    Create,
    /// ALTER SEQUENCE: `OWNED BY`, `RESTART [[WITH] n]`.
    Alter,
    /// An identity column's `( ... )`: `SEQUENCE NAME`, up to the closing parenthesis.
    Identity,
}

/// Sequence clauses as written ([`parse_seq_clauses`]).
#[derive(Default)]
struct SeqClauses {
    opts: crate::sequence::SeqOptions,
    /// `RESTART` (`Some(None)`: without a value, to START).
    restart: Option<Option<i64>>,
    /// `OWNED BY table.column` (`Some(None)`: `OWNED BY NONE`).
    owned_by: Option<Option<(String, String)>>,
    /// `SEQUENCE NAME name`.
    sequence_name: Option<String>,
}

/// Sequence options at `t[*i..]` in any order, as PostgreSQL's `SeqOptList`, up to the end
/// of the statement or (for [`SeqClause::Identity`]) a `)`, where `i` is left.
///
/// # Errors
/// 42601 for a malformed or repeated option, or one that `place` does not allow; 22003 for a
/// number outside bigint.
fn parse_seq_clauses(t: &[Tok], i: &mut usize, place: SeqClause) -> Result<SeqClauses> {
    use walnut_common::DataType;
    let mut c = SeqClauses::default();
    fn set<T>(slot: &mut Option<T>, v: T) -> Result<()> {
        if slot.replace(v).is_some() {
            return Err(Error::syntax("conflicting or redundant options"));
        }
        Ok(())
    }
    let num = |i: &mut usize| -> Result<i64> {
        let neg = match t.get(*i) {
            Some(Tok::Punct('-')) => true,
            Some(Tok::Punct('+')) => false,
            _ => {
                *i -= 1;
                false
            }
        };
        *i += 1;
        match t.get(*i) {
            Some(Tok::Num(n)) => {
                *i += 1;
                let text = if neg { format!("-{n}") } else { n.clone() };
                text.parse::<i64>().map_err(|_| {
                    Error::user(
                        walnut_common::SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                        format!("value \"{text}\" is out of range for type bigint"),
                    )
                })
            }
            other => Err(syntax_near(other)),
        }
    };
    let starts_num = |i: usize| matches!(t.get(i), Some(Tok::Num(_) | Tok::Punct('-' | '+')));
    while let Some(tok) = t.get(*i) {
        if place == SeqClause::Identity && matches!(tok, Tok::Punct(')')) {
            break;
        }
        let Tok::Word(w) = tok else {
            return Err(syntax_near(Some(tok)));
        };
        *i += 1;
        let o = &mut c.opts;
        match w.as_str() {
            "as" => {
                let ty = match t.get(*i) {
                    Some(Tok::Word(ty)) => match ty.as_str() {
                        "smallint" | "int2" => DataType::Int2,
                        "integer" | "int" | "int4" => DataType::Int4,
                        "bigint" | "int8" => DataType::Int8,
                        // Any other type: 22023 from `sequence_def`.
                        _ => DataType::Text,
                    },
                    other => return Err(syntax_near(other)),
                };
                *i += 1;
                set(&mut o.ty, ty)?;
            }
            "increment" => {
                if is_word(t.get(*i), "by") {
                    *i += 1;
                }
                set(&mut o.increment, num(i)?)?;
            }
            "minvalue" => set(&mut o.min, Some(num(i)?))?,
            "maxvalue" => set(&mut o.max, Some(num(i)?))?,
            "start" => {
                if is_word(t.get(*i), "with") {
                    *i += 1;
                }
                set(&mut o.start, num(i)?)?;
            }
            "restart" if place == SeqClause::Alter => {
                let with = is_word(t.get(*i), "with");
                if with {
                    *i += 1;
                }
                let v = if with || starts_num(*i) {
                    Some(num(i)?)
                } else {
                    None
                };
                set(&mut c.restart, v)?;
            }
            "cache" => set(&mut o.cache, num(i)?)?,
            "cycle" => set(&mut o.cycle, true)?,
            "no" => {
                match t.get(*i) {
                    Some(Tok::Word(x)) if x == "minvalue" => set(&mut o.min, None)?,
                    Some(Tok::Word(x)) if x == "maxvalue" => set(&mut o.max, None)?,
                    Some(Tok::Word(x)) if x == "cycle" => set(&mut o.cycle, false)?,
                    other => return Err(syntax_near(other)),
                }
                *i += 1;
            }
            "owned" if place != SeqClause::Identity && is_word(t.get(*i), "by") => {
                *i += 1;
                if is_word(t.get(*i), "none") {
                    *i += 1;
                    set(&mut c.owned_by, None)?;
                    continue;
                }
                // table.column or public.table.column.
                let mut parts = vec![parse_relation_part(t.get(*i))?];
                *i += 1;
                while matches!(t.get(*i), Some(Tok::Punct('.'))) {
                    parts.push(parse_relation_part(t.get(*i + 1))?);
                    *i += 2;
                }
                let owner = match parts.as_slice() {
                    [tab, col] => (tab.clone(), col.clone()),
                    [schema, tab, col] if schema == "public" => (tab.clone(), col.clone()),
                    [schema, _, _] => {
                        return Err(Error::user(
                            walnut_common::SqlState::INVALID_SCHEMA_NAME,
                            format!("schema \"{schema}\" does not exist"),
                        ))
                    }
                    _ => {
                        return Err(Error::syntax("invalid OWNED BY option")
                            .with_detail("Specify OWNED BY table.column or OWNED BY NONE."))
                    }
                };
                set(&mut c.owned_by, Some(owner))?;
            }
            "sequence" if place == SeqClause::Identity && is_word(t.get(*i), "name") => {
                *i += 1;
                let name = parse_relation_name(t, i)?;
                set(&mut c.sequence_name, name)?;
            }
            _ => return Err(syntax_near(Some(tok))),
        }
    }
    Ok(c)
}

/// `ALTER SEQUENCE [IF EXISTS] name` followed by options (those of CREATE SEQUENCE, `RESTART
/// [[WITH] n]`, `OWNED BY table.column | NONE`) or by `OWNER TO role`.
///
/// # Errors
/// 42601 for a malformed statement; 0A000 for `RENAME`, `SET SCHEMA` and the other forms.
fn parse_alter_sequence(t: &[Tok]) -> Result<Plan> {
    let mut i = 2;
    let if_exists = parse_if(t, &mut i, "")?;
    let name = parse_relation_name(t, &mut i)?;
    if is_word(t.get(i), "owner") && is_word(t.get(i + 1), "to") {
        let role = parse_role(t.get(i + 2))?;
        if let Some(tok) = t.get(i + 3) {
            return Err(syntax_near(Some(tok)));
        }
        return Ok(Plan::AlterOwner {
            name,
            if_exists,
            sequence: true,
            role,
        });
    }
    if matches!(t.get(i), Some(Tok::Word(w)) if matches!(w.as_str(), "rename" | "set" | "reset")) {
        return Err(Error::unsupported(format!(
            "ALTER SEQUENCE ... {}",
            tok_text(&t[i]).to_uppercase()
        )));
    }
    if i == t.len() {
        return Err(syntax_near(None));
    }
    let c = parse_seq_clauses(t, &mut i, SeqClause::Alter)?;
    if let Some(tok) = t.get(i) {
        return Err(syntax_near(Some(tok)));
    }
    Ok(Plan::AlterSequence {
        name,
        if_exists,
        options: c.opts,
        restart: c.restart,
        owned_by: c.owned_by,
    })
}

/// A role name in `OWNER TO`: a name, or `CURRENT_USER`, `CURRENT_ROLE`, `SESSION_USER`
/// (returned as written, lower-cased).
fn parse_role(tok: Option<&Tok>) -> Result<String> {
    match tok {
        Some(Tok::Word(w) | Tok::QIdent(w)) => Ok(w.clone()),
        Some(Tok::Str(s)) => Err(syntax_near(Some(&Tok::Str(s.clone())))),
        other => Err(syntax_near(other)),
    }
}

/// `ALTER TABLE [IF EXISTS] [ONLY] name ALTER [COLUMN] column ADD GENERATED {ALWAYS | BY
/// DEFAULT} AS IDENTITY [( options )]`, which sqlparser cannot read with `SEQUENCE NAME` (as
/// pg_dump writes it) or with options out of its order; `None` for any other ALTER TABLE.
///
/// # Errors
/// 42601 for a malformed statement.
fn parse_add_identity(t: &[Tok]) -> Result<Option<Plan>> {
    let mut i = 2;
    let if_exists = parse_if(t, &mut i, "")?;
    if is_word(t.get(i), "only") {
        i += 1;
    }
    let Ok(table) = parse_relation_name(t, &mut i) else {
        return Ok(None);
    };
    if !is_word(t.get(i), "alter") {
        return Ok(None);
    }
    i += 1;
    if is_word(t.get(i), "column") {
        i += 1;
    }
    let Ok(column) = parse_relation_part(t.get(i)) else {
        return Ok(None);
    };
    if !(is_word(t.get(i + 1), "add") && is_word(t.get(i + 2), "generated")) {
        return Ok(None);
    }
    i += 3;
    let identity = if is_word(t.get(i), "always") {
        i += 1;
        walnut_common::Identity::Always
    } else if is_word(t.get(i), "by") && is_word(t.get(i + 1), "default") {
        i += 2;
        walnut_common::Identity::ByDefault
    } else {
        return Err(syntax_near(t.get(i)));
    };
    if !(is_word(t.get(i), "as") && is_word(t.get(i + 1), "identity")) {
        return Err(syntax_near(t.get(i)));
    }
    i += 2;
    let mut c = SeqClauses::default();
    if matches!(t.get(i), Some(Tok::Punct('('))) {
        i += 1;
        if matches!(t.get(i), Some(Tok::Punct(')'))) {
            return Err(syntax_near(t.get(i)));
        }
        c = parse_seq_clauses(t, &mut i, SeqClause::Identity)?;
        if !matches!(t.get(i), Some(Tok::Punct(')'))) {
            return Err(syntax_near(t.get(i)));
        }
        i += 1;
    }
    if let Some(tok) = t.get(i) {
        return Err(syntax_near(Some(tok)));
    }
    Ok(Some(Plan::AddIdentity {
        table,
        if_exists,
        column,
        identity,
        sequence: c.sequence_name,
        options: c.opts,
    }))
}

/// A relation name at `t[*i]` (`name`, `"Name"`, or `public.name`), advancing `i` past it.
///
/// # Errors
/// 42601 if there is none or it is empty; 3F000 for another schema.
fn parse_relation_name(t: &[Tok], i: &mut usize) -> Result<String> {
    let part = parse_relation_part;
    let mut name = part(t.get(*i))?;
    *i += 1;
    if matches!(t.get(*i), Some(Tok::Punct('.'))) {
        if name != "public" {
            return Err(Error::user(
                walnut_common::SqlState::INVALID_SCHEMA_NAME,
                format!("schema \"{name}\" does not exist"),
            ));
        }
        name = part(t.get(*i + 1))?;
        *i += 2;
    }
    Ok(name)
}

/// One part of a name: a word or a quoted identifier.
///
/// # Errors
/// 42601 for anything else, or `""`.
fn parse_relation_part(tok: Option<&Tok>) -> Result<String> {
    match tok {
        Some(Tok::Word(w)) => Ok(w.clone()),
        Some(Tok::QIdent(q)) if !q.is_empty() => Ok(q.clone()),
        Some(Tok::QIdent(_)) => Err(Error::syntax("zero-length delimited identifier")),
        other => Err(syntax_near(other)),
    }
}

/// `ALTER SYSTEM SET name { = | TO } value | DEFAULT`, `ALTER SYSTEM RESET name | ALL`.
fn parse_alter_system(t: &[Tok]) -> Result<Plan> {
    let rest = &t[2..];
    if is_word(rest.first(), "set") {
        if is_word(rest.get(1), "local") || is_word(rest.get(1), "session") {
            return Err(syntax_near(rest.get(1)));
        }
        return match parse_set(rest)? {
            Plan::Set { name, value, .. } => Ok(Plan::AlterSystem { name, value }),
            _ => Err(syntax_near(rest.get(1))),
        };
    }
    if is_word(rest.first(), "reset") {
        return match (rest.get(1), rest.get(2)) {
            (Some(Tok::Word(n) | Tok::QIdent(n)), None) => Ok(Plan::AlterSystem {
                name: n.clone(),
                value: None,
            }),
            _ => Err(syntax_near(rest.get(1).or(rest.get(2)))),
        };
    }
    Err(syntax_near(rest.first()))
}

fn parse_set(t: &[Tok]) -> Result<Plan> {
    let mut i = 1;
    let mut local = false;
    match t.get(i) {
        Some(Tok::Word(w)) if w == "local" => {
            local = true;
            i += 1;
        }
        Some(Tok::Word(w))
            if w == "session" && matches!(t.get(i + 1), Some(Tok::Word(n)) if n != "to") =>
        {
            // `SET SESSION CHARACTERISTICS AS TRANSACTION modes` (pgjdbc's
            // setTransactionIsolation) sets default_transaction_isolation.
            if is_word(t.get(i + 1), "characteristics")
                && is_word(t.get(i + 2), "as")
                && is_word(t.get(i + 3), "transaction")
            {
                return Ok(Plan::Set {
                    name: "default_transaction_isolation".into(),
                    value: match txn_modes(&t[i + 4..])?.isolation {
                        Some(Isolation::RepeatableRead) => Some("repeatable read".into()),
                        Some(Isolation::ReadCommitted) => Some("read committed".into()),
                        None => {
                            return Err(Error::unsupported(
                                "SET SESSION CHARACTERISTICS other than ISOLATION LEVEL",
                            ))
                        }
                    },
                    local: false,
                });
            }
            if is_word(t.get(i + 1), "authorization") || is_word(t.get(i + 1), "characteristics") {
                return Err(Error::unsupported(
                    "SET SESSION AUTHORIZATION/CHARACTERISTICS",
                ));
            }
            i += 1;
        }
        _ => {}
    }
    let name = match t.get(i) {
        Some(Tok::Word(w))
            if w == "transaction" && !matches!(t.get(i + 1), Some(Tok::Punct('='))) =>
        {
            return Ok(Plan::SetTransaction {
                modes: txn_modes(&t[i + 1..])?,
            });
        }
        Some(Tok::Word(w)) if w == "time" && is_word(t.get(i + 1), "zone") => {
            i += 1;
            "timezone".to_string()
        }
        Some(Tok::Word(w)) if w == "names" => "client_encoding".to_string(),
        Some(Tok::Word(w) | Tok::QIdent(w)) => {
            let mut n = w.clone();
            while matches!(t.get(i + 1), Some(Tok::Punct('.'))) {
                match t.get(i + 2) {
                    Some(Tok::Word(x) | Tok::QIdent(x)) => n = format!("{n}.{x}"),
                    other => return Err(syntax_near(other)),
                }
                i += 2;
            }
            n
        }
        other => return Err(syntax_near(other)),
    };
    i += 1;
    // SET TIME ZONE x and SET NAMES x take no `=`/`TO`.
    let optional_eq = name == "timezone" || name == "client_encoding";
    match t.get(i) {
        Some(Tok::Punct('=')) => i += 1,
        Some(Tok::Word(w)) if w == "to" => i += 1,
        _ if optional_eq => {}
        other => return Err(syntax_near(other)),
    }
    let mut parts = Vec::new();
    loop {
        let neg = matches!(t.get(i), Some(Tok::Punct('-')));
        if neg {
            i += 1;
        }
        let v = match t.get(i) {
            Some(Tok::Word(w))
                if (w == "default" || w == "local") && parts.is_empty() && t.len() == i + 1 =>
            {
                return Ok(Plan::Set {
                    name,
                    value: None,
                    local,
                });
            }
            Some(Tok::Word(w)) => w.clone(),
            Some(Tok::QIdent(w)) | Some(Tok::Str(w)) => w.clone(),
            Some(Tok::Num(n)) => {
                if neg {
                    format!("-{n}")
                } else {
                    n.clone()
                }
            }
            other => return Err(syntax_near(other)),
        };
        parts.push(v);
        i += 1;
        match t.get(i) {
            None => break,
            Some(Tok::Punct(',')) => i += 1,
            other => return Err(syntax_near(other)),
        }
    }
    Ok(Plan::Set {
        name,
        value: Some(parts.join(", ")),
        local,
    })
}

fn parse_copy(t: &[Tok]) -> Result<CopyPlan> {
    let mut i = 1;
    let mut table = match t.get(i) {
        Some(Tok::Word(w) | Tok::QIdent(w)) => w.clone(),
        Some(Tok::Punct('(')) => return Err(Error::unsupported("COPY (query)")),
        other => return Err(syntax_near(other)),
    };
    i += 1;
    if matches!(t.get(i), Some(Tok::Punct('.'))) {
        match t.get(i + 1) {
            Some(Tok::Word(w) | Tok::QIdent(w)) if table == "public" => table = w.clone(),
            Some(Tok::Word(w) | Tok::QIdent(w)) => {
                return Err(crate::errors::undefined_table(&format!("{table}.{w}")))
            }
            other => return Err(syntax_near(other)),
        }
        i += 2;
    }
    let mut columns = None;
    if matches!(t.get(i), Some(Tok::Punct('('))) {
        let mut cols = Vec::new();
        i += 1;
        loop {
            match t.get(i) {
                Some(Tok::Word(w) | Tok::QIdent(w)) => cols.push(w.clone()),
                other => return Err(syntax_near(other)),
            }
            i += 1;
            match t.get(i) {
                Some(Tok::Punct(',')) => i += 1,
                Some(Tok::Punct(')')) => {
                    i += 1;
                    break;
                }
                other => return Err(syntax_near(other)),
            }
        }
        columns = Some(cols);
    }
    match t.get(i) {
        Some(Tok::Word(w)) if w == "from" => i += 1,
        Some(Tok::Word(w)) if w == "to" => return Err(Error::unsupported("COPY TO")),
        other => return Err(syntax_near(other)),
    }
    match t.get(i) {
        Some(Tok::Word(w)) if w == "stdin" => i += 1,
        Some(Tok::Str(_)) | Some(Tok::Word(_)) => {
            return Err(Error::unsupported("COPY FROM a file or program"))
        }
        other => return Err(syntax_near(other)),
    }
    let mut plan = CopyPlan {
        table,
        columns,
        delimiter: b'\t',
        null: "\\N".to_string(),
    };
    if is_word(t.get(i), "with") {
        i += 1;
    }
    let mut opts: Vec<(String, Option<Tok>)> = Vec::new();
    if matches!(t.get(i), Some(Tok::Punct('('))) {
        i += 1;
        loop {
            let name = match t.get(i) {
                Some(Tok::Word(w)) => w.clone(),
                other => return Err(syntax_near(other)),
            };
            i += 1;
            let value = match t.get(i) {
                Some(Tok::Punct(',')) | Some(Tok::Punct(')')) => None,
                Some(v) => {
                    i += 1;
                    Some(v.clone())
                }
                None => return Err(syntax_near(None)),
            };
            opts.push((name, value));
            match t.get(i) {
                Some(Tok::Punct(',')) => i += 1,
                Some(Tok::Punct(')')) => {
                    i += 1;
                    break;
                }
                other => return Err(syntax_near(other)),
            }
        }
    } else {
        // Old-style options: FREEZE, DELIMITER [AS] 'x', NULL [AS] 'x', BINARY, CSV.
        while let Some(Tok::Word(w)) = t.get(i) {
            i += 1;
            if is_word(t.get(i), "as") {
                i += 1;
            }
            let value = match (w.as_str(), t.get(i)) {
                ("delimiter" | "null", Some(v @ Tok::Str(_))) => {
                    i += 1;
                    Some(v.clone())
                }
                _ => None,
            };
            opts.push((w.clone(), value));
        }
    }
    if let Some(extra) = t.get(i) {
        return Err(syntax_near(Some(extra)));
    }
    for (name, value) in opts {
        let text = value.as_ref().map(tok_text);
        match name.as_str() {
            "freeze" => {}
            "format" => match text.as_deref() {
                Some("text") => {}
                Some(f) => return Err(Error::unsupported(format!("COPY format \"{f}\""))),
                None => return Err(syntax_near(None)),
            },
            "binary" | "csv" => return Err(Error::unsupported(format!("COPY format \"{name}\""))),
            "delimiter" => {
                let d = text.unwrap_or_default();
                if d.len() != 1 {
                    return Err(Error::user(
                        walnut_common::SqlState::FEATURE_NOT_SUPPORTED,
                        "COPY delimiter must be a single one-byte character",
                    ));
                }
                plan.delimiter = d.as_bytes()[0];
            }
            "null" => plan.null = text.unwrap_or_default(),
            "encoding" => {}
            other => {
                return Err(Error::syntax(format!("option \"{other}\" not recognized")));
            }
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitting_respects_quotes_and_comments() {
        assert_eq!(
            split_statements("select 1; select ';' ; -- c;\n select 2"),
            vec!["select 1", "select ';'", "-- c;\n select 2"]
        );
        assert_eq!(split_statements(" ; ;"), Vec::<&str>::new());
        assert_eq!(
            split_statements("select $a$;$a$; select $1"),
            vec!["select $a$;$a$", "select $1"]
        );
        assert_eq!(
            split_statements("select /* ; */ 1"),
            vec!["select /* ; */ 1"]
        );
    }

    #[test]
    fn copy_options() {
        let Some(Plan::Copy(c)) =
            preparse("copy pgbench_accounts from stdin with (freeze on)").unwrap()
        else {
            panic!()
        };
        assert_eq!(c.table, "pgbench_accounts");
        let Some(Plan::Copy(c)) =
            preparse("COPY t (a, b) FROM STDIN WITH (FORMAT text, DELIMITER ',', NULL '')")
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (c.delimiter, c.null.as_str(), c.columns.unwrap().len()),
            (b',', "", 2)
        );
        let Some(Plan::Copy(_)) = preparse("copy t from stdin").unwrap() else {
            panic!()
        };
        assert!(preparse("copy t to stdout").is_err());
        assert!(preparse("copy t from stdin with (format csv)").is_err());
    }

    #[test]
    fn vacuum_forms() {
        let p = |s: &str| match preparse(s).unwrap().unwrap() {
            Plan::Vacuum {
                analyze_only,
                verbose,
                tables,
                ..
            } => (analyze_only, verbose, tables.join(",")),
            other => panic!("{s}: {other:?}"),
        };
        let freeze = |s: &str| matches!(preparse(s), Ok(Some(Plan::Vacuum { freeze: true, .. })));
        assert!(freeze("vacuum freeze t") && freeze("vacuum (freeze) t"));
        assert!(!freeze("vacuum t") && !freeze("vacuum (freeze off) t"));
        assert_eq!(p("vacuum"), (false, false, String::new()));
        assert_eq!(p("VACUUM VERBOSE t"), (false, true, "t".into()));
        assert_eq!(
            p("vacuum full freeze verbose analyze public.t, \"U\""),
            (false, true, "t,U".into())
        );
        assert_eq!(
            p("vacuum (verbose, analyze, index_cleanup off, parallel 2) t"),
            (false, true, "t".into())
        );
        assert_eq!(p("vacuum (verbose false) t"), (false, false, "t".into()));
        assert_eq!(p("analyze verbose t (a, b), u"), (true, true, "t,u".into()));
        for bad in [
            "vacuum (bogus) t",
            "vacuum (verbose t",
            "vacuum t u",
            "vacuum t,",
            "vacuum verbose 5",
            "analyze t (a",
        ] {
            assert_eq!(
                preparse(bad).unwrap_err().sqlstate,
                walnut_common::SqlState::SYNTAX_ERROR,
                "{bad}"
            );
        }
    }

    #[test]
    fn set_forms() {
        let p = |s: &str| format!("{:?}", preparse(s).unwrap().unwrap());
        assert_eq!(
            p("SET commit_delay = 10"),
            "Set { name: \"commit_delay\", value: Some(\"10\"), local: false }"
        );
        assert_eq!(
            p("set local synchronous_commit to off"),
            "Set { name: \"synchronous_commit\", value: Some(\"off\"), local: true }"
        );
        assert_eq!(
            p("set session work_mem = '64MB'"),
            "Set { name: \"work_mem\", value: Some(\"64MB\"), local: false }"
        );
        assert_eq!(
            p("set search_path = a, b"),
            "Set { name: \"search_path\", value: Some(\"a, b\"), local: false }"
        );
        assert_eq!(
            p("set extra_float_digits = -3"),
            "Set { name: \"extra_float_digits\", value: Some(\"-3\"), local: false }"
        );
        assert_eq!(
            p("set time zone 'UTC'"),
            "Set { name: \"timezone\", value: Some(\"UTC\"), local: false }"
        );
        assert_eq!(
            p("set jit to default"),
            "Set { name: \"jit\", value: None, local: false }"
        );
        assert_eq!(
            p("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"),
            "SetTransaction { modes: TxnModes { isolation: Some(ReadCommitted), read_only: None } }"
        );
        assert_eq!(
            p("set transaction read write, isolation level repeatable read"),
            "SetTransaction { modes: TxnModes { isolation: Some(RepeatableRead), read_only: Some(false) } }"
        );
        assert_eq!(
            p("start transaction read only"),
            "Begin { modes: TxnModes { isolation: None, read_only: Some(true) } }"
        );
        assert_eq!(
            p("begin isolation level read committed read only"),
            "Begin { modes: TxnModes { isolation: Some(ReadCommitted), read_only: Some(true) } }"
        );
        assert!(preparse("begin isolation level snapshot").is_err());
        assert!(preparse("set transaction frobnicate").is_err());
        assert!(preparse("set transaction snapshot '00000003-0000001B-1'").is_err());
        assert!(preparse("begin work").is_ok());
        assert_eq!(
            p("set session characteristics as transaction isolation level repeatable read"),
            "Set { name: \"default_transaction_isolation\", value: Some(\"repeatable read\"), local: false }"
        );
        assert_eq!(p("show all"), "Show { name: None }");
        assert_eq!(
            p("ALTER SYSTEM SET checkpoint_timeout = '10min'"),
            "AlterSystem { name: \"checkpoint_timeout\", value: Some(\"10min\") }"
        );
        assert_eq!(
            p("alter system set wal_writer_delay to default"),
            "AlterSystem { name: \"wal_writer_delay\", value: None }"
        );
        assert_eq!(
            p("alter system reset all"),
            "AlterSystem { name: \"all\", value: None }"
        );
        assert!(preparse("alter system set local x = 1").is_err());
        assert!(preparse("alter system frobnicate").is_err());
        assert!(preparse("alter table t add primary key (a)")
            .unwrap()
            .is_none());
        assert_eq!(
            p("begin isolation level read uncommitted"),
            "Begin { modes: TxnModes { isolation: Some(ReadCommitted), read_only: None } }"
        );
        assert_eq!(p("end"), "Commit");
        assert!(preparse("select 1").unwrap().is_none());
    }
}
