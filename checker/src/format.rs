//! History files, read straight into a [`Flat`] and written from a [`History`] or a `Flat`.
//!
//! Two forms, both ending with a trailer that counts what precedes it (so an empty or cut
//! file is an error, not a clean check of nothing):
//!
//! - JSON Lines (records in [`crate::history`]), last line
//!   `{"type":"end","txns":N,"committed":C,"aborted":A,"finals":F,"invariants":I}`.
//! - Binary (`FILE.bin`), little-endian, for big histories; layout in [`LAYOUT`] and
//!   docs/checker.md. It starts with [`MAGIC`], whose first byte (0x89) no JSON text starts
//!   with, so [`read`] tells the two apart by it.
//!
//! Readers never panic on bad input and allocate in proportion to the bytes actually read
//! (length fields are never trusted for an allocation).

use std::collections::HashMap;
use std::io::{self, BufRead, Read, Write};

use crate::flat::{Flat, PredRow, Row};
use crate::history::{Access, Final, History, HistoryError, Invariant, Line, PredicateRead, Status, Trailer, Txn};

/// First bytes of a binary history.
pub const MAGIC: [u8; 8] = *b"\x89TXBEDH\n";
/// The binary format version this build writes and reads.
pub const VERSION: u16 = 1;
/// The record layout, written into every binary header for people and other tools.
pub const LAYOUT: &str = "txbed binary history v1, little-endian. Header: magic[8] version:u16 \
layout_len:u32 layout[layout_len] txns_hint:u64 accesses_hint:u64. Records, each a tag byte then: \
'S' string: len:u32 bytes[len] (UTF-8; string ids count from 1, 0 is the empty string); \
'T' txn: id:u64 start_ns:u64 end_ns:u64 coroutine:u32 label:u32(string id) node:u16 worker:u16 \
status:u8(0 committed, 1 aborted) reads:u32 writes:u32 preds:u32, then (reads+writes) x \
(key:u64 version:u64), then preds x (lo:u64 hi:u64 n:u32 then n x (key:u64 version:u64)); \
'F' final: replica:u32(string id) key:u64 version:u64; 'I' invariant: name:u32(string id) \
expected:i64 actual:i64; 'M' meta: len:u32 JSON object[len]; 'E' end: txns:u64 committed:u64 \
aborted:u64 finals:u64 invariants:u64, last in the file.";

/// A JSON line longer than this is refused rather than buffered (a legitimate transaction
/// with a million reads is ~40 MB).
pub const MAX_LINE: usize = 256 << 20;
const MAX_STRING: usize = 1 << 20;
const MAX_META: usize = 64 << 20;
const MAX_LAYOUT: usize = 64 << 10;

fn err(line: usize, message: impl Into<String>) -> HistoryError {
    HistoryError { line, message: message.into() }
}

/// Which form a file is in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Binary,
}

impl Format {
    /// Binary for a `.bin` path, JSON Lines otherwise (how `--history FILE` picks).
    pub fn for_path(p: &std::path::Path) -> Format {
        if p.extension().is_some_and(|e| e == "bin") {
            Format::Binary
        } else {
            Format::Jsonl
        }
    }
}

/// Reads a history file of either form (binary if it starts with [`MAGIC`]'s first byte).
pub fn read_path(path: &std::path::Path) -> Result<Flat, HistoryError> {
    let f = std::fs::File::open(path).map_err(|e| err(0, format!("cannot read history: {e}")))?;
    let size = f.metadata().ok().map(|m| m.len());
    read(io::BufReader::with_capacity(1 << 16, f), size)
}

/// Reads either form from `r`; `size`, the file's length if known, bounds what is reserved
/// up front from the binary header's hints.
pub fn read(mut r: impl BufRead, size: Option<u64>) -> Result<Flat, HistoryError> {
    let first = r.fill_buf().map_err(|e| err(0, format!("cannot read: {e}")))?.first().copied();
    if first == Some(MAGIC[0]) {
        read_binary(r, size)
    } else {
        read_jsonl(r)
    }
}

/// Counts records as they are read, to compare with the trailer.
fn count(c: &mut Trailer, status: Status) {
    c.txns += 1;
    match status {
        Status::Committed => c.committed += 1,
        Status::Aborted => c.aborted += 1,
    }
}

/// The trailer against what was read: each differing count by name.
fn compare(expected: &Trailer, found: &Trailer) -> Result<(), String> {
    let pairs = [
        ("txns", expected.txns, found.txns),
        ("committed", expected.committed, found.committed),
        ("aborted", expected.aborted, found.aborted),
        ("finals", expected.finals, found.finals),
        ("invariants", expected.invariants, found.invariants),
    ];
    let bad: Vec<String> =
        pairs.iter().filter(|(_, e, f)| e != f).map(|(n, e, f)| format!("{n}: trailer says {e}, found {f}")).collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the trailer's counts do not match the records before it ({}); records are missing or added",
            bad.join("; ")
        ))
    }
}

/// Structural checks that would make the graph meaningless (the same a `History` read always
/// made), over a whole `Flat`.
pub fn validate(f: &Flat) -> Result<(), HistoryError> {
    let mut c = Checks::new();
    for (i, r) in f.txns.iter().enumerate() {
        c.row(0, r, f.writes(i));
    }
    c.finish(f)
}

/// The checks of [`validate`], made by the readers as each row arrives (while it is in cache).
/// The first problem is kept and reported after the trailer's, so a cut file says
/// "truncated" first; duplicate ids cost one pass when ids increase, as writers emit them,
/// else a sort.
struct Checks {
    first: Option<HistoryError>,
    prev: Option<u64>,
    increasing: bool,
}

impl Checks {
    fn new() -> Self {
        Checks { first: None, prev: None, increasing: true }
    }
    #[inline]
    fn row(&mut self, line: usize, r: &Row, writes: &[Access]) {
        if self.prev.is_some_and(|p| r.id <= p) {
            self.increasing = false;
        }
        self.prev = Some(r.id);
        if self.first.is_some() {
            return;
        }
        if r.end_ns < r.start_ns {
            self.first = Some(err(line, format!("transaction {} ends before it starts", r.id)));
        } else if writes.iter().any(|w| w.version == 0) {
            self.first = Some(err(
                line,
                format!("transaction {} installs version 0, which is reserved for the initial load", r.id),
            ));
        }
    }
    fn finish(self, f: &Flat) -> Result<(), HistoryError> {
        if !self.increasing {
            let mut ids: Vec<u64> = f.txns.iter().map(|t| t.id).collect();
            ids.sort_unstable();
            if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                return Err(err(0, format!("transaction id {} appears twice", w[0])));
            }
        }
        match self.first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// JSON Lines

/// Reads JSON Lines into a `Flat`. Blank lines are skipped; the last record must be the
/// trailer and its counts must match.
///
/// The common records (`txn` without predicates, `final`) go through a hand-written scanner:
/// serde through the internally tagged `Line` enum buffers every line into a `Content` tree
/// first and cost ~5 us a transaction (72% of `txbed check`). The scanner accepts only a
/// strict subset of what serde accepts (no escapes, no duplicate or unknown fields, plain
/// integers in range) and gives up on anything else, which then goes to serde, so errors and
/// unusual lines are exactly serde's.
pub fn read_jsonl(mut r: impl BufRead) -> Result<Flat, HistoryError> {
    let mut f = Flat::default();
    let mut line = Vec::with_capacity(512);
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let mut n = 0usize;
    let mut records = 0usize;
    let mut last = 0usize;
    let mut trailer: Option<(usize, Trailer)> = None;
    let mut counts = Trailer::default();
    let mut checks = Checks::new();
    loop {
        line.clear();
        let got = (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| err(n + 1, format!("cannot read: {e}")))?;
        if got == 0 {
            break;
        }
        n += 1;
        if line.len() > MAX_LINE {
            return Err(err(n, format!("line longer than {} MiB; not a history file?", MAX_LINE >> 20)));
        }
        let s = line.trim_ascii();
        if s.is_empty() {
            continue;
        }
        if let Some((at, _)) = trailer {
            return Err(err(n, format!("data after the trailer (line {at} ended the history)")));
        }
        records += 1;
        last = n;
        match scan(s, &mut reads, &mut writes) {
            Some(Scanned::Txn(row, label)) => {
                let label = f.intern(label);
                count(&mut counts, row.status);
                checks.row(n, &row, &writes);
                f.push(Row { label, ..row }, &reads, &writes, &[]);
            }
            Some(Scanned::Final(replica, key, version)) => {
                counts.finals += 1;
                f.finals.push(Final { replica: replica.to_string(), key, version });
            }
            None => slow(s, n, &mut f, &mut counts, &mut trailer, &mut checks)?,
        }
    }
    finish(&f, records, last, trailer, &counts, checks)?;
    Ok(f)
}

/// A line through serde.
fn slow(
    s: &[u8],
    n: usize,
    f: &mut Flat,
    counts: &mut Trailer,
    trailer: &mut Option<(usize, Trailer)>,
    checks: &mut Checks,
) -> Result<(), HistoryError> {
    let parsed: Line = serde_json::from_slice(s).map_err(|e| {
        err(
            n,
            format!(
                "{e} (expected an object with \"type\" one of \"txn\", \"final\", \"invariant\", \"meta\", \"end\")"
            ),
        )
    })?;
    match parsed {
        Line::Txn(t) => {
            count(counts, t.status);
            f.push_txn(&t);
            let i = f.txns.len() - 1;
            checks.row(n, &f.txns[i], f.writes(i));
        }
        Line::Final(x) => {
            counts.finals += 1;
            f.finals.push(x);
        }
        Line::Invariant(v) => {
            counts.invariants += 1;
            f.invariants.push(v);
        }
        Line::Meta(m) => f.meta.extend(m),
        Line::End(t) => *trailer = Some((n, t)),
    }
    Ok(())
}

fn finish(
    f: &Flat,
    records: usize,
    last: usize,
    trailer: Option<(usize, Trailer)>,
    counts: &Trailer,
    checks: Checks,
) -> Result<(), HistoryError> {
    if records == 0 {
        return Err(err(
            0,
            "empty history: the file holds no records (a history ends with a trailer line {\"type\":\"end\",...})",
        ));
    }
    let Some((at, t)) = trailer else {
        return Err(err(
            0,
            format!(
                "truncated: no trailer line {{\"type\":\"end\",...}} after the last record (line {last}); the file was cut short, or written before trailers existed"
            ),
        ));
    };
    compare(&t, counts).map_err(|m| err(at, m))?;
    checks.finish(f)
}

enum Scanned<'a> {
    Txn(Row, &'a str),
    Final(&'a str, u64, u64),
}

struct Sc<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Sc<'a> {
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                self.i += 1;
            } else {
                return Some(c);
            }
        }
        None
    }
    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek()? == c {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }
    #[inline]
    fn u64(&mut self) -> Option<u64> {
        self.peek()?;
        let start = self.i;
        let mut v: u64 = 0;
        while let Some(&c) = self.b.get(self.i) {
            if !c.is_ascii_digit() {
                break;
            }
            v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        let len = self.i - start;
        if len == 0 || (len > 1 && self.b[start] == b'0') || matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(v)
    }
    /// A string without escapes or control characters, as raw bytes.
    #[inline]
    fn str(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            let c = *self.b.get(self.i)?;
            if c == b'"' {
                break;
            }
            if c == b'\\' || c < 0x20 {
                return None;
            }
            self.i += 1;
        }
        let s = &self.b[start..self.i];
        self.i += 1;
        Some(s)
    }
    fn accesses(&mut self, out: &mut Vec<Access>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            // Most bytes of a history are accesses in the compact form the writers emit:
            // match it literally, else parse token by token.
            if self.lit(b"{\"key\":") {
                let key = self.u64()?;
                if !self.lit(b",\"version\":") {
                    return None;
                }
                let version = self.u64()?;
                self.eat(b'}')?;
                out.push(Access { key, version });
            } else {
                self.access(out)?;
            }
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
    #[inline]
    fn lit(&mut self, l: &[u8]) -> bool {
        if self.b[self.i..].starts_with(l) {
            self.i += l.len();
            true
        } else {
            false
        }
    }
    fn access(&mut self, out: &mut Vec<Access>) -> Option<()> {
        {
            self.eat(b'{')?;
            let a = self.str()?;
            self.eat(b':')?;
            let x = self.u64()?;
            self.eat(b',')?;
            let b = self.str()?;
            self.eat(b':')?;
            let y = self.u64()?;
            self.eat(b'}')?;
            out.push(match (a, b) {
                (b"key", b"version") => Access { key: x, version: y },
                (b"version", b"key") => Access { key: y, version: x },
                _ => return None,
            });
            Some(())
        }
    }
}

/// The fast path: a `txn` without predicates or a `final`, in the strict subset described at
/// [`read_jsonl`]; `None` for anything else.
fn scan<'a>(line: &'a [u8], reads: &mut Vec<Access>, writes: &mut Vec<Access>) -> Option<Scanned<'a>> {
    reads.clear();
    writes.clear();
    if let Some(t) = scan_exact(line, reads, writes) {
        return Some(t);
    }
    reads.clear();
    writes.clear();
    let mut s = Sc { b: line, i: 0 };
    s.eat(b'{')?;
    let mut seen = 0u32;
    let mut ty = 0u8;
    let mut row = Row::default();
    let (mut label, mut replica) = ("", "primary");
    let (mut key, mut version) = (0, 0);
    loop {
        let k = s.str()?;
        s.eat(b':')?;
        let bit: u32 = match k {
            b"type" => 0,
            b"id" => 1,
            b"node" => 2,
            b"worker" => 3,
            b"coroutine" => 4,
            b"start_ns" => 5,
            b"end_ns" => 6,
            b"status" => 7,
            b"label" => 8,
            b"reads" => 9,
            b"writes" => 10,
            b"replica" => 11,
            b"key" => 12,
            b"version" => 13,
            _ => return None,
        };
        if seen & (1 << bit) != 0 {
            return None;
        }
        seen |= 1 << bit;
        match bit {
            0 => {
                ty = match s.str()? {
                    b"txn" => 1,
                    b"final" => 2,
                    _ => return None,
                }
            }
            1 => row.id = s.u64()?,
            2 => row.node = u16::try_from(s.u64()?).ok()?,
            3 => row.worker = u16::try_from(s.u64()?).ok()?,
            4 => row.coroutine = u32::try_from(s.u64()?).ok()?,
            5 => row.start_ns = s.u64()?,
            6 => row.end_ns = s.u64()?,
            7 => {
                row.status = match s.str()? {
                    b"committed" => Status::Committed,
                    b"aborted" => Status::Aborted,
                    _ => return None,
                }
            }
            8 => label = std::str::from_utf8(s.str()?).ok()?,
            9 => s.accesses(reads)?,
            10 => s.accesses(writes)?,
            11 => replica = std::str::from_utf8(s.str()?).ok()?,
            12 => key = s.u64()?,
            _ => version = s.u64()?,
        }
        match s.peek()? {
            b',' => s.i += 1,
            b'}' => {
                s.i += 1;
                break;
            }
            _ => return None,
        }
    }
    if s.peek().is_some() {
        return None;
    }
    const TXN: u32 = (1 << 11) - 1;
    const FINAL: u32 = 1 | (1 << 11) | (1 << 12) | (1 << 13);
    match ty {
        1 if seen & !TXN == 0 && seen & 0b1000_0010 == 0b1000_0010 => Some(Scanned::Txn(row, label)),
        2 if seen & !FINAL == 0 && seen & (3 << 12) == 3 << 12 => Some(Scanned::Final(replica, key, version)),
        _ => None,
    }
}

/// A `txn` line in exactly the shape [`txn_line`] writes, matched literally: no key names to
/// look up, about twice as fast as [`scan`]'s token by token path, which takes anything else.
fn scan_exact<'a>(line: &'a [u8], reads: &mut Vec<Access>, writes: &mut Vec<Access>) -> Option<Scanned<'a>> {
    let mut s = Sc { b: line, i: 0 };
    let mut row = Row::default();
    let field = |s: &mut Sc<'a>, name: &[u8]| if s.lit(name) { s.u64() } else { None };
    row.id = field(&mut s, b"{\"type\":\"txn\",\"id\":")?;
    row.node = u16::try_from(field(&mut s, b",\"node\":")?).ok()?;
    row.worker = u16::try_from(field(&mut s, b",\"worker\":")?).ok()?;
    row.coroutine = u32::try_from(field(&mut s, b",\"coroutine\":")?).ok()?;
    row.start_ns = field(&mut s, b",\"start_ns\":")?;
    row.end_ns = field(&mut s, b",\"end_ns\":")?;
    if s.lit(b",\"status\":\"committed\"") {
        row.status = Status::Committed;
    } else if s.lit(b",\"status\":\"aborted\"") {
        row.status = Status::Aborted;
    } else {
        return None;
    }
    let mut label = "";
    if s.lit(b",\"label\":") {
        label = std::str::from_utf8(s.str()?).ok()?;
    }
    if !s.lit(b",\"reads\":") {
        return None;
    }
    s.accesses(reads)?;
    if !s.lit(b",\"writes\":") {
        return None;
    }
    s.accesses(writes)?;
    if !s.lit(b"}") || s.peek().is_some() {
        return None;
    }
    Some(Scanned::Txn(row, label))
}

/// Writes one `txn` line, in the field order serde would, without building a `Txn`.
fn txn_line(
    w: &mut impl Write,
    r: &Row,
    label: &str,
    reads: &[Access],
    writes: &[Access],
    preds: &[PredicateRead],
) -> io::Result<()> {
    let status = match r.status {
        Status::Committed => "committed",
        Status::Aborted => "aborted",
    };
    write!(
        w,
        "{{\"type\":\"txn\",\"id\":{},\"node\":{},\"worker\":{},\"coroutine\":{},\"start_ns\":{},\"end_ns\":{},\"status\":\"{status}\"",
        r.id, r.node, r.worker, r.coroutine, r.start_ns, r.end_ns
    )?;
    if !label.is_empty() {
        w.write_all(b",\"label\":")?;
        serde_json::to_writer(&mut *w, label)?;
    }
    for (name, list) in [("reads", reads), ("writes", writes)] {
        write!(w, ",\"{name}\":[")?;
        for (i, a) in list.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(w, "{sep}{{\"key\":{},\"version\":{}}}", a.key, a.version)?;
        }
        w.write_all(b"]")?;
    }
    if !preds.is_empty() {
        w.write_all(b",\"predicates\":")?;
        serde_json::to_writer(&mut *w, preds)?;
    }
    w.write_all(b"}\n")
}

fn line(w: &mut impl Write, l: &Line) -> io::Result<()> {
    serde_json::to_writer(&mut *w, l)?;
    w.write_all(b"\n")
}

/// Finals, invariants and the trailer (`c` counts the transactions written).
fn jsonl_tail(w: &mut impl Write, finals: &[Final], invariants: &[Invariant], mut c: Trailer) -> io::Result<()> {
    for f in finals {
        line(w, &Line::Final(f.clone()))?;
    }
    for v in invariants {
        line(w, &Line::Invariant(v.clone()))?;
    }
    c.finals = finals.len() as u64;
    c.invariants = invariants.len() as u64;
    line(w, &Line::End(c))?;
    w.flush()
}

fn row_of(t: &Txn) -> Row {
    Row::of(t, 0)
}

/// JSON Lines: meta, transactions, finals, invariants, trailer.
pub fn write_jsonl(h: &History, w: impl Write) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    if !h.meta.is_empty() {
        line(&mut w, &Line::Meta(h.meta.clone()))?;
    }
    let mut c = Trailer::default();
    for t in &h.txns {
        count(&mut c, t.status);
        txn_line(&mut w, &row_of(t), &t.label, &t.reads, &t.writes, &t.predicates)?;
    }
    jsonl_tail(&mut w, &h.finals, &h.invariants, c)
}

fn preds_of(f: &Flat, i: usize) -> Vec<PredicateRead> {
    f.preds_of(i).iter().map(|p| PredicateRead { lo: p.lo, hi: p.hi, vset: f.vset_of(p).to_vec() }).collect()
}

/// JSON Lines from a `Flat`.
pub fn write_jsonl_flat(f: &Flat, w: impl Write) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    if !f.meta.is_empty() {
        line(&mut w, &Line::Meta(f.meta.clone()))?;
    }
    let mut c = Trailer::default();
    for (i, r) in f.txns.iter().enumerate() {
        count(&mut c, r.status);
        let preds = if f.preds.is_empty() { Vec::new() } else { preds_of(f, i) };
        txn_line(&mut w, r, f.label(i), f.reads(i), f.writes(i), &preds)?;
    }
    jsonl_tail(&mut w, &f.finals, &f.invariants, c)
}

// ---------------------------------------------------------------------------------------
// Binary

/// Writes the binary form record by record; [`BinWriter::finish`] adds the trailer.
pub struct BinWriter<W: Write> {
    w: W,
    strings: HashMap<String, u32>,
    counts: Trailer,
}

impl<W: Write> BinWriter<W> {
    /// Writes the header. The hints (0 if unknown) let a reader reserve its arrays once.
    pub fn new(mut w: W, txns_hint: u64, accesses_hint: u64) -> io::Result<Self> {
        w.write_all(&MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&(LAYOUT.len() as u32).to_le_bytes())?;
        w.write_all(LAYOUT.as_bytes())?;
        w.write_all(&txns_hint.to_le_bytes())?;
        w.write_all(&accesses_hint.to_le_bytes())?;
        Ok(BinWriter { w, strings: HashMap::new(), counts: Trailer::default() })
    }

    /// The id of `s`, defining it with an `S` record the first time.
    fn string(&mut self, s: &str) -> io::Result<u32> {
        if s.is_empty() {
            return Ok(0);
        }
        if let Some(&i) = self.strings.get(s) {
            return Ok(i);
        }
        if s.len() > MAX_STRING {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "string longer than 1 MiB in a history"));
        }
        let i = self.strings.len() as u32 + 1;
        self.w.write_all(b"S")?;
        self.w.write_all(&(s.len() as u32).to_le_bytes())?;
        self.w.write_all(s.as_bytes())?;
        self.strings.insert(s.to_string(), i);
        Ok(i)
    }

    fn accesses(&mut self, list: &[Access]) -> io::Result<()> {
        for a in list {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&a.key.to_le_bytes());
            b[8..].copy_from_slice(&a.version.to_le_bytes());
            self.w.write_all(&b)?;
        }
        Ok(())
    }

    /// One transaction (`r.at`, `r.reads`, `r.writes` and `r.label` are ignored).
    pub fn txn<'p>(
        &mut self,
        r: &Row,
        label: &str,
        reads: &[Access],
        writes: &[Access],
        preds: impl ExactSizeIterator<Item = (u64, u64, &'p [Access])>,
    ) -> io::Result<()> {
        let label = self.string(label)?;
        count(&mut self.counts, r.status);
        let mut b = [0u8; 50];
        b[0] = b'T';
        b[1..9].copy_from_slice(&r.id.to_le_bytes());
        b[9..17].copy_from_slice(&r.start_ns.to_le_bytes());
        b[17..25].copy_from_slice(&r.end_ns.to_le_bytes());
        b[25..29].copy_from_slice(&r.coroutine.to_le_bytes());
        b[29..33].copy_from_slice(&label.to_le_bytes());
        b[33..35].copy_from_slice(&r.node.to_le_bytes());
        b[35..37].copy_from_slice(&r.worker.to_le_bytes());
        b[37] = match r.status {
            Status::Committed => 0,
            Status::Aborted => 1,
        };
        b[38..42].copy_from_slice(&(reads.len() as u32).to_le_bytes());
        b[42..46].copy_from_slice(&(writes.len() as u32).to_le_bytes());
        b[46..50].copy_from_slice(&(preds.len() as u32).to_le_bytes());
        self.w.write_all(&b)?;
        self.accesses(reads)?;
        self.accesses(writes)?;
        for (lo, hi, vset) in preds {
            self.w.write_all(&lo.to_le_bytes())?;
            self.w.write_all(&hi.to_le_bytes())?;
            self.w.write_all(&(vset.len() as u32).to_le_bytes())?;
            self.accesses(vset)?;
        }
        Ok(())
    }

    pub fn final_(&mut self, f: &Final) -> io::Result<()> {
        let replica = self.string(&f.replica)?;
        self.counts.finals += 1;
        self.w.write_all(b"F")?;
        self.w.write_all(&replica.to_le_bytes())?;
        self.w.write_all(&f.key.to_le_bytes())?;
        self.w.write_all(&f.version.to_le_bytes())
    }

    pub fn invariant(&mut self, v: &Invariant) -> io::Result<()> {
        let name = self.string(&v.name)?;
        self.counts.invariants += 1;
        self.w.write_all(b"I")?;
        self.w.write_all(&name.to_le_bytes())?;
        self.w.write_all(&v.expected.to_le_bytes())?;
        self.w.write_all(&v.actual.to_le_bytes())
    }

    pub fn meta(&mut self, m: &serde_json::Map<String, serde_json::Value>) -> io::Result<()> {
        let body = serde_json::to_vec(m)?;
        if body.len() > MAX_META {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "history metadata longer than 64 MiB"));
        }
        self.w.write_all(b"M")?;
        self.w.write_all(&(body.len() as u32).to_le_bytes())?;
        self.w.write_all(&body)
    }

    /// Writes the trailer and flushes; returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        let c = self.counts;
        self.w.write_all(b"E")?;
        for v in [c.txns, c.committed, c.aborted, c.finals, c.invariants] {
            self.w.write_all(&v.to_le_bytes())?;
        }
        self.w.flush()?;
        Ok(self.w)
    }
}

/// The binary form of a `History`.
pub fn write_binary(h: &History, w: impl Write) -> io::Result<()> {
    let accesses: usize = h.txns.iter().map(|t| t.reads.len() + t.writes.len()).sum();
    let mut b = BinWriter::new(io::BufWriter::new(w), h.txns.len() as u64, accesses as u64)?;
    if !h.meta.is_empty() {
        b.meta(&h.meta)?;
    }
    for t in &h.txns {
        let preds = t.predicates.iter().map(|p| (p.lo, p.hi, &p.vset[..]));
        b.txn(&row_of(t), &t.label, &t.reads, &t.writes, preds)?;
    }
    binary_tail(b, &h.finals, &h.invariants)
}

fn binary_tail<W: Write>(mut b: BinWriter<W>, finals: &[Final], invariants: &[Invariant]) -> io::Result<()> {
    for f in finals {
        b.final_(f)?;
    }
    for v in invariants {
        b.invariant(v)?;
    }
    b.finish().map(|_| ())
}

/// The binary form of a `Flat`.
pub fn write_binary_flat(f: &Flat, w: impl Write) -> io::Result<()> {
    let mut b = BinWriter::new(io::BufWriter::new(w), f.txns.len() as u64, f.access.len() as u64)?;
    if !f.meta.is_empty() {
        b.meta(&f.meta)?;
    }
    for (i, r) in f.txns.iter().enumerate() {
        let preds = f.preds_of(i).iter().map(|p| (p.lo, p.hi, f.vset_of(p)));
        b.txn(r, f.label(i), f.reads(i), f.writes(i), preds)?;
    }
    binary_tail(b, &f.finals, &f.invariants)
}

/// A read buffer that hands out contiguous byte runs and knows its file offset.
struct Src<R> {
    r: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    base: u64,
}

const SRC_BUF: usize = 2 << 20;

impl<R: Read> Src<R> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }
    /// Makes `n` (at most `SRC_BUF`) bytes available at `pos`; false at end of file first.
    #[inline]
    fn fill(&mut self, n: usize) -> io::Result<bool> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        self.refill(n)
    }
    #[cold]
    fn refill(&mut self, n: usize) -> io::Result<bool> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while self.end < n {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
    #[inline]
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}
fn le32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

struct Bin<R> {
    src: Src<R>,
    /// Records read, for messages.
    record: u64,
}

impl<R: Read> Bin<R> {
    fn io(&self, e: io::Error) -> HistoryError {
        err(0, format!("cannot read at byte {}: {e}", self.src.offset()))
    }
    /// `n` bytes of the current record `what`, or a truncation error.
    #[inline]
    fn need(&mut self, n: usize, what: &str) -> Result<&[u8], HistoryError> {
        match self.src.fill(n) {
            Ok(true) => Ok(self.src.take(n)),
            Ok(false) => Err(err(
                0,
                format!(
                    "truncated: the file ends inside {what} (record {}, byte {}), before the trailer",
                    self.record + 1,
                    self.src.offset()
                ),
            )),
            Err(e) => Err(self.io(e)),
        }
    }
    fn bad(&self, msg: impl std::fmt::Display) -> HistoryError {
        err(0, format!("corrupt binary history at byte {} (record {}): {msg}", self.src.offset(), self.record + 1))
    }
    /// `n` accesses appended to `out`, read in buffer-sized chunks: an absurd count runs into
    /// the end of the file, not into an allocation.
    fn accesses(&mut self, mut n: u64, out: &mut Vec<Access>, what: &str) -> Result<(), HistoryError> {
        while n > 0 {
            let k = n.min((SRC_BUF / 16) as u64) as usize;
            let b = self.need(k * 16, what)?;
            out.extend(b.chunks_exact(16).map(|c| Access { key: le64(c, 0), version: le64(c, 8) }));
            n -= k as u64;
        }
        Ok(())
    }
    /// `len` bytes (capped at `max`) into a vector grown as they arrive.
    fn bytes(&mut self, len: usize, max: usize, what: &str) -> Result<Vec<u8>, HistoryError> {
        if len > max {
            return Err(self.bad(format!("{what} of {len} bytes, more than the {max} a history allows")));
        }
        let mut v = Vec::new();
        let mut left = len;
        while left > 0 {
            let k = left.min(SRC_BUF);
            v.extend_from_slice(self.need(k, what)?);
            left -= k;
        }
        Ok(v)
    }
}

/// Asks Linux to back `v`'s spare capacity with transparent huge pages where it is set to
/// `madvise`: filling a 10 M-transaction `Flat` otherwise takes ~300 k page faults, which
/// cost more than decoding the file.
fn huge_pages<T>(v: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let bytes = v.capacity() * std::mem::size_of::<T>();
        if bytes < 4 << 20 {
            return;
        }
        let start = (v.as_ptr() as usize).div_ceil(PAGE) * PAGE;
        let end = v.as_ptr() as usize + bytes;
        if end > start {
            // SAFETY: advice on memory this Vec owns (page-aligned, within its allocation);
            // MADV_HUGEPAGE changes no contents and its failure is harmless.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}

/// Reads the binary form into a `Flat`, streaming: memory is the `Flat` plus a 2 MiB buffer.
pub fn read_binary(r: impl Read, size: Option<u64>) -> Result<Flat, HistoryError> {
    let mut b = Bin { src: Src { r, buf: vec![0; SRC_BUF], pos: 0, end: 0, base: 0 }, record: 0 };
    match b.src.fill(1) {
        Ok(false) => return Err(err(0, "empty history: the file is empty")),
        Ok(true) => {}
        Err(e) => return Err(b.io(e)),
    }
    let head = b.need(14, "the header")?;
    if head[..8] != MAGIC {
        return Err(err(0, "not a txbed history: bad magic bytes (a binary history starts with \\x89TXBEDH\\n)"));
    }
    let version = u16::from_le_bytes([head[8], head[9]]);
    if version != VERSION {
        return Err(err(
            0,
            format!("unsupported binary history format version {version} (this txbed reads version {VERSION})"),
        ));
    }
    let layout_len = le32(head, 10) as usize;
    let layout = b.bytes(layout_len, MAX_LAYOUT, "the header's layout text")?;
    if std::str::from_utf8(&layout).is_err() {
        return Err(b.bad("the header's layout text is not UTF-8"));
    }
    let hints = b.need(16, "the header")?;
    let (txns_hint, access_hint) = (le64(hints, 0), le64(hints, 8));
    let mut f = Flat::default();
    // Reserve what the hints say, but never more than the file can hold (a 50-byte record a
    // transaction, 16 bytes an access), nor more than 1 M entries if its size is unknown.
    let room = size.unwrap_or(50 << 20);
    f.txns.reserve(txns_hint.min(room / 50) as usize);
    f.access.reserve(access_hint.min(room / 16) as usize);
    huge_pages(&f.txns);
    huge_pages(&f.access);

    let mut strings: Vec<String> = vec![String::new()];
    let mut label_of: Vec<u32> = vec![0];
    let mut counts = Trailer::default();
    let mut checks = Checks::new();
    let string = |b: &Bin<_>, strings: &[String], i: u32, what: &str| -> Result<usize, HistoryError> {
        if (i as usize) < strings.len() {
            Ok(i as usize)
        } else {
            Err(b.bad(format!("{what} names string {i}, which is not defined before it")))
        }
    };
    loop {
        match b.src.fill(1) {
            Ok(true) => {}
            Ok(false) if b.record == 0 => {
                return Err(err(0, "truncated: the header is not followed by any record (no trailer)"))
            }
            Ok(false) => {
                return Err(err(
                    0,
                    format!(
                        "truncated: no trailer record after {} records (byte {}); the file was cut short",
                        b.record,
                        b.src.offset()
                    ),
                ))
            }
            Err(e) => return Err(b.io(e)),
        }
        let tag = b.need(1, "a record")?[0];
        match tag {
            b'T' => {
                let mut h = [0u8; 49];
                h.copy_from_slice(b.need(49, "a txn record")?);
                let status = match h[36] {
                    0 => Status::Committed,
                    1 => Status::Aborted,
                    s => return Err(b.bad(format!("txn status byte {s} (0 committed, 1 aborted)"))),
                };
                let mut row = Row {
                    id: le64(&h, 0),
                    start_ns: le64(&h, 8),
                    end_ns: le64(&h, 16),
                    coroutine: le32(&h, 24),
                    label: le32(&h, 28),
                    node: u16::from_le_bytes([h[32], h[33]]),
                    worker: u16::from_le_bytes([h[34], h[35]]),
                    status,
                    reads: le32(&h, 37),
                    writes: le32(&h, 41),
                    at: f.access.len() as u64,
                };
                let npreds = le32(&h, 45);
                let s = string(&b, &strings, row.label, "a txn's label")?;
                if label_of[s] == u32::MAX {
                    label_of[s] = f.intern(&strings[s]);
                }
                row.label = label_of[s];
                b.accesses(u64::from(row.reads) + u64::from(row.writes), &mut f.access, "a txn record's accesses")?;
                checks.row(0, &row, &f.access[row.at as usize + row.reads as usize..]);
                let txn = f.txns.len() as u32;
                for _ in 0..npreds {
                    let p = b.need(20, "a predicate read")?;
                    let (lo, hi, n) = (le64(p, 0), le64(p, 8), le32(p, 16));
                    f.preds.push(PredRow { txn, lo, hi, vset_at: f.vset.len() as u64, vset_len: n });
                    b.accesses(u64::from(n), &mut f.vset, "a predicate read's versions")?;
                }
                count(&mut counts, status);
                f.txns.push(row);
            }
            b'S' => {
                let len = le32(b.need(4, "a string record")?, 0) as usize;
                let bytes = b.bytes(len, MAX_STRING, "a string")?;
                let s = String::from_utf8(bytes).map_err(|_| b.bad("a string that is not UTF-8"))?;
                strings.push(s);
                label_of.push(u32::MAX);
            }
            b'F' => {
                let r = b.need(20, "a final record")?;
                let (rep, key, version) = (le32(r, 0), le64(r, 4), le64(r, 12));
                let s = string(&b, &strings, rep, "a final's replica")?;
                let replica = if s == 0 { String::new() } else { strings[s].clone() };
                counts.finals += 1;
                f.finals.push(Final { replica, key, version });
            }
            b'I' => {
                let r = b.need(20, "an invariant record")?;
                let (name, expected, actual) = (le32(r, 0), le64(r, 4) as i64, le64(r, 12) as i64);
                let s = string(&b, &strings, name, "an invariant's name")?;
                counts.invariants += 1;
                f.invariants.push(Invariant { name: strings[s].clone(), expected, actual });
            }
            b'M' => {
                let len = le32(b.need(4, "a meta record")?, 0) as usize;
                let body = b.bytes(len, MAX_META, "a meta record")?;
                let m: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(&body).map_err(|e| b.bad(format!("meta is not a JSON object: {e}")))?;
                f.meta.extend(m);
            }
            b'E' => {
                let e = b.need(40, "the trailer")?;
                let t = Trailer {
                    txns: le64(e, 0),
                    committed: le64(e, 8),
                    aborted: le64(e, 16),
                    finals: le64(e, 24),
                    invariants: le64(e, 32),
                };
                b.record += 1;
                match b.src.fill(1) {
                    Ok(false) => {}
                    Ok(true) => {
                        return Err(err(0, format!("data after the trailer at byte {}", b.src.offset())));
                    }
                    Err(e) => return Err(b.io(e)),
                }
                compare(&t, &counts).map_err(|m| err(0, m))?;
                checks.finish(&f)?;
                return Ok(f);
            }
            t => return Err(b.bad(format!("unknown record tag 0x{t:02x}"))),
        }
        b.record += 1;
    }
}

// ---------------------------------------------------------------------------------------
// Generated histories, streamed

/// The transactions of [`crate::history::generate_serial`], handed one at a time to `txn`
/// (no `Txn` is built); returns the final version of every key.
pub fn serial_stream(
    txns: usize,
    keys: u64,
    seed: u64,
    mut txn: impl FnMut(&Row, &[Access], &[Access]) -> io::Result<()>,
) -> io::Result<Vec<u64>> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut current = vec![0u64; keys as usize];
    for id in 0..txns as u64 {
        let a = next() % keys;
        let b = (a + 1 + next() % (keys - 1)) % keys;
        let row = Row {
            id,
            start_ns: id * 10,
            end_ns: id * 10 + 5,
            at: 0,
            reads: 0,
            writes: 0,
            coroutine: 0,
            label: 0,
            node: (id % 4) as u16,
            worker: 0,
            status: Status::Committed,
        };
        let mut r = [Access { key: 0, version: 0 }; 2];
        let mut w = r;
        for (i, k) in [a, b].into_iter().enumerate() {
            r[i] = Access { key: k, version: current[k as usize] };
            current[k as usize] += 1;
            w[i] = Access { key: k, version: current[k as usize] };
        }
        txn(&row, &r, &w)?;
    }
    Ok(current)
}

fn finals_of(current: &[u64]) -> impl Iterator<Item = Final> + '_ {
    current.iter().enumerate().map(|(k, &v)| Final { replica: "primary".into(), key: k as u64, version: v })
}

/// `generate_serial` as a `Flat`.
pub fn generate_serial_flat(txns: usize, keys: u64, seed: u64) -> Flat {
    let mut f = Flat::default();
    f.txns.reserve(txns);
    f.access.reserve(txns * 4);
    let current = serial_stream(txns, keys, seed, |r, rd, wr| {
        f.push(*r, rd, wr, &[]);
        Ok(())
    })
    .unwrap_or_default();
    f.finals = finals_of(&current).collect();
    f
}

/// `generate_serial` written straight to `w` in `format`, in memory proportional to `keys`.
pub fn write_serial(w: impl Write, format: Format, txns: usize, keys: u64, seed: u64) -> io::Result<()> {
    match format {
        Format::Binary => {
            let mut b = BinWriter::new(io::BufWriter::with_capacity(1 << 20, w), txns as u64, txns as u64 * 4)?;
            let current = serial_stream(txns, keys, seed, |r, rd, wr| b.txn(r, "", rd, wr, std::iter::empty()))?;
            let finals: Vec<Final> = finals_of(&current).collect();
            binary_tail(b, &finals, &[])
        }
        Format::Jsonl => {
            let mut w = io::BufWriter::with_capacity(1 << 20, w);
            let mut c = Trailer::default();
            let current = serial_stream(txns, keys, seed, |r, rd, wr| {
                count(&mut c, r.status);
                txn_line(&mut w, r, "", rd, wr, &[])
            })?;
            let finals: Vec<Final> = finals_of(&current).collect();
            jsonl_tail(&mut w, &finals, &[], c)
        }
    }
}
