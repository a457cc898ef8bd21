//! TPC-C (TPC Benchmark C, revision 5.11): the nine tables with the specification's row
//! lengths, warehouses partitioned across nodes, the five transactions with NURand, remote
//! supply warehouses and remote payment customers, and consistency conditions 1-4 and 10
//! (Clause 3.3.2) checked at the end of every run. docs/workloads.md has the design and every
//! deviation; in short:
//!
//! - The store cannot insert or delete, so every district has `slots` pre-allocated rows of
//!   ORDER and NEW-ORDER and `15 x slots` of ORDER-LINE, one per possible order id: the
//!   initial orders, `order_headroom` for the run, and one always-empty sentinel. An insert
//!   writes an empty row (O_ID = 0 marks it empty); delivery's delete of a NEW-ORDER row sets
//!   its state byte to "delivered". HISTORY is a ring per coordinator ("terminal").
//! - Read and write sets must be known before execution, but new-order's order id is
//!   D_NEXT_O_ID and the other transactions need secondary or ordered access (customer by last
//!   name, a customer's newest order, the oldest undelivered order, the last 20 orders' lines).
//!   Such a transaction first asks the node that owns the rows ([`Workload::lookups`], served
//!   from its store and ordered index by RPC), then runs with the rows the answer named, and
//!   its logic checks inside the transaction that the answer still holds; if not, it returns a
//!   user abort the coordinator retries as a conflict ([`Workload::retry_on_user_abort`]).
//!   Each check is chosen so a passing check proves the answer correct in the transaction's
//!   own (serializable) snapshot: see `docs/workloads.md`.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{Consistency, Executed, Key, Lookup, OrderedIndex, Table, Terminal, TxnSpec, Workload};

pub const WAREHOUSE: u16 = 0;
pub const DISTRICT: u16 = 1;
pub const CUSTOMER: u16 = 2;
pub const HISTORY: u16 = 3;
pub const NEW_ORDER: u16 = 4;
pub const ORDER: u16 = 5;
pub const ORDER_LINE: u16 = 6;
pub const ITEM: u16 = 7;
pub const STOCK: u16 = 8;

/// Row lengths of Clause 4.2.2 (bytes), by table id.
pub const ROW_BYTES: [u32; 9] = [89, 95, 655, 46, 8, 24, 54, 82, 306];
const TABLE_NAMES: [&str; 9] =
    ["warehouse", "district", "customer", "history", "new-order", "order", "order-line", "item", "stock"];

pub const DISTRICTS: u64 = 10;
pub const MAX_LINES: u64 = 15;

pub const KINDS: [&str; 5] = ["new-order", "payment", "order-status", "delivery", "stock-level"];
/// The abort cause of an order-status that waits for a delivery's publication.
pub const UNPUBLISHED: &str = "unpublished delivery";

/// NURand's run-time constants (Clause 2.1.6): C for C_LAST at load and at run time differ
/// by 66 (Clause 2.1.6.1 asks for a difference in 65..=119, not 96 or 112).
const C_LAST_LOAD: u64 = 157;
const C_LAST_RUN: u64 = 223;
const C_CUST_RUN: u64 = 259;
const C_ITEM: u64 = 7911;

/// Money is kept in cents.
const W_YTD_INITIAL: i64 = 30_000_000;
const D_YTD_INITIAL: i64 = 3_000_000;
const C_YTD_INITIAL: i64 = 1_000;
/// C_BALANCE as loaded: -10.00 (Clause 4.3.3.1), cents.
const C_BALANCE_INITIAL: i64 = -1_000;
/// The date every row is stamped with (a run is far shorter than a day of the specification).
const DATE: u32 = 1;

/// NEW-ORDER row state (the store cannot delete: a delivered row stays, marked).
pub const NO_EMPTY: u8 = 0;
pub const NO_PRESENT: u8 = 1;
pub const NO_DELIVERED: u8 = 2;

/// Lookups.
const Q_NEXT_O_ID: i64 = 1;
const Q_NAME: i64 = 2;
const Q_ORDER_STATUS: i64 = 3;
const Q_DELIVERY: i64 = 4;
const Q_STOCK_LEVEL: i64 = 5;

/// Ordered index namespaces (first key byte).
const IX_NAME: u8 = 1;
const IX_ORDER: u8 = 2;
const IX_OLDEST: u8 = 3;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tpcc {
    /// Warehouses per node (W); warehouse w lives on node w / W.
    pub warehouses_per_node: u32,
    /// Mix in percent: new-order, payment, order-status, delivery, stock-level.
    pub mix: [u32; 5],
    /// Only new-order (DrTM+H's TPC-C/no); replaces `mix`.
    pub new_order_only: bool,
    /// Probability that a new-order is made distributed: one of its lines is supplied by a
    /// warehouse on another node (DrTM+H: 1, "always distributed"); on top of `remote_item`.
    pub distributed: f64,
    /// Probability that a new-order line is supplied by another warehouse (spec: 1%).
    pub remote_item: f64,
    /// Probability that a payment's customer belongs to another warehouse (spec: 15%).
    pub remote_payment: f64,
    /// ITEM rows, and STOCK rows per warehouse (spec: 100,000).
    pub items: u32,
    /// Customers per district, and initial orders per district (spec: 3,000).
    pub customers_per_district: u32,
    /// Orders each district can take during the run beyond the initial ones (pre-allocated
    /// ORDER, NEW-ORDER and 15 ORDER-LINE rows each); a run that needs more stops loudly.
    pub order_headroom: u32,
    /// HISTORY rows per coordinator, a ring (HISTORY is only ever inserted into).
    pub history_per_terminal: u32,
    /// Which of the node's warehouses a coordinator's transactions have as home warehouse.
    pub home_warehouse: HomeWarehouse,
    /// Transaction chopping (DrTM Sec. 4): new-order and payment run as pieces, each a
    /// transaction of its own (`Off`: whole, for comparison).
    pub chopping: Chopping,
    /// With `Optimized` chopping, how often a machine publishes delivery's deferred customer
    /// balances (Sec. 4.2's epoch), ns. The paper's 20 ms is scaled to txbed's millisecond
    /// windows: an order-status of a customer whose balance waits for publication waits up
    /// to one epoch.
    pub publish_epoch_ns: u64,
}

/// How TPC-C's read-write transactions are chopped (DrTM Sec. 4, [`run_templates`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Chopping {
    /// Every transaction runs whole.
    #[default]
    Off,
    /// The classic analysis, per table (Sec. 4.1): new-order `I | W+D+C+S+O+N+L`.
    Default,
    /// With Sec. 4.1-4.2's declarations (fields, constants, commutative increments and
    /// inserts) and publish-subscribe: new-order `I | W.tax | D+S+O+N+L | C.discount`,
    /// payment `W | D | C | H`, delivery `N+O+L | C.balance` (deferred).
    Optimized,
}

/// How a transaction's home warehouse is bound to the worker that runs it (placement).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HomeWarehouse {
    /// Worker k of a node draws from its own share of the node's W warehouses (warehouse
    /// k mod W when workers >= W), as DrTM+H deploys one warehouse per worker thread: workers
    /// share a warehouse only when there are more workers than warehouses.
    #[default]
    #[serde(alias = "worker")]
    Worker,
    /// Uniform over the node's W warehouses, whichever worker runs the transaction (RCC's
    /// clients hand requests to any processing thread): a node's workers share every district.
    #[serde(alias = "node")]
    Node,
}

impl Default for Tpcc {
    fn default() -> Self {
        Tpcc {
            warehouses_per_node: 1,
            mix: [45, 43, 4, 4, 4],
            new_order_only: false,
            distributed: 0.0,
            remote_item: 0.01,
            remote_payment: 0.15,
            items: 100_000,
            customers_per_district: 3_000,
            order_headroom: 1_000,
            history_per_terminal: 256,
            home_warehouse: HomeWarehouse::Worker,
            chopping: Chopping::Off,
            publish_epoch_ns: 100_000,
        }
    }
}

impl Tpcc {
    /// Checks parameters; returns the field and the problem.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.warehouses_per_node == 0 || self.warehouses_per_node > 1024 {
            return Err(("warehouses_per_node", format!("must be 1..=1024, got {}", self.warehouses_per_node)));
        }
        let sum: u64 = self.mix.iter().map(|&m| m as u64).sum();
        if !self.new_order_only && sum != 100 {
            return Err(("mix", format!("percentages must add up to 100, got {sum}")));
        }
        for (name, p) in [
            ("distributed", self.distributed),
            ("remote_item", self.remote_item),
            ("remote_payment", self.remote_payment),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err((name, format!("must be a probability in [0, 1], got {p}")));
            }
        }
        if !(100..=1_000_000).contains(&self.items) {
            return Err(("items", format!("must be 100..=1000000, got {}", self.items)));
        }
        if !(1..=60_000).contains(&self.customers_per_district) {
            return Err(("customers_per_district", format!("must be 1..=60000, got {}", self.customers_per_district)));
        }
        if !(1..=1 << 24).contains(&self.order_headroom) {
            return Err(("order_headroom", format!("must be 1..=16777216, got {}", self.order_headroom)));
        }
        if !(1..=1 << 20).contains(&self.history_per_terminal) {
            return Err(("history_per_terminal", format!("must be 1..=1048576, got {}", self.history_per_terminal)));
        }
        if !(1_000..=1_000_000_000).contains(&self.publish_epoch_ns) {
            return Err((
                "publish_epoch_ns",
                format!("must be 1000..=1000000000 (1 us to 1 s), got {}", self.publish_epoch_ns),
            ));
        }
        if let Err(e) = run_chopping(self.chopping) {
            return Err(("chopping", e));
        }
        Ok(())
    }

    /// Bound to a cluster of `nodes`, each running `workers` x `coroutines` coordinators.
    pub fn prepare(&self, nodes: u16, workers: u16, coroutines: u32) -> PreparedTpcc {
        let c = self.customers_per_district as u64;
        let names = c.min(1000);
        PreparedTpcc {
            cfg: self.clone(),
            nodes,
            coroutines: coroutines.max(1),
            workers: workers.max(1) as u64,
            terminals: (workers as u64 * coroutines as u64).max(1),
            w_per_node: self.warehouses_per_node as u64,
            warehouses: self.warehouses_per_node as u64 * nodes as u64,
            items: self.items as u64,
            customers: c,
            slots: c + self.order_headroom as u64 + 1,
            first_new: c - c * 3 / 10 + 1,
            names,
            a_c: scaled_a(1023, c, 3000),
            a_i: scaled_a(8191, self.items as u64, 100_000),
            a_name: scaled_a(255, names, 1000),
            pieces: run_chopping(self.chopping).unwrap_or_default(),
        }
    }

    /// The mix actually run (new-order only, or `mix`).
    pub fn effective_mix(&self) -> [u32; 5] {
        if self.new_order_only {
            [100, 0, 0, 0, 0]
        } else {
            self.mix
        }
    }
}

/// NURand's A for a range shrunk from the specification's: scaled down to a power of two
/// minus one, so the skew keeps its shape on a smaller table.
fn scaled_a(spec_a: u64, range: u64, spec_range: u64) -> u64 {
    if range >= spec_range {
        return spec_a;
    }
    let t = (spec_a * range / spec_range).max(1);
    // The largest 2^k - 1 not above t.
    (1u64 << (63 - (t + 1).leading_zeros())) - 1
}

/// TPC-C bound to a cluster.
#[derive(Clone, Debug)]
pub struct PreparedTpcc {
    pub cfg: Tpcc,
    nodes: u16,
    coroutines: u32,
    workers: u64,
    terminals: u64,
    w_per_node: u64,
    warehouses: u64,
    items: u64,
    customers: u64,
    /// Pre-allocated order ids per district: 1..=slots (the last one stays empty).
    slots: u64,
    /// The first initial order still undelivered (spec: 2101 of 3000).
    first_new: u64,
    names: u64,
    a_c: u64,
    a_i: u64,
    a_name: u64,
    /// The pieces of new-order, payment and delivery (template order of [`run_templates`]),
    /// each a set of template operations; empty when not chopped.
    pieces: crate::chopping::Chopping,
}

/// SplitMix64: initial values are a pure function of the key (cheap, platform-independent).
struct Mix {
    state: u64,
    /// Whether strings are written; without, their draws are skipped (the same numbers follow).
    strings: bool,
}

const MIX_STEP: u64 = 0x9e37_79b9_7f4a_7c15;

impl Mix {
    fn new(table: u16, row: u64, salt: u64) -> Mix {
        Mix { state: ((table as u64) << 56) ^ row.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ salt, strings: true }
    }
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(MIX_STEP);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn nurand(&mut self, a: u64, x: u64, y: u64, c: u64) -> u64 {
        (((self.range(0, a) | self.range(x, y)) + c) % (y - x + 1)) + x
    }
    /// An a-string (Clause 4.3.2.2) of random length in lo..=hi, zero-padded to `field`;
    /// returns its length.
    fn astring(&mut self, out: &mut [u8], lo: u64, hi: u64) -> usize {
        const CHARS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let n = self.range(lo, hi).min(out.len() as u64) as usize;
        self.digits(&mut out[..n], CHARS, 8);
        n
    }
    fn nstring(&mut self, out: &mut [u8]) {
        self.digits(out, b"0123456789", 16);
    }
    /// `out` in the letters of `alphabet`, `per_word` of them from each 64-bit draw: the draw
    /// read as a fraction in [0, 1) times the alphabet's size gives a letter and leaves the
    /// next fraction. Loading and checking generate millions of strings; a draw per character
    /// made them most of a TPC-C run's time.
    fn digits(&mut self, out: &mut [u8], alphabet: &[u8], per_word: usize) {
        if !self.strings {
            self.state = self.state.wrapping_add(MIX_STEP.wrapping_mul(out.len().div_ceil(per_word) as u64));
            return;
        }
        let n = alphabet.len() as u128;
        for word in out.chunks_mut(per_word) {
            let mut x = self.next();
            for b in word {
                let t = x as u128 * n;
                *b = alphabet[(t >> 64) as usize];
                x = t as u64;
            }
        }
    }
    /// I_DATA / S_DATA: 10% contain "ORIGINAL" (Clause 4.3.3.1).
    fn data(&mut self, out: &mut [u8]) {
        let len = self.astring(out, 26, 50);
        if self.range(1, 100) <= 10 {
            let at = self.range(0, len as u64 - 8) as usize;
            if self.strings {
                out[at..at + 8].copy_from_slice(b"ORIGINAL");
            }
        }
    }
}

fn nurand(rng: &mut ChaCha8Rng, a: u64, x: u64, y: u64, c: u64) -> u64 {
    (((rng.gen_range(0..=a) | rng.gen_range(x..=y)) + c) % (y - x + 1)) + x
}

/// C_LAST from a number 0..=999 (Clause 4.3.2.3).
pub fn last_name(n: u64) -> [u8; 16] {
    const S: [&str; 10] = ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];
    let mut out = [0u8; 16];
    let mut at = 0;
    for digit in [n / 100 % 10, n / 10 % 10, n % 10] {
        let s = S[digit as usize].as_bytes();
        out[at..at + s.len()].copy_from_slice(s);
        at += s.len();
    }
    out
}

/// The number 0..=999 a C_LAST was made from (its syllables decode uniquely).
pub fn name_number(last: &[u8]) -> Option<u64> {
    const S: [&str; 10] = ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];
    let mut rest = last;
    let mut n = 0;
    for _ in 0..3 {
        let k = S.iter().position(|s| rest.starts_with(s.as_bytes()))?;
        n = n * 10 + k as u64;
        rest = &rest[S[k].len()..];
    }
    rest.iter().all(|&b| b == 0).then_some(n)
}

// Little-endian field access; a record shorter than expected reads as zeros (a torn or
// foreign read must never panic: the transaction validates and retries).
fn get(v: &[u8], at: usize, n: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = v.get(at..at + n) {
        b[..n].copy_from_slice(s);
    }
    u64::from_le_bytes(b)
}
fn put(v: &mut [u8], at: usize, n: usize, x: u64) {
    v[at..at + n].copy_from_slice(&x.to_le_bytes()[..n]);
}
/// Adds `delta` to an unsigned field (wrapping at its width).
fn bump(v: &mut [u8], at: usize, n: usize, delta: u64) {
    let x = get(v, at, n).wrapping_add(delta);
    put(v, at, n, x)
}
/// Adds `delta` to an i64 field.
fn bumpi(v: &mut [u8], at: usize, delta: i64) {
    let x = geti(v, at) + delta;
    puti(v, at, x)
}
fn geti(v: &[u8], at: usize) -> i64 {
    get(v, at, 8) as i64
}
fn puti(v: &mut [u8], at: usize, x: i64) {
    put(v, at, 8, x as u64)
}
fn get32i(v: &[u8], at: usize) -> i64 {
    get(v, at, 4) as u32 as i32 as i64
}

/// Field offsets (bytes) of each record; binary integers, strings at their spec lengths
/// except the second street line, shortened so the binary fields fit the spec's row length.
pub mod field {
    // WAREHOUSE (89 B)
    pub const W_YTD: usize = 0;
    pub const W_TAX: usize = 8;
    pub const W_ID: usize = 10;
    pub const W_NAME: usize = 12;
    pub const W_STREET_1: usize = 22;
    pub const W_STREET_2: usize = 42; // 16 of 20
    pub const W_CITY: usize = 58;
    pub const W_STATE: usize = 78;
    pub const W_ZIP: usize = 80;
    // DISTRICT (95 B)
    pub const D_YTD: usize = 0;
    pub const D_NEXT_O_ID: usize = 8;
    pub const D_TAX: usize = 12;
    pub const D_W_ID: usize = 14;
    pub const D_ID: usize = 16;
    pub const D_NAME: usize = 17;
    pub const D_STREET_1: usize = 27;
    pub const D_STREET_2: usize = 47; // 17 of 20
    pub const D_CITY: usize = 64;
    pub const D_STATE: usize = 84;
    pub const D_ZIP: usize = 86;
    // CUSTOMER (655 B)
    pub const C_BALANCE: usize = 0;
    pub const C_YTD_PAYMENT: usize = 8;
    pub const C_PAYMENT_CNT: usize = 16;
    pub const C_DELIVERY_CNT: usize = 18;
    pub const C_ID: usize = 20;
    pub const C_D_ID: usize = 22;
    pub const C_W_ID: usize = 23;
    pub const C_CREDIT: usize = 25;
    pub const C_DISCOUNT: usize = 27;
    pub const C_CREDIT_LIM: usize = 29;
    pub const C_SINCE: usize = 33;
    pub const C_FIRST: usize = 37;
    pub const C_MIDDLE: usize = 53;
    pub const C_LAST: usize = 55;
    pub const C_STREET_1: usize = 71;
    pub const C_STREET_2: usize = 91; // 17 of 20
    pub const C_CITY: usize = 108;
    pub const C_STATE: usize = 128;
    pub const C_ZIP: usize = 130;
    pub const C_PHONE: usize = 139;
    pub const C_DATA: usize = 155;
    // HISTORY (46 B)
    pub const H_AMOUNT: usize = 0;
    pub const H_DATE: usize = 4;
    pub const H_C_ID: usize = 8;
    pub const H_C_D_ID: usize = 10;
    pub const H_C_W_ID: usize = 11;
    pub const H_D_ID: usize = 13;
    pub const H_W_ID: usize = 14;
    pub const H_DATA: usize = 16;
    // NEW-ORDER (8 B)
    pub const NO_O_ID: usize = 0;
    pub const NO_W_ID: usize = 4;
    pub const NO_D_ID: usize = 6;
    pub const NO_STATE: usize = 7;
    // ORDER (24 B): O_ID and O_C_ID share one aligned word.
    pub const O_ID: usize = 0;
    pub const O_C_ID: usize = 4;
    pub const O_D_ID: usize = 6;
    pub const O_CARRIER_ID: usize = 7;
    pub const O_W_ID: usize = 8;
    pub const O_OL_CNT: usize = 10;
    pub const O_ALL_LOCAL: usize = 11;
    pub const O_ENTRY_D: usize = 12;
    /// Not in the spec: 1 while the order's delivery has its customer balance deferred and
    /// not yet published (DrTM Sec. 4.2); order-status waits it out (Sec. 4.4).
    pub const O_UNPUBLISHED: usize = 16;
    // ORDER-LINE (54 B)
    pub const OL_O_ID: usize = 0;
    pub const OL_I_ID: usize = 4;
    pub const OL_D_ID: usize = 8;
    pub const OL_NUMBER: usize = 9;
    pub const OL_W_ID: usize = 10;
    pub const OL_SUPPLY_W_ID: usize = 12;
    pub const OL_QUANTITY: usize = 14;
    pub const OL_AMOUNT: usize = 16;
    pub const OL_DELIVERY_D: usize = 20;
    pub const OL_DIST_INFO: usize = 24;
    // ITEM (82 B)
    pub const I_ID: usize = 0;
    pub const I_IM_ID: usize = 4;
    pub const I_PRICE: usize = 6;
    pub const I_NAME: usize = 8;
    pub const I_DATA: usize = 32;
    // STOCK (306 B)
    pub const S_QUANTITY: usize = 0;
    pub const S_ORDER_CNT: usize = 2;
    pub const S_YTD: usize = 4;
    pub const S_REMOTE_CNT: usize = 8;
    pub const S_W_ID: usize = 10;
    pub const S_I_ID: usize = 12;
    pub const S_DIST: usize = 16; // 10 x 24
    pub const S_DATA: usize = 256;
}
use field::*;

/// A record of `table`'s spec length, from `old` (padding and protocol bytes dropped).
fn rec(table: u16, old: &[u8]) -> Vec<u8> {
    let n = ROW_BYTES[table as usize] as usize;
    let mut v = vec![0u8; n];
    let m = n.min(old.len());
    v[..m].copy_from_slice(&old[..m]);
    v
}

/// Reads parameters in order (a short list reads as zeros: never panics).
struct Params<'a>(&'a [i64], usize);

impl Params<'_> {
    fn next(&mut self) -> i64 {
        let x = self.0.get(self.1).copied().unwrap_or(0);
        self.1 += 1;
        x
    }
    fn u(&mut self) -> u64 {
        self.next().max(0) as u64
    }
}

/// Hands out a transaction's read values or old values in order.
struct Cursor<'a, 'b>(&'a [&'b [u8]], usize);

impl<'b> Cursor<'_, 'b> {
    fn next(&mut self) -> &'b [u8] {
        let v = self.0.get(self.1).copied().unwrap_or(&[]);
        self.1 += 1;
        v
    }
}

impl PreparedTpcc {
    fn dk(&self, w: u64, d: u64) -> u64 {
        w * DISTRICTS + d
    }
    pub fn warehouse(&self, w: u64) -> Key {
        Key { table: WAREHOUSE, row: w }
    }
    pub fn district(&self, w: u64, d: u64) -> Key {
        Key { table: DISTRICT, row: self.dk(w, d) }
    }
    pub fn customer(&self, w: u64, d: u64, c: u64) -> Key {
        Key { table: CUSTOMER, row: self.dk(w, d) * self.customers + c }
    }
    /// NEW-ORDER row of order `o` (1-based) of district (w, d).
    pub fn new_order(&self, w: u64, d: u64, o: u64) -> Key {
        Key { table: NEW_ORDER, row: self.dk(w, d) * self.slots + o - 1 }
    }
    pub fn order(&self, w: u64, d: u64, o: u64) -> Key {
        Key { table: ORDER, row: self.dk(w, d) * self.slots + o - 1 }
    }
    /// ORDER-LINE `l` (1-based) of order `o`.
    pub fn order_line(&self, w: u64, d: u64, o: u64, l: u64) -> Key {
        Key { table: ORDER_LINE, row: (self.dk(w, d) * self.slots + o - 1) * MAX_LINES + l - 1 }
    }
    /// Node `node`'s replica of item `i` (1-based): ITEM is read-only, replicated per node.
    pub fn item(&self, node: u64, i: u64) -> Key {
        Key { table: ITEM, row: node * self.items + i - 1 }
    }
    pub fn stock(&self, w: u64, i: u64) -> Key {
        Key { table: STOCK, row: w * self.items + i - 1 }
    }
    fn history(&self, node: u64, t: Terminal, payments: u64) -> Key {
        let k = self.cfg.history_per_terminal as u64;
        let terminal = (t.worker as u64 * self.coroutines as u64 + t.coroutine as u64) % self.terminals;
        Key { table: HISTORY, row: (node * self.terminals + terminal) * k + payments % k }
    }
    /// Warehouses in total.
    pub fn warehouses(&self) -> u64 {
        self.warehouses
    }
    /// Order ids each district has rows for.
    pub fn slots(&self) -> u64 {
        self.slots
    }
    fn node_of(&self, w: u64) -> u64 {
        w / self.w_per_node
    }

    fn rows_per_node(&self, table: u16) -> u64 {
        let w = self.w_per_node;
        match table {
            WAREHOUSE => w,
            DISTRICT => w * DISTRICTS,
            CUSTOMER => w * DISTRICTS * self.customers,
            HISTORY => self.terminals * self.cfg.history_per_terminal as u64,
            NEW_ORDER | ORDER => w * DISTRICTS * self.slots,
            ORDER_LINE => w * DISTRICTS * self.slots * MAX_LINES,
            ITEM => self.items,
            _ => w * self.items,
        }
    }

    /// Lines of initial order `o` (5..=15).
    fn initial_ol_cnt(&self, dk: u64, o: u64) -> u64 {
        Mix::new(ORDER, dk * self.slots + o, 0x01c7).range(5, 15)
    }

    /// O_C_ID (0-based) of initial order `o`: a permutation of the district's customers.
    fn initial_customer(&self, dk: u64, o: u64) -> u64 {
        let n = self.customers;
        let a = if n % 7919 == 0 { 7907 } else { 7919 };
        let b = Mix::new(CUSTOMER, dk, 0x9e3).next() % n;
        ((o - 1) % n * (a % n) + b) % n
    }

    fn pick_other(rng: &mut ChaCha8Rng, n: u64, not: u64) -> u64 {
        let r = rng.gen_range(0..n - 1);
        if r >= not {
            r + 1
        } else {
            r
        }
    }

    fn spec(kind: usize, reads: Vec<Key>, writes: Vec<Key>, params: Vec<i64>) -> TxnSpec {
        TxnSpec { kind: KINDS[kind], reads, writes, params, compute_ns: 0 }
    }

    fn draw_new_order(&self, rng: &mut ChaCha8Rng, node: u16, w: u64) -> TxnSpec {
        let d = rng.gen_range(0..DISTRICTS);
        let c = nurand(rng, self.a_c, 1, self.customers, C_CUST_RUN) - 1;
        let ol_cnt = rng.gen_range(5..=MAX_LINES);
        let invalid = rng.gen_range(1..=100u32) == 1;
        let valid = ol_cnt - invalid as u64;
        let mut lines: Vec<(u64, u64, u64)> = Vec::new();
        while (lines.len() as u64) < valid {
            let i = nurand(rng, self.a_i, 1, self.items, C_ITEM);
            if lines.iter().any(|l| l.0 == i) {
                continue; // distinct items: a record may appear once in a transaction
            }
            let remote = self.warehouses > 1 && rng.gen_bool(self.cfg.remote_item);
            let sw = if remote { Self::pick_other(rng, self.warehouses, w) } else { w };
            lines.push((i, sw, rng.gen_range(1..=10)));
        }
        let nodes = self.nodes as u64;
        if nodes > 1 && rng.gen_bool(self.cfg.distributed) && lines.iter().all(|l| self.node_of(l.1) == node as u64) {
            // DrTM+H's "always distributed": one line from a warehouse on another node.
            let k = rng.gen_range(0..lines.len());
            let other = Self::pick_other(rng, nodes, node as u64);
            lines[k].1 = other * self.w_per_node + rng.gen_range(0..self.w_per_node);
        }
        let mut params = vec![w as i64, d as i64, c as i64, invalid as i64, lines.len() as i64];
        for (i, sw, q) in &lines {
            params.extend([*i as i64, *sw as i64, *q as i64]);
        }
        Self::spec(0, vec![], vec![], params)
    }

    fn customer_choice(&self, rng: &mut ChaCha8Rng) -> (bool, u64) {
        if rng.gen_range(1..=100u32) <= 60 {
            (true, nurand(rng, self.a_name, 0, self.names - 1, C_LAST_RUN))
        } else {
            (false, nurand(rng, self.a_c, 1, self.customers, C_CUST_RUN) - 1)
        }
    }

    fn draw_payment(&self, rng: &mut ChaCha8Rng, node: u16, w: u64, t: Terminal) -> TxnSpec {
        let d = rng.gen_range(0..DISTRICTS);
        let (cw, cd) = if self.warehouses > 1 && rng.gen_bool(self.cfg.remote_payment) {
            (Self::pick_other(rng, self.warehouses, w), rng.gen_range(0..DISTRICTS))
        } else {
            (w, d)
        };
        let (by_name, x) = self.customer_choice(rng);
        let amount = rng.gen_range(100..=500_000i64);
        let h = self.history(node as u64, t, t.seq);
        let params = vec![w as i64, d as i64, cw as i64, cd as i64, by_name as i64, x as i64, amount, h.row as i64];
        let mut s = Self::spec(1, vec![], vec![], params);
        if !by_name {
            s.writes = self.payment_writes(&s.params, x);
        }
        s
    }

    fn payment_writes(&self, p: &[i64], c: u64) -> Vec<Key> {
        let (w, d, cw, cd) = (p[0] as u64, p[1] as u64, p[2] as u64, p[3] as u64);
        vec![self.warehouse(w), self.district(w, d), self.customer(cw, cd, c), Key { table: HISTORY, row: p[7] as u64 }]
    }

    fn kind_index(spec: &TxnSpec) -> usize {
        match PIECE_KINDS.iter().position(|k| *k == spec.kind) {
            Some(p) => PIECE_OF[p],
            None => KINDS.iter().position(|k| *k == spec.kind).unwrap_or(0),
        }
    }

    /// The template operations `spec` runs: its piece's (the last parameter) or all.
    fn ops_run(spec: &TxnSpec) -> u64 {
        match PIECE_KINDS.contains(&spec.kind) {
            true => spec.params.last().copied().unwrap_or(0) as u64,
            false => u64::MAX,
        }
    }

    /// The template operation (of [`run_templates`]) each read and each write of a resolved
    /// new-order (`t` = 0) or payment (1) belongs to.
    fn ops_of(t: usize, spec: &TxnSpec) -> (Vec<usize>, Vec<usize>) {
        if t == 1 {
            return (Vec::new(), vec![0, 1, 2, 3]);
        }
        let n = spec.params[4] as usize;
        let reads = [vec![0, 2], vec![3; n]].concat();
        let writes = [vec![4; n], vec![5, 6], vec![7; n], vec![1]].concat();
        (reads, writes)
    }

    /// A constant field's value: the record as loaded (ITEM, W_NAME, D_NAME are never
    /// written; `the_optimized_chopping_declarations_hold_in_the_logic` checks it).
    fn constant(&self, key: Key, at: usize, n: usize) -> u64 {
        get(&self.initial(key), at, n)
    }
}

/// The pieces' transaction types (new-order's, payment's, delivery's): a piece's last
/// parameter is the set of template operations it runs (bit k: operation k of
/// [`run_templates`]).
pub const PIECE_KINDS: [&str; 3] = ["new-order piece", "payment piece", "delivery piece"];
/// The transaction (index in [`KINDS`]) each of [`PIECE_KINDS`] is a piece of.
const PIECE_OF: [usize; 3] = [0, 1, 3];
/// Delivery's deferred piece (Sec. 4.2): template operation 3, the customer balance.
const DLY_BALANCE: u64 = 1 << 3;

impl Workload for PreparedTpcc {
    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn tables(&self) -> Vec<Table> {
        (0..9u16)
            .map(|id| Table {
                id,
                name: TABLE_NAMES[id as usize],
                record_bytes: ROW_BYTES[id as usize],
                rows_per_node: self.rows_per_node(id),
            })
            .collect()
    }

    fn home(&self, key: Key, nodes: u16) -> u16 {
        ((key.row / self.rows_per_node(key.table).max(1)) % nodes as u64) as u16
    }

    /// The warehouse a row belongs to (ITEM's replica and HISTORY's ring: the node's).
    fn lock_group(&self, key: Key) -> Option<u64> {
        let per_w = match key.table {
            WAREHOUSE => 1,
            DISTRICT => DISTRICTS,
            CUSTOMER => DISTRICTS * self.customers,
            NEW_ORDER | ORDER => DISTRICTS * self.slots,
            ORDER_LINE => DISTRICTS * self.slots * MAX_LINES,
            STOCK => self.items,
            _ => return None,
        };
        Some(key.row / per_w)
    }

    fn initial(&self, key: Key) -> Vec<u8> {
        let mut v = vec![0u8; ROW_BYTES[key.table as usize] as usize];
        self.initial_into(key, &mut v);
        v
    }

    fn initial_into(&self, key: Key, record: &mut [u8]) {
        let t = key.table;
        if record.len() != ROW_BYTES[t as usize] as usize {
            let v = self.initial(key);
            let n = v.len().min(record.len());
            record[..n].copy_from_slice(&v[..n]);
            return;
        }
        self.make_initial(key, record, true)
    }

    fn initial_checked_into(&self, key: Key, record: &mut [u8]) {
        if record.len() != ROW_BYTES[key.table as usize] as usize {
            return self.initial_into(key, record);
        }
        self.make_initial(key, record, false)
    }

    fn generate(&self, rng: &mut ChaCha8Rng, node: u16, nodes: u16) -> TxnSpec {
        self.generate_at(rng, node, nodes, Terminal::default())
    }

    fn generate_at(&self, rng: &mut ChaCha8Rng, node: u16, _nodes: u16, t: Terminal) -> TxnSpec {
        let n = self.w_per_node;
        let w = node as u64 * n
            + match self.cfg.home_warehouse {
                // As in DrTM+H's TPC-C, each worker serves a share of its node's warehouses (one
                // when workers >= W) and a transaction's home warehouse is drawn from that share.
                HomeWarehouse::Worker => {
                    let k = t.worker as u64 % self.workers;
                    let (lo, hi) = if self.workers >= n {
                        (k % n, k % n + 1)
                    } else {
                        (k * n / self.workers, (k + 1) * n / self.workers)
                    };
                    rng.gen_range(lo..hi)
                }
                HomeWarehouse::Node => rng.gen_range(0..n),
            };
        let roll = rng.gen_range(0..100u32);
        let mut acc = 0;
        let kind = self.cfg.effective_mix().iter().position(|&m| {
            acc += m;
            roll < acc
        });
        match kind.unwrap_or(0) {
            0 => self.draw_new_order(rng, node, w),
            1 => self.draw_payment(rng, node, w, t),
            2 => {
                let d = rng.gen_range(0..DISTRICTS);
                let (by_name, x) = self.customer_choice(rng);
                Self::spec(2, vec![], vec![], vec![w as i64, d as i64, by_name as i64, x as i64])
            }
            3 => Self::spec(3, vec![], vec![], vec![w as i64, rng.gen_range(1..=10)]),
            _ => {
                let d = rng.gen_range(0..DISTRICTS);
                Self::spec(4, vec![], vec![], vec![w as i64, d as i64, rng.gen_range(10..=20)])
            }
        }
    }

    fn lookups(&self, spec: &TxnSpec) -> Vec<Lookup> {
        let p = &spec.params;
        let (w, a) = (p[0] as u64, p.get(1).copied().unwrap_or(0) as u64);
        match Self::kind_index(spec) {
            0 => vec![Lookup { key: self.district(w, a), args: vec![Q_NEXT_O_ID, p[0], p[1]] }],
            1 if p[4] == 1 => {
                vec![Lookup { key: self.district(p[2] as u64, p[3] as u64), args: vec![Q_NAME, p[2], p[3], p[5]] }]
            }
            2 => vec![Lookup { key: self.district(w, a), args: vec![Q_ORDER_STATUS, p[0], p[1], p[2], p[3]] }],
            3 => vec![Lookup { key: self.warehouse(w), args: vec![Q_DELIVERY, p[0]] }],
            4 => vec![Lookup { key: self.district(w, a), args: vec![Q_STOCK_LEVEL, p[0], p[1]] }],
            _ => Vec::new(),
        }
    }

    fn answer(&self, args: &[i64], ix: &mut OrderedIndex, read: &dyn Fn(Key) -> Option<Vec<u8>>) -> Vec<i64> {
        let rd = |k: Key| read(k).unwrap_or_default();
        let mut a = Params(args, 0);
        let q = a.next();
        let (w, d) = (a.u(), a.u());
        if w >= self.warehouses || (q != Q_DELIVERY && d >= DISTRICTS) {
            return Vec::new();
        }
        match q {
            Q_NEXT_O_ID => vec![get(&rd(self.district(w, d)), D_NEXT_O_ID, 4) as i64],
            Q_NAME => vec![self.by_name(ix, read, w, d, a.u()).map_or(-1, |c| c as i64)],
            Q_ORDER_STATUS => {
                let (by_name, x) = (a.u() == 1, a.u());
                let c = if by_name { self.by_name(ix, read, w, d, x) } else { Some(x) };
                let Some(c) = c else { return vec![-1] };
                let mark = self.catch_up_orders(ix, read, w, d);
                let pre = [&[IX_ORDER][..], &(w as u32).to_be_bytes(), &[d as u8], &(c as u16).to_be_bytes()].concat();
                let (o, cnt) = ix.prefixed(&pre).last().map_or((0, 0), |(_, &v)| (v >> 8, v & 0xff));
                vec![c as i64, o as i64, cnt as i64, mark as i64]
            }
            Q_DELIVERY => {
                let mut out = Vec::new();
                for d in 0..DISTRICTS {
                    let key = [&[IX_OLDEST][..], &(w as u32).to_be_bytes(), &[d as u8]].concat();
                    let mut o = ix.marks.get(&key).copied().unwrap_or(1).max(1);
                    // Undelivered orders form a contiguous run: skip the delivered ones.
                    let found = loop {
                        if o > self.slots {
                            break None;
                        }
                        let r = rd(self.new_order(w, d, o));
                        match r.get(NO_STATE).copied().unwrap_or(NO_EMPTY) {
                            NO_DELIVERED if get(&r, NO_O_ID, 4) == o => o += 1,
                            NO_PRESENT => break Some(o),
                            _ => break None,
                        }
                    };
                    ix.marks.insert(key, o);
                    match found {
                        Some(o) => {
                            let r = rd(self.order(w, d, o));
                            out.extend([o as i64, get(&r, O_C_ID, 2) as i64 - 1, get(&r, O_OL_CNT, 1) as i64, 0]);
                        }
                        None => out.extend([0, 0, 0, o as i64]),
                    }
                }
                out
            }
            Q_STOCK_LEVEL => {
                let n = get(&rd(self.district(w, d)), D_NEXT_O_ID, 4).clamp(1, self.slots);
                let lo = n.saturating_sub(20).max(1);
                let mut cnts = Vec::new();
                let mut items = Vec::new();
                for o in lo..n {
                    let cnt = get(&rd(self.order(w, d, o)), O_OL_CNT, 1).min(MAX_LINES);
                    cnts.push(cnt as i64);
                    for l in 1..=cnt {
                        items.push(get(&rd(self.order_line(w, d, o, l)), OL_I_ID, 4) as i64);
                    }
                }
                [vec![n as i64, lo as i64], cnts, items].concat()
            }
            _ => Vec::new(),
        }
    }

    /// The indexes the mix uses, for every district of the node: customers by name, orders by
    /// customer, the oldest undelivered order.
    fn build_index(&self, node: u16, _nodes: u16, ix: &mut OrderedIndex, read: &dyn Fn(Key) -> Option<Vec<u8>>) {
        let mix = self.cfg.effective_mix();
        let node = node as u64;
        for w in node * self.w_per_node..(node + 1) * self.w_per_node {
            for d in 0..DISTRICTS {
                if mix[1] + mix[2] > 0 {
                    self.by_name(ix, read, w, d, 0);
                }
                if mix[2] > 0 {
                    self.catch_up_orders(ix, read, w, d);
                }
            }
            if mix[3] > 0 {
                self.answer(&[Q_DELIVERY, w as i64], ix, read);
            }
        }
    }

    fn resolve(&self, spec: &TxnSpec, answers: &[Vec<i64>]) -> Result<TxnSpec, String> {
        let mut s = spec.clone();
        let ans = answers.first().cloned().unwrap_or_default();
        let p = spec.params.clone();
        let mut a = Params(&ans, 0);
        match Self::kind_index(spec) {
            0 => {
                let (w, d, c) = (p[0] as u64, p[1] as u64, p[2] as u64);
                let o = a.u().max(1);
                if o >= self.slots {
                    return Err(format!(
                        "TPC-C: district {} of warehouse {} has used its {} pre-allocated orders (order id {o}); raise workload.order_headroom (now {}) or shorten the run",
                        d + 1,
                        w + 1,
                        self.slots - 1,
                        self.cfg.order_headroom
                    ));
                }
                let n = p[4] as usize;
                let lines: Vec<(u64, u64)> = (0..n).map(|k| (p[5 + 3 * k] as u64, p[6 + 3 * k] as u64)).collect();
                let node = self.node_of(w);
                s.reads = [self.warehouse(w), self.customer(w, d, c)].to_vec();
                s.reads.extend(lines.iter().map(|&(i, _)| self.item(node, i)));
                s.writes = lines.iter().map(|&(i, sw)| self.stock(sw, i)).collect();
                s.writes.extend([self.order(w, d, o), self.new_order(w, d, o)]);
                s.writes.extend((1..=n as u64).map(|l| self.order_line(w, d, o, l)));
                // Last, so that protocols writing back in order publish D_NEXT_O_ID after
                // the order's rows (the index then rarely sees an incomplete order).
                s.writes.push(self.district(w, d));
                s.params.push(o as i64);
            }
            1 => {
                if p[4] == 1 {
                    let c = a.next();
                    if c < 0 || c as u64 >= self.customers {
                        return Err(format!(
                            "TPC-C: no customer with last name {} in district {} of warehouse {}",
                            p[5],
                            p[3] + 1,
                            p[2] + 1
                        ));
                    }
                    s.writes = self.payment_writes(&p, c as u64);
                    s.params.push(c);
                }
            }
            2 => {
                let (w, d) = (p[0] as u64, p[1] as u64);
                let c = a.next();
                if c < 0 || c as u64 >= self.customers {
                    return Err(format!(
                        "TPC-C: no customer for order-status in district {} of warehouse {}",
                        d + 1,
                        w + 1
                    ));
                }
                let (o, cnt, mark) = (a.u().min(self.slots), a.u().min(MAX_LINES), a.u().clamp(1, self.slots));
                s.reads = vec![self.customer(w, d, c as u64)];
                if o > 0 && o < mark {
                    s.reads.push(self.order(w, d, o));
                    s.reads.extend((1..=cnt).map(|l| self.order_line(w, d, o, l)));
                }
                s.reads.push(self.order(w, d, mark));
                s.params.extend([c, o as i64, cnt as i64, mark as i64]);
            }
            3 => {
                let w = p[0] as u64;
                for d in 0..DISTRICTS {
                    let (o, c, cnt, n) = (a.u().min(self.slots), a.u(), a.u().min(MAX_LINES), a.u().min(self.slots));
                    let c = c.min(self.customers - 1);
                    if o > 0 {
                        s.writes.push(self.new_order(w, d, o));
                        s.writes.push(self.order(w, d, o));
                        s.writes.extend((1..=cnt).map(|l| self.order_line(w, d, o, l)));
                        s.writes.push(self.customer(w, d, c));
                        if o > 1 {
                            s.reads.push(self.new_order(w, d, o - 1));
                        }
                    } else if n > 0 {
                        if n > 1 {
                            s.reads.push(self.new_order(w, d, n - 1));
                        }
                        s.reads.push(self.new_order(w, d, n));
                    }
                    s.params.extend([o as i64, c as i64, cnt as i64, n as i64]);
                }
            }
            _ => {
                let (w, d) = (p[0] as u64, p[1] as u64);
                let n = a.u().clamp(1, self.slots);
                let lo = a.u().clamp(1, n);
                let cnts: Vec<u64> = (lo..n).map(|_| a.u().min(MAX_LINES)).collect();
                let total: u64 = cnts.iter().sum();
                let items: Vec<u64> = (0..total).map(|_| a.u()).collect();
                s.reads = vec![self.district(w, d)];
                for (k, o) in (lo..n).enumerate() {
                    s.reads.extend((1..=cnts[k]).map(|l| self.order_line(w, d, o, l)));
                    if cnts[k] < MAX_LINES {
                        s.reads.push(self.order_line(w, d, o, cnts[k] + 1));
                    }
                }
                let mut distinct: Vec<u64> = items.iter().copied().filter(|&i| (1..=self.items).contains(&i)).collect();
                distinct.sort_unstable();
                distinct.dedup();
                s.reads.extend(distinct.iter().map(|&i| self.stock(w, i)));
                s.params.extend([n as i64, lo as i64]);
                s.params.extend(cnts.iter().map(|&c| c as i64));
                s.params.push(distinct.len() as i64);
            }
        }
        Ok(s)
    }

    /// New-order, payment and delivery as the chopping says (`Tpcc::chopping`), each piece's
    /// records in the resolved transaction's order; delivery's deferred piece published per
    /// epoch.
    fn chopping(&self) -> Option<String> {
        if !self.pieces.iter().any(|p| p.len() > 1) {
            return None;
        }
        let ts = run_templates(self.cfg.chopping == Chopping::Optimized);
        let text = crate::chopping::describe(&ts[..3], &self.pieces[..3].to_vec()).replace('\n', ", ");
        let publish = match self.pieces[2].len() > 1 {
            true => format!(" (DLY's last piece deferred, published every {} us)", self.cfg.publish_epoch_ns / 1000),
            false => String::new(),
        };
        Some(format!("{:?} (DrTM Sec. 4): {text}{publish}; the rest whole", self.cfg.chopping))
    }

    fn chop(&self, spec: &TxnSpec) -> Vec<TxnSpec> {
        let t = match KINDS.iter().position(|k| *k == spec.kind) {
            Some(t @ (0 | 1)) => t,
            Some(3) => return self.chop_delivery(spec),
            _ => return Vec::new(),
        };
        let pieces = match self.pieces.get(t) {
            Some(p) if p.len() > 1 => p,
            _ => return Vec::new(),
        };
        let (read_ops, write_ops) = Self::ops_of(t, spec);
        let pick = |keys: &[Key], ops: &[usize], mask: u64| -> Vec<Key> {
            keys.iter().zip(ops).filter(|(_, &o)| mask >> o & 1 == 1).map(|(k, _)| *k).collect()
        };
        pieces
            .iter()
            .map(|p| {
                let mask = p.iter().fold(0u64, |m, &o| m | 1 << o);
                TxnSpec {
                    kind: PIECE_KINDS[t],
                    reads: pick(&spec.reads, &read_ops, mask),
                    writes: pick(&spec.writes, &write_ops, mask),
                    params: [spec.params.clone(), vec![mask as i64]].concat(),
                    compute_ns: spec.compute_ns,
                }
            })
            .collect()
    }

    fn deferred(&self, piece: &TxnSpec) -> bool {
        piece.kind == PIECE_KINDS[2] && Self::ops_run(piece) == DLY_BALANCE
    }

    fn publish_epoch_ns(&self) -> u64 {
        self.cfg.publish_epoch_ns
    }

    fn retry_on_user_abort(&self, spec: &TxnSpec) -> bool {
        match Self::kind_index(spec) {
            0 => spec.params.get(3) != Some(&1), // an invalid item's rollback is final
            1 => false,
            _ => true,
        }
    }

    fn execute(&self, spec: &TxnSpec, reads: &[&[u8]], old: &[&[u8]]) -> Executed {
        let out = match Self::kind_index(spec) {
            0 => self.exec_new_order(spec, reads, old, Self::ops_run(spec)),
            1 => self.exec_payment(spec, old, Self::ops_run(spec)),
            2 => match self.exec_order_status(spec, reads) {
                Err(wait) => return Executed::Wait(wait),
                Ok(out) => out,
            },
            3 => self.exec_delivery(spec, reads, old, Self::ops_run(spec)),
            _ => self.exec_stock_level(spec, reads),
        };
        match out {
            Some(new_values) => Executed::Commit { new_values, external_delta: 0 },
            None => Executed::UserAbort,
        }
    }

    /// W_YTD minus C_YTD_PAYMENT: a payment adds its amount to both, nothing else changes
    /// either, so the total is constant (a lost update of either shows).
    fn conserved(&self, key: Key, value: &[u8]) -> i64 {
        match key.table {
            WAREHOUSE => geti(value, W_YTD),
            CUSTOMER => -geti(value, C_YTD_PAYMENT),
            _ => 0,
        }
    }

    fn initial_conserved(&self, key: Key) -> i64 {
        match key.table {
            WAREHOUSE => W_YTD_INITIAL,
            CUSTOMER => -C_YTD_INITIAL,
            _ => 0,
        }
    }

    fn max_accesses(&self) -> Vec<(u16, u32)> {
        let mix = self.cfg.effective_mix();
        let mut max = [0u32; 9];
        let per_kind: [&[(u16, u32)]; 5] = [
            &[
                (WAREHOUSE, 1),
                (CUSTOMER, 1),
                (ITEM, 15),
                (STOCK, 15),
                (ORDER, 1),
                (NEW_ORDER, 1),
                (ORDER_LINE, 15),
                (DISTRICT, 1),
            ],
            &[(WAREHOUSE, 1), (DISTRICT, 1), (CUSTOMER, 1), (HISTORY, 1)],
            &[(CUSTOMER, 1), (ORDER, 2), (ORDER_LINE, 15)],
            &[(NEW_ORDER, 20), (ORDER, 10), (ORDER_LINE, 150), (CUSTOMER, 10)],
            &[(DISTRICT, 1), (ORDER_LINE, 320), (STOCK, 300)],
        ];
        for (k, list) in per_kind.iter().enumerate() {
            if mix[k] > 0 {
                for &(t, n) in list.iter() {
                    max[t as usize] = max[t as usize].max(n);
                }
            }
        }
        (0..9u16).map(|t| (t, max[t as usize])).filter(|&(_, n)| n > 0).collect()
    }

    fn check_consistency(&self, node: u16, _nodes: u16, read: crate::ReadInto) -> Vec<Consistency> {
        let mut c = [
            Consistency { name: "TPC-C 3.3.2.1: W_YTD = sum(D_YTD)".into(), ..Default::default() },
            Consistency {
                name: "TPC-C 3.3.2.2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)".into(),
                ..Default::default()
            },
            Consistency {
                name: "TPC-C 3.3.2.3: max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW-ORDER".into(),
                ..Default::default()
            },
            Consistency { name: "TPC-C 3.3.2.4: sum(O_OL_CNT) = rows in ORDER-LINE".into(), ..Default::default() },
            Consistency {
                name: "TPC-C 3.3.2.10 (ring HISTORY): C_BALANCE + C_YTD_PAYMENT - initial = sum(OL_AMOUNT delivered), every delivery published".into(),
                ..Default::default()
            },
        ];
        let fail = |c: &mut Consistency, why: String| {
            c.violations += 1;
            c.first.get_or_insert(why);
        };
        // A record not on this node reads as empty (its fields as 0).
        let rd = |k: Key, out: &mut Vec<u8>| {
            if !read.read(k, out) {
                out.clear();
            }
        };
        let (mut wh, mut dist, mut ord, mut no, mut line, mut cust) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let node = node as u64;
        for w in node * self.w_per_node..(node + 1) * self.w_per_node {
            rd(self.warehouse(w), &mut wh);
            let w_ytd = geti(&wh, W_YTD);
            let mut d_ytd = 0;
            for d in 0..DISTRICTS {
                rd(self.district(w, d), &mut dist);
                d_ytd += geti(&dist, D_YTD);
                let next = get(&dist, D_NEXT_O_ID, 4);
                let (mut max_o, mut ol_cnt, mut ol_rows) = (0u64, 0u64, 0u64);
                let (mut no_rows, mut no_min, mut no_max) = (0u64, u64::MAX, 0u64);
                // Per customer: what its delivered orders' lines add up to.
                let mut delivered = vec![0i64; self.customers as usize];
                // Slots past the district's next order and past the loaded orders were loaded
                // empty; those nothing wrote since (orders, new orders and their lines) count
                // for nothing and are not read: most of a short run's slots. Untouched from
                // slot `s` on implies from `s + 1` on, so the first such slot is found by
                // binary search (the slots just past the last order share its pages).
                let free = next.max(self.customers + 1);
                let loaded_empty_from = |s: u64| {
                    s > self.slots
                        || read.untouched(ORDER, self.order(w, d, s).row..self.order(w, d, self.slots).row + 1)
                            && read.untouched(
                                NEW_ORDER,
                                self.new_order(w, d, s).row..self.new_order(w, d, self.slots).row + 1,
                            )
                            && read.untouched(
                                ORDER_LINE,
                                self.order_line(w, d, s, 1).row..self.order_line(w, d, self.slots, MAX_LINES).row + 1,
                            )
                };
                let last = if free > self.slots {
                    self.slots
                } else {
                    let (mut lo, mut hi) = (free, self.slots + 1);
                    while lo < hi {
                        let mid = lo + (hi - lo) / 2;
                        if loaded_empty_from(mid) {
                            hi = mid;
                        } else {
                            lo = mid + 1;
                        }
                    }
                    lo - 1
                };
                for o in 1..=last {
                    rd(self.order(w, d, o), &mut ord);
                    let id = get(&ord, O_ID, 4);
                    if id != 0 {
                        max_o = max_o.max(id);
                        ol_cnt += get(&ord, O_OL_CNT, 1);
                    }
                    if id != 0 && get(&ord, O_UNPUBLISHED, 1) != 0 {
                        let at = format!("warehouse {} district {} order {id}", w + 1, d + 1);
                        fail(&mut c[4], format!("{at}: delivered, its customer's balance never published"));
                    }
                    let customer = get(&ord, O_C_ID, 2).wrapping_sub(1) as usize;
                    let counted = id != 0 && get(&ord, O_CARRIER_ID, 1) != 0 && get(&ord, O_UNPUBLISHED, 1) == 0;
                    rd(self.new_order(w, d, o), &mut no);
                    if no.get(NO_STATE) == Some(&NO_PRESENT) {
                        let id = get(&no, NO_O_ID, 4);
                        no_rows += 1;
                        no_min = no_min.min(id);
                        no_max = no_max.max(id);
                    }
                    for l in 1..=MAX_LINES {
                        rd(self.order_line(w, d, o, l), &mut line);
                        ol_rows += (get(&line, OL_O_ID, 4) != 0) as u64;
                        if let Some(x) = delivered.get_mut(customer).filter(|_| counted && l <= get(&ord, O_OL_CNT, 1))
                        {
                            *x += get32i(&line, OL_AMOUNT);
                        }
                    }
                }
                let at = format!("warehouse {} district {}", w + 1, d + 1);
                for x in c.iter_mut().skip(1).take(3) {
                    x.checked += 1;
                }
                if next.wrapping_sub(1) != max_o || (no_rows > 0 && no_max != max_o) {
                    let no = if no_rows > 0 { no_max.to_string() } else { "none (no new orders)".into() };
                    fail(
                        &mut c[1],
                        format!(
                            "{at}: D_NEXT_O_ID - 1 = {}, max(O_ID) = {max_o}, max(NO_O_ID) = {no}",
                            next.wrapping_sub(1) as i64
                        ),
                    );
                }
                if no_rows > 0 && no_max - no_min + 1 != no_rows {
                    fail(
                        &mut c[2],
                        format!("{at}: max(NO_O_ID) - min(NO_O_ID) + 1 = {} but {no_rows} rows", no_max - no_min + 1),
                    );
                }
                if ol_cnt != ol_rows {
                    fail(&mut c[3], format!("{at}: sum(O_OL_CNT) = {ol_cnt} but {ol_rows} ORDER-LINE rows"));
                }
                for (k, &sum) in delivered.iter().enumerate() {
                    rd(self.customer(w, d, k as u64), &mut cust);
                    let paid =
                        geti(&cust, C_BALANCE) + geti(&cust, C_YTD_PAYMENT) - (C_BALANCE_INITIAL + C_YTD_INITIAL);
                    c[4].checked += 1;
                    if paid != sum {
                        let (b, y) = (geti(&cust, C_BALANCE), geti(&cust, C_YTD_PAYMENT));
                        fail(
                            &mut c[4],
                            format!(
                                "{at} customer {}: C_BALANCE {b} + C_YTD_PAYMENT {y} but {sum} delivered (cents)",
                                k + 1
                            ),
                        );
                    }
                }
            }
            c[0].checked += 1;
            if w_ytd != d_ytd {
                fail(&mut c[0], format!("warehouse {}: W_YTD = {w_ytd} but sum(D_YTD) = {d_ytd} (cents)", w + 1));
            }
        }
        c.to_vec()
    }
}

impl PreparedTpcc {
    /// A record as loading makes it (`initial_into`), or without its strings (`strings`
    /// false, `initial_checked_into`): the check reads numbers only, and strings were most of
    /// checking a large run.
    fn make_initial(&self, key: Key, record: &mut [u8], strings: bool) {
        let t = key.table;
        let mut v = record;
        let mut m = Mix::new(t, key.row, 0x7bcc);
        m.strings = strings;
        let put_str = |v: &mut [u8], at: usize, s: &[u8]| v[at..at + s.len()].copy_from_slice(s);
        match t {
            WAREHOUSE => {
                puti(&mut v, W_YTD, W_YTD_INITIAL);
                put(&mut v, W_TAX, 2, m.range(0, 2000));
                put(&mut v, W_ID, 2, key.row + 1);
                m.astring(&mut v[W_NAME..W_NAME + 10], 6, 10);
                m.astring(&mut v[W_STREET_1..W_STREET_1 + 20], 10, 20);
                m.astring(&mut v[W_STREET_2..W_STREET_2 + 16], 10, 16);
                m.astring(&mut v[W_CITY..W_CITY + 20], 10, 20);
                m.astring(&mut v[W_STATE..W_STATE + 2], 2, 2);
                m.nstring(&mut v[W_ZIP..W_ZIP + 4]);
                put_str(&mut v, W_ZIP + 4, b"11111");
            }
            DISTRICT => {
                let (w, d) = (key.row / DISTRICTS, key.row % DISTRICTS);
                puti(&mut v, D_YTD, D_YTD_INITIAL);
                put(&mut v, D_NEXT_O_ID, 4, self.customers + 1);
                put(&mut v, D_TAX, 2, m.range(0, 2000));
                put(&mut v, D_W_ID, 2, w + 1);
                put(&mut v, D_ID, 1, d + 1);
                m.astring(&mut v[D_NAME..D_NAME + 10], 6, 10);
                m.astring(&mut v[D_STREET_1..D_STREET_1 + 20], 10, 20);
                m.astring(&mut v[D_STREET_2..D_STREET_2 + 17], 10, 17);
                m.astring(&mut v[D_CITY..D_CITY + 20], 10, 20);
                m.astring(&mut v[D_STATE..D_STATE + 2], 2, 2);
                m.nstring(&mut v[D_ZIP..D_ZIP + 4]);
                put_str(&mut v, D_ZIP + 4, b"11111");
            }
            CUSTOMER => {
                let dk = key.row / self.customers;
                let c = key.row % self.customers;
                puti(&mut v, C_BALANCE, C_BALANCE_INITIAL);
                puti(&mut v, C_YTD_PAYMENT, C_YTD_INITIAL);
                put(&mut v, C_PAYMENT_CNT, 2, 1);
                put(&mut v, C_ID, 2, c + 1);
                put(&mut v, C_D_ID, 1, dk % DISTRICTS + 1);
                put(&mut v, C_W_ID, 2, dk / DISTRICTS + 1);
                put_str(&mut v, C_CREDIT, if m.range(1, 100) <= 10 { b"BC" } else { b"GC" });
                put(&mut v, C_DISCOUNT, 2, m.range(0, 5000));
                put(&mut v, C_CREDIT_LIM, 4, 5_000_000);
                put(&mut v, C_SINCE, 4, DATE as u64);
                m.astring(&mut v[C_FIRST..C_FIRST + 16], 8, 16);
                put_str(&mut v, C_MIDDLE, b"OE");
                // The first 1,000 customers of a district take every last name once.
                let name = if c < self.names { c } else { m.nurand(255, 0, 999, C_LAST_LOAD) };
                put_str(&mut v, C_LAST, &last_name(name));
                m.astring(&mut v[C_STREET_1..C_STREET_1 + 20], 10, 20);
                m.astring(&mut v[C_STREET_2..C_STREET_2 + 17], 10, 17);
                m.astring(&mut v[C_CITY..C_CITY + 20], 10, 20);
                m.astring(&mut v[C_STATE..C_STATE + 2], 2, 2);
                m.nstring(&mut v[C_ZIP..C_ZIP + 4]);
                put_str(&mut v, C_ZIP + 4, b"11111");
                m.nstring(&mut v[C_PHONE..C_PHONE + 16]);
                m.astring(&mut v[C_DATA..C_DATA + 500], 300, 500);
            }
            NEW_ORDER => {
                let (dk, o) = (key.row / self.slots, key.row % self.slots + 1);
                if o <= self.customers {
                    put(&mut v, NO_O_ID, 4, o);
                    put(&mut v, NO_W_ID, 2, dk / DISTRICTS + 1);
                    put(&mut v, NO_D_ID, 1, dk % DISTRICTS + 1);
                    v[NO_STATE] = if o >= self.first_new { NO_PRESENT } else { NO_DELIVERED };
                }
            }
            ORDER => {
                let (dk, o) = (key.row / self.slots, key.row % self.slots + 1);
                if o <= self.customers {
                    put(&mut v, O_ID, 4, o);
                    put(&mut v, O_C_ID, 2, self.initial_customer(dk, o) + 1);
                    put(&mut v, O_D_ID, 1, dk % DISTRICTS + 1);
                    put(&mut v, O_CARRIER_ID, 1, if o < self.first_new { m.range(1, 10) } else { 0 });
                    put(&mut v, O_W_ID, 2, dk / DISTRICTS + 1);
                    put(&mut v, O_OL_CNT, 1, self.initial_ol_cnt(dk, o));
                    put(&mut v, O_ALL_LOCAL, 1, 1);
                    put(&mut v, O_ENTRY_D, 4, DATE as u64);
                }
            }
            ORDER_LINE => {
                let slot = key.row / MAX_LINES;
                let (dk, o, l) = (slot / self.slots, slot % self.slots + 1, key.row % MAX_LINES + 1);
                if o <= self.customers && l <= self.initial_ol_cnt(dk, o) {
                    let delivered = o < self.first_new;
                    put(&mut v, OL_O_ID, 4, o);
                    put(&mut v, OL_I_ID, 4, m.range(1, self.items));
                    put(&mut v, OL_D_ID, 1, dk % DISTRICTS + 1);
                    put(&mut v, OL_NUMBER, 1, l);
                    put(&mut v, OL_W_ID, 2, dk / DISTRICTS + 1);
                    put(&mut v, OL_SUPPLY_W_ID, 2, dk / DISTRICTS + 1);
                    put(&mut v, OL_QUANTITY, 1, 5);
                    put(&mut v, OL_AMOUNT, 4, if delivered { 0 } else { m.range(1, 999_999) });
                    put(&mut v, OL_DELIVERY_D, 4, if delivered { DATE as u64 } else { 0 });
                    m.astring(&mut v[OL_DIST_INFO..OL_DIST_INFO + 24], 24, 24);
                }
            }
            ITEM => {
                put(&mut v, I_ID, 4, key.row % self.items + 1);
                put(&mut v, I_IM_ID, 2, m.range(1, 10_000));
                put(&mut v, I_PRICE, 2, m.range(100, 10_000));
                m.astring(&mut v[I_NAME..I_NAME + 24], 14, 24);
                m.data(&mut v[I_DATA..I_DATA + 50]);
            }
            STOCK => {
                put(&mut v, S_QUANTITY, 2, m.range(10, 100));
                put(&mut v, S_W_ID, 2, key.row / self.items + 1);
                put(&mut v, S_I_ID, 4, key.row % self.items + 1);
                for k in 0..10 {
                    m.astring(&mut v[S_DIST + 24 * k..S_DIST + 24 * (k + 1)], 24, 24);
                }
                m.data(&mut v[S_DATA..S_DATA + 50]);
            }
            _ => {} // HISTORY: an empty ring slot
        }
    }
}

impl PreparedTpcc {
    /// The customer (0-based) of district (w, d) with last name `name` at position n/2
    /// rounded up among those sorted by C_FIRST (Clause 2.5.2.2). Last names never change,
    /// so the index is built once per district from the store and needs no maintenance.
    fn by_name(
        &self,
        ix: &mut OrderedIndex,
        read: &dyn Fn(Key) -> Option<Vec<u8>>,
        w: u64,
        d: u64,
        name: u64,
    ) -> Option<u64> {
        let dist = [&[IX_NAME][..], &(w as u32).to_be_bytes(), &[d as u8]].concat();
        if !ix.marks.contains_key(&dist) {
            for c in 0..self.customers {
                let r = read(self.customer(w, d, c)).unwrap_or_default();
                let last = r.get(C_LAST..C_LAST + 16).unwrap_or(&[0; 16]);
                let n = name_number(last).unwrap_or(u16::MAX as u64) as u16;
                let first = r.get(C_FIRST..C_FIRST + 16).unwrap_or(&[0; 16]);
                let k = [&dist[..], &n.to_be_bytes(), first, &(c as u16).to_be_bytes()].concat();
                ix.entries.insert(k, c);
            }
            ix.marks.insert(dist.clone(), 1);
        }
        let pre = [&dist[..], &(name as u16).to_be_bytes()].concat();
        let found: Vec<u64> = ix.prefixed(&pre).map(|(_, &c)| c).collect();
        found.get(found.len().saturating_sub(1) / 2).copied()
    }

    /// Catches district (w, d)'s customer -> order index up with the orders the store holds,
    /// in id order, stopping at the first one not yet written (an insert whose write-back is
    /// still in flight). Returns the first order id not indexed: the index is exact for every
    /// order below it. Entries are `(customer, order) -> order << 8 | lines`.
    fn catch_up_orders(&self, ix: &mut OrderedIndex, read: &dyn Fn(Key) -> Option<Vec<u8>>, w: u64, d: u64) -> u64 {
        let key = [&[IX_ORDER][..], &(w as u32).to_be_bytes(), &[d as u8]].concat();
        let mut o = ix.marks.get(&key).copied().unwrap_or(1);
        let next = read(self.district(w, d)).map_or(1, |r| get(&r, D_NEXT_O_ID, 4)).min(self.slots);
        while o < next {
            let Some(r) = read(self.order(w, d, o)) else { break };
            // O_ID and O_C_ID share an aligned word: a matching id comes with its customer.
            if get(&r, O_ID, 4) != o {
                break;
            }
            let c = get(&r, O_C_ID, 2).saturating_sub(1);
            let k = [&key[..], &(c as u16).to_be_bytes(), &(o as u32).to_be_bytes()].concat();
            ix.entries.insert(k, o << 8 | get(&r, O_OL_CNT, 1));
            o += 1;
        }
        ix.marks.insert(key, o);
        o
    }

    /// New-order, or the piece of it running the template operations in `ops` (bit k:
    /// operation k of [`run_templates`]'s NEW): 0 W_TAX, 1 district, 2 C_DISCOUNT, 3 items,
    /// 4 stocks, 5 order, 6 new-order, 7 order lines.
    fn exec_new_order(&self, spec: &TxnSpec, reads: &[&[u8]], old: &[&[u8]], ops: u64) -> Option<Vec<Vec<u8>>> {
        let has = |op: u32| ops >> op & 1 == 1;
        let mut p = Params(&spec.params, 0);
        let (w, d, c, invalid, n) = (p.u(), p.u(), p.u(), p.u() == 1, p.u() as usize);
        let lines: Vec<(u64, u64, u64)> = (0..n).map(|_| (p.u(), p.u(), p.u())).collect();
        let o = p.u();
        if invalid && has(3) {
            return None; // Clause 2.4.2.3: an unused item number rolls the transaction back
        }
        let mut r = Cursor(reads, 0);
        let wh = has(0).then(|| r.next());
        let cust = has(2).then(|| r.next());
        // A piece without the items takes their prices as the items piece read them: ITEM
        // is constant, so the same values.
        let node = self.node_of(w);
        let prices: Vec<i64> = if has(3) {
            (0..n).map(|_| get(r.next(), I_PRICE, 2) as i64).collect()
        } else {
            lines.iter().map(|&(i, _, _)| self.constant(self.item(node, i), I_PRICE, 2) as i64).collect()
        };
        let mut wr = Cursor(old, 0);
        let stocks: Vec<&[u8]> = if has(4) { (0..n).map(|_| wr.next()).collect() } else { Vec::new() };
        let ord = has(5).then(|| wr.next());
        let no = has(6).then(|| wr.next());
        let ols: Vec<&[u8]> = if has(7) { (0..n).map(|_| wr.next()).collect() } else { Vec::new() };
        let dist = has(1).then(|| wr.next());
        // The lookup's order id must still be the district's next one, and its rows empty.
        if dist.is_some_and(|v| get(v, D_NEXT_O_ID, 4) != o)
            || ord.is_some_and(|v| get(v, O_ID, 4) != 0)
            || no.is_some_and(|v| v.get(NO_STATE) != Some(&NO_EMPTY))
            || ols.iter().any(|v| get(v, OL_O_ID, 4) != 0)
        {
            return None;
        }
        let mut out = Vec::with_capacity(old.len());
        let mut total = 0i64;
        let all_local = lines.iter().all(|l| l.1 == w);
        for (k, &(_, sw, q)) in lines.iter().enumerate() {
            total += q as i64 * prices[k];
            let Some(stock) = stocks.get(k) else { continue };
            let mut s = rec(STOCK, stock);
            let have = get(&s, S_QUANTITY, 2);
            put(&mut s, S_QUANTITY, 2, if have >= q + 10 { have - q } else { have + 91 - q });
            bump(&mut s, S_YTD, 4, q);
            bump(&mut s, S_ORDER_CNT, 2, 1);
            if sw != w {
                bump(&mut s, S_REMOTE_CNT, 2, 1);
            }
            out.push(s);
        }
        if let Some(ord) = ord {
            let mut ov = rec(ORDER, ord);
            put(&mut ov, O_ID, 4, o);
            put(&mut ov, O_C_ID, 2, c + 1);
            put(&mut ov, O_D_ID, 1, d + 1);
            put(&mut ov, O_CARRIER_ID, 1, 0);
            put(&mut ov, O_W_ID, 2, w + 1);
            put(&mut ov, O_OL_CNT, 1, n as u64);
            put(&mut ov, O_ALL_LOCAL, 1, all_local as u64);
            put(&mut ov, O_ENTRY_D, 4, DATE as u64);
            out.push(ov);
        }
        if let Some(no) = no {
            let mut nv = rec(NEW_ORDER, no);
            put(&mut nv, NO_O_ID, 4, o);
            put(&mut nv, NO_W_ID, 2, w + 1);
            put(&mut nv, NO_D_ID, 1, d + 1);
            nv[NO_STATE] = NO_PRESENT;
            out.push(nv);
        }
        for (k, &(i, sw, q)) in lines.iter().enumerate() {
            let Some(ol) = ols.get(k) else { break };
            let mut l = rec(ORDER_LINE, ol);
            put(&mut l, OL_O_ID, 4, o);
            put(&mut l, OL_I_ID, 4, i);
            put(&mut l, OL_D_ID, 1, d + 1);
            put(&mut l, OL_NUMBER, 1, k as u64 + 1);
            put(&mut l, OL_W_ID, 2, w + 1);
            put(&mut l, OL_SUPPLY_W_ID, 2, sw + 1);
            put(&mut l, OL_QUANTITY, 1, q);
            put(&mut l, OL_AMOUNT, 4, (q as i64 * prices[k]) as u64);
            put(&mut l, OL_DELIVERY_D, 4, 0);
            // S_DIST_xx of the district: STOCK's, a field no transaction writes.
            let dist_info = match stocks.get(k) {
                Some(s) => s[S_DIST + 24 * d as usize..S_DIST + 24 * (d as usize + 1)].to_vec(),
                None => {
                    self.initial(self.stock(sw, i))[S_DIST + 24 * d as usize..S_DIST + 24 * (d as usize + 1)].to_vec()
                }
            };
            l[OL_DIST_INFO..OL_DIST_INFO + 24].copy_from_slice(&dist_info);
            out.push(l);
        }
        if let Some(dist) = dist {
            let mut dv = rec(DISTRICT, dist);
            put(&mut dv, D_NEXT_O_ID, 4, o + 1);
            // The total the terminal would display (Clause 2.4.2.2); not stored.
            if let (Some(wh), Some(cust)) = (wh, cust) {
                let tax = 10_000 + get(wh, W_TAX, 2) as i64 + get(&dv, D_TAX, 2) as i64;
                let _total = total * (10_000 - get(cust, C_DISCOUNT, 2) as i64) / 10_000 * tax / 10_000;
            }
            out.push(dv);
        }
        Some(out)
    }

    /// Payment, or the piece of it running the template operations in `ops` (bit k of
    /// [`run_templates`]'s PAY): 0 warehouse, 1 district, 2 customer, 3 history.
    fn exec_payment(&self, spec: &TxnSpec, old: &[&[u8]], ops: u64) -> Option<Vec<Vec<u8>>> {
        let has = |op: u32| ops >> op & 1 == 1;
        let mut p = Params(&spec.params, 0);
        let (w, d, cw, cd, by_name, x, h, _) = (p.u(), p.u(), p.u(), p.u(), p.u() == 1, p.u(), p.next(), p.u());
        let c = if by_name { p.u() } else { x };
        let mut wr = Cursor(old, 0);
        let mut wv = has(0).then(|| rec(WAREHOUSE, wr.next()));
        let mut dv = has(1).then(|| rec(DISTRICT, wr.next()));
        let mut cv = has(2).then(|| rec(CUSTOMER, wr.next()));
        let mut hv = has(3).then(|| rec(HISTORY, wr.next()));
        if let Some(wv) = &mut wv {
            bumpi(wv, W_YTD, h);
        }
        if let Some(dv) = &mut dv {
            bumpi(dv, D_YTD, h);
        }
        if let Some(cv) = &mut cv {
            bumpi(cv, C_BALANCE, -h);
            bumpi(cv, C_YTD_PAYMENT, h);
            bump(cv, C_PAYMENT_CNT, 2, 1);
            if &cv[C_CREDIT..C_CREDIT + 2] == b"BC" {
                // Clause 2.5.2.2: the payment goes in front of C_DATA, kept at 500 characters.
                let note = format!("{} {} {} {} {} {}.{:02}|", c + 1, cd + 1, cw + 1, d + 1, w + 1, h / 100, h % 100);
                let data = [note.as_bytes(), &cv[C_DATA..C_DATA + 500]].concat();
                cv[C_DATA..C_DATA + 500].copy_from_slice(&data[..500]);
            }
        }
        if let Some(hv) = &mut hv {
            hv.fill(0);
            put(hv, H_AMOUNT, 4, h as u64);
            put(hv, H_DATE, 4, DATE as u64);
            put(hv, H_C_ID, 2, c + 1);
            put(hv, H_C_D_ID, 1, cd + 1);
            put(hv, H_C_W_ID, 2, cw + 1);
            put(hv, H_D_ID, 1, d + 1);
            put(hv, H_W_ID, 2, w + 1);
            // W_NAME and D_NAME never change: a piece without the warehouse or district
            // takes them as loaded.
            let (wn, dn) = (self.initial(self.warehouse(w)), self.initial(self.district(w, d)));
            let name = |v: &[u8], at: usize| v[at..at + 10].iter().copied().filter(|&b| b != 0).collect::<Vec<u8>>();
            let data = [
                name(wv.as_deref().unwrap_or(&wn), W_NAME),
                b"    ".to_vec(),
                name(dv.as_deref().unwrap_or(&dn), D_NAME),
            ]
            .concat();
            hv[H_DATA..H_DATA + data.len().min(24)].copy_from_slice(&data[..data.len().min(24)]);
        }
        Some([wv, dv, cv, hv].into_iter().flatten().collect())
    }

    /// Order-status; `Err` when its order was delivered with the customer's balance still
    /// waiting for publication (DrTM Sec. 4.4: a read-only transaction waits for the pieces
    /// of conflicting transactions to finish, else it would see a delivery half done).
    fn exec_order_status(&self, spec: &TxnSpec, reads: &[&[u8]]) -> Result<Option<Vec<Vec<u8>>>, &'static str> {
        let mut p = Params(&spec.params, 4);
        let (c, o, cnt, mark) = (p.u(), p.u(), p.u(), p.u());
        let mut r = Cursor(reads, 0);
        let cust = r.next();
        let _balance = geti(cust, C_BALANCE);
        if o > 0 && o < mark {
            let ord = r.next();
            if get(ord, O_ID, 4) != o || get(ord, O_C_ID, 2) != c + 1 || get(ord, O_OL_CNT, 1) != cnt {
                return Ok(None);
            }
            if get(ord, O_UNPUBLISHED, 1) == 1 {
                return Err(UNPUBLISHED);
            }
            for _ in 0..cnt {
                if get(r.next(), OL_O_ID, 4) != o {
                    return Ok(None);
                }
            }
        }
        // No order at or after the lookup's mark: nothing newer than `o` exists.
        if get(r.next(), O_ID, 4) != 0 {
            return Ok(None);
        }
        Ok(Some(Vec::new()))
    }

    /// Delivery, or one of its pieces (`ops`, bits of [`run_templates`]'s DLY): 0-2 the
    /// new-order, order and order-line updates, 3 the customer balance. Chopped with the
    /// balance deferred (Sec. 4.2), the first piece marks each order unpublished and the
    /// deferred piece re-reads the lines' OL_AMOUNT (fixed since the order's insert: the
    /// value handed on) and clears the mark with the balance update.
    fn exec_delivery(&self, spec: &TxnSpec, reads: &[&[u8]], old: &[&[u8]], ops: u64) -> Option<Vec<Vec<u8>>> {
        let has = |op: u32| ops >> op & 1 == 1;
        let (update, balance) = (has(0), has(3));
        let mut p = Params(&spec.params, 0);
        let (_w, carrier) = (p.u(), p.u());
        let mut r = Cursor(reads, 0);
        let mut wr = Cursor(old, 0);
        let mut out = Vec::with_capacity(old.len());
        for _ in 0..DISTRICTS {
            let (o, c, cnt, n) = (p.u(), p.u(), p.u(), p.u());
            let delivered = |v: &[u8], o: u64| v.get(NO_STATE) == Some(&NO_DELIVERED) && get(v, NO_O_ID, 4) == o;
            if o > 0 && !update {
                // The deferred piece: the order's lines as read, its order and customer.
                let ols: Vec<&[u8]> = (0..cnt).map(|_| r.next()).collect();
                let (ord, cust) = (wr.next(), wr.next());
                if get(ord, O_ID, 4) != o
                    || get(ord, O_UNPUBLISHED, 1) != 1
                    || ols.iter().any(|v| get(v, OL_O_ID, 4) != o)
                {
                    return None;
                }
                let mut ov = rec(ORDER, ord);
                put(&mut ov, O_UNPUBLISHED, 1, 0);
                out.push(ov);
                let sum: i64 = ols.iter().map(|v| get32i(v, OL_AMOUNT)).sum();
                let mut cv = rec(CUSTOMER, cust);
                bumpi(&mut cv, C_BALANCE, sum);
                bump(&mut cv, C_DELIVERY_CNT, 2, 1);
                out.push(cv);
            } else if o > 0 {
                let (no, ord) = (wr.next(), wr.next());
                let ols: Vec<&[u8]> = (0..cnt).map(|_| wr.next()).collect();
                let cust = if balance { Some(wr.next()) } else { None };
                // Oldest undelivered: this one is present and its predecessor delivered
                // (deliveries go in order, so all before it are).
                let pred_ok = o == 1 || delivered(r.next(), o - 1);
                if !pred_ok
                    || no.get(NO_STATE) != Some(&NO_PRESENT)
                    || get(no, NO_O_ID, 4) != o
                    || get(ord, O_ID, 4) != o
                    || get(ord, O_C_ID, 2) != c + 1
                    || get(ord, O_OL_CNT, 1) != cnt
                    || ols.iter().any(|v| get(v, OL_O_ID, 4) != o)
                {
                    return None;
                }
                let mut nv = rec(NEW_ORDER, no);
                nv[NO_STATE] = NO_DELIVERED;
                out.push(nv);
                let mut ov = rec(ORDER, ord);
                put(&mut ov, O_CARRIER_ID, 1, carrier);
                put(&mut ov, O_UNPUBLISHED, 1, !balance as u64);
                out.push(ov);
                let mut sum = 0i64;
                for v in ols {
                    let mut l = rec(ORDER_LINE, v);
                    sum += get32i(&l, OL_AMOUNT);
                    put(&mut l, OL_DELIVERY_D, 4, DATE as u64);
                    out.push(l);
                }
                if let Some(cust) = cust {
                    let mut cv = rec(CUSTOMER, cust);
                    bumpi(&mut cv, C_BALANCE, sum);
                    bump(&mut cv, C_DELIVERY_CNT, 2, 1);
                    out.push(cv);
                }
            } else if n > 0 && update {
                // No undelivered order (Clause 2.7.4.2: the district is skipped): the last
                // order is delivered and no order exists after it.
                if (n > 1 && !delivered(r.next(), n - 1)) || r.next().get(NO_STATE) != Some(&NO_EMPTY) {
                    return None;
                }
            }
        }
        Some(out)
    }

    /// Delivery's pieces when its balance is deferred (`N+O+L | C.balance`): the first with
    /// the whole read set and every write but the customers'; the deferred one reading the
    /// delivered lines and writing each order (its mark) and customer.
    fn chop_delivery(&self, spec: &TxnSpec) -> Vec<TxnSpec> {
        if self.pieces.get(2).is_none_or(|p| p.len() < 2) {
            return Vec::new();
        }
        let piece = |reads: Vec<Key>, writes: Vec<Key>, mask: u64| TxnSpec {
            kind: PIECE_KINDS[2],
            reads,
            writes,
            params: [spec.params.clone(), vec![mask as i64]].concat(),
            compute_ns: spec.compute_ns,
        };
        let first: Vec<Key> = spec.writes.iter().copied().filter(|k| k.table != CUSTOMER).collect();
        let lines: Vec<Key> = spec.writes.iter().copied().filter(|k| k.table == ORDER_LINE).collect();
        let rest: Vec<Key> = spec.writes.iter().copied().filter(|k| matches!(k.table, ORDER | CUSTOMER)).collect();
        if rest.is_empty() {
            // No district had an order to deliver: nothing to defer.
            return Vec::new();
        }
        vec![piece(spec.reads.clone(), first, 0b111), piece(lines, rest, DLY_BALANCE)]
    }

    fn exec_stock_level(&self, spec: &TxnSpec, reads: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
        let mut p = Params(&spec.params, 3);
        let threshold = spec.params.get(2).copied().unwrap_or(0) as u64;
        let (n, lo) = (p.u(), p.u());
        let cnts: Vec<u64> = (lo..n).map(|_| p.u()).collect();
        let distinct = p.u() as usize;
        let mut r = Cursor(reads, 0);
        if get(r.next(), D_NEXT_O_ID, 4) != n {
            return None;
        }
        let mut items = Vec::new();
        for (k, o) in (lo..n).enumerate() {
            for _ in 0..cnts[k] {
                let ol = r.next();
                if get(ol, OL_O_ID, 4) != o {
                    return None;
                }
                items.push(get(ol, OL_I_ID, 4));
            }
            if cnts[k] < MAX_LINES && get(r.next(), OL_O_ID, 4) != 0 {
                return None; // the order has more lines than the lookup saw
            }
        }
        // The stock rows read are exactly those of the lines' items (sorted, distinct).
        items.sort_unstable();
        items.dedup();
        let stock: Vec<&[u8]> = (0..distinct).map(|_| r.next()).collect();
        if items.len() != distinct || stock.iter().zip(&items).any(|(s, &i)| get(s, S_I_ID, 4) != i) {
            return None;
        }
        let _low = stock.iter().filter(|s| get(s, S_QUANTITY, 2) < threshold).count();
        Some(Vec::new())
    }
}

/// The registry's entry (`crate::REGISTRY`).
pub static KIND: crate::Kind<Tpcc> = crate::Kind::new(
    "Tpcc",
    "TPC-C",
    "TPC-C: nine tables, five transactions, consistency conditions checked after every run",
);

impl crate::Params for Tpcc {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        Tpcc::validate(self)
    }
    fn build(&self, shape: crate::Shape) -> std::sync::Arc<dyn crate::Workload> {
        use std::sync::Arc;
        Arc::new(self.prepare(shape.nodes, shape.workers, shape.coroutines))
    }
}

/// TPC-C's read-write transactions as the chopping analysis sees them (DrTM Sec. 4,
/// `chopping`): each query or update of this workload's new-order, payment and delivery, on
/// its table, index searches left out (Sec. 4.3: they run before the pieces). Order-status
/// and stock-level are read-only and run without HTM or chopping (Sec. 4.4).
///
/// `optimized` adds what Sec. 4.1-4.2 allow: conflicts judged per group of fields (`W.ytd`,
/// `D.next_o_id`, ...: accesses to disjoint fields commute), reads of fields no transaction
/// writes (W_TAX, D_TAX, C_DISCOUNT) conflicting with nothing, payment's year-to-date
/// increments commuting with each other, delivery's customer balance published at an epoch
/// barrier (publish-subscribe, deferred), and inserts of fresh rows (new-order's rows under
/// its own order id, payment's HISTORY rows) commuting with each other. Without them
/// (`false`) it is the default analysis, per table.
pub fn chopping_templates(optimized: bool) -> Vec<crate::chopping::Template> {
    use crate::chopping::{Access, Op, Template};
    let op = |name, accesses| Op { name, accesses, user_abort: false };
    let (table, field) = (|t: &'static str, _f: &'static str| t, |_t: &'static str, f: &'static str| f);
    let at: &dyn Fn(&'static str, &'static str) -> &'static str = if optimized { &field } else { &table };
    let insert = |t| if optimized { Access::commuting(t, "insert") } else { Access::write(t) };
    let constant = |t, f| if optimized { Access::constant(f) } else { Access::read(t) };
    let ytd = |t, f| if optimized { Access::commuting(f, "ytd") } else { Access::write(t) };
    // The deferred piece also clears its order's unpublished mark and re-reads the lines'
    // amounts (fixed since the order's insert, before it could be delivered).
    let balance = match optimized {
        true => vec![Access::deferred("C.balance"), Access::deferred("O.unpublished"), Access::constant("L.amount")],
        false => vec![Access::write("C")],
    };
    vec![
        Template {
            name: "NEW",
            ops: vec![
                op("read warehouse tax", vec![constant("W", "W.tax")]),
                op(
                    "read district tax, bump next order id",
                    vec![constant("D", "D.tax"), Access::write(at("D", "D.next_o_id"))],
                ),
                op("read customer discount", vec![constant("C", "C.discount")]),
                // Clause 2.4.2.3: an unused item number rolls the transaction back.
                Op { name: "read items", accesses: vec![Access::read("I")], user_abort: true },
                op("update stocks", vec![Access::write("S")]),
                op("insert order", vec![insert("O")]),
                op("insert new-order", vec![insert("N")]),
                op("insert order lines", vec![insert("L")]),
            ],
        },
        Template {
            name: "PAY",
            ops: vec![
                op("warehouse year-to-date", vec![ytd("W", "W.ytd")]),
                op("district year-to-date", vec![ytd("D", "D.ytd")]),
                op(
                    "customer balance and data",
                    vec![Access::write(at("C", "C.balance")), Access::write(at("C", "C.data"))],
                ),
                op("insert history", vec![insert("H")]),
            ],
        },
        Template {
            name: "DLY",
            ops: vec![
                op("delete oldest new-order", vec![Access::write("N")]),
                op("set order carrier", vec![Access::write("O")]),
                op("date order lines, sum amounts", vec![Access::write("L")]),
                op("customer balance", balance),
            ],
        },
    ]
}

/// The templates a chopped run is checked by: [`chopping_templates`] plus the read-only
/// order-status and stock-level, whole (Sec. 4.4 runs them unchopped). Order-status reads
/// what delivery's first piece writes and the balance its deferred piece writes, which
/// breaks Sec. 4.2's premise: it waits out an order's unpublished mark instead
/// ([`run_chopping`] checks the premise without it).
pub fn run_templates(optimized: bool) -> Vec<crate::chopping::Template> {
    use crate::chopping::{Access, Op, Template};
    let op = |name, accesses| Op { name, accesses, user_abort: false };
    let f = |table: &'static str, field: &'static str| if optimized { field } else { table };
    let mut ts = chopping_templates(optimized);
    ts.push(Template {
        name: "OS",
        ops: vec![
            op("read customer balance", vec![Access::read(f("C", "C.balance"))]),
            op("read newest order", vec![Access::read("O")]),
            op("read its lines", vec![Access::read("L")]),
        ],
    });
    ts.push(Template {
        name: "SL",
        ops: vec![
            op("read next order id", vec![Access::read(f("D", "D.next_o_id"))]),
            op("read recent order lines", vec![Access::read("L")]),
            op("read their stocks", vec![Access::read("S")]),
        ],
    });
    ts
}

/// The chopping a run with `level` executes, per template of [`run_templates`]: the finest
/// without SC-cycles, the read-only templates whole; an error if it has an SC-cycle (a
/// run refuses it: its parents would not be serializable), breaks Sec. 4.2's premise among
/// the read-write transactions, or chops delivery otherwise than `N+O+L | deferred balance`
/// (what [`Workload::chop`] can run).
pub fn run_chopping(level: Chopping) -> Result<crate::chopping::Chopping, String> {
    use crate::chopping::{deferral_premise, describe, finest, sc_cycle};
    if level == Chopping::Off {
        return Ok(Vec::new());
    }
    let ts = run_templates(level == Chopping::Optimized);
    let mut chop = finest(&ts);
    for t in 3..ts.len() {
        chop[t] = vec![(0..ts[t].ops.len()).collect()];
    }
    if let Some((t, p, q)) = sc_cycle(&ts, &chop) {
        return Err(format!(
            "the chopping has an SC-cycle through pieces {} and {} of {}:\n{}",
            p + 1,
            q + 1,
            ts[t].name,
            describe(&ts, &chop)
        ));
    }
    if let Some((p, s)) = deferral_premise(&ts[..3], &chop[..3].to_vec()) {
        return Err(format!(
            "{}'s deferred update is joined to {} by conflicts alone (Sec. 4.2's premise)",
            ts[p].name, ts[s].name
        ));
    }
    let runnable = [vec![0, 1, 2], vec![3]];
    let deferred = |o: usize| ts[2].ops[o].accesses.iter().all(|a| a.deferred);
    if chop[2].len() > 1 && (chop[2] != runnable || !deferred(3)) {
        return Err(format!(
            "delivery would be chopped otherwise than N+O+L | deferred balance, which the workload cannot run:\n{}",
            describe(&ts, &chop)
        ));
    }
    Ok(chop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A-strings keep to their alphabet and length range, with every letter about as common
    /// as another (62 letters, 8 from each draw); n-strings likewise with 10 digits.
    #[test]
    fn strings_keep_their_alphabet_and_lengths_and_spread_letters_evenly() {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let (mut letters, mut digits, mut lengths) = ([0u64; 62], [0u64; 10], [0u64; 51]);
        for row in 0..40_000u64 {
            let mut m = Mix::new(STOCK, row, 0x7bcc);
            let mut s = [0u8; 50];
            m.astring(&mut s, 26, 50);
            let n = s.iter().position(|&b| b == 0).unwrap_or(50);
            assert!((26..=50).contains(&n), "length {n}");
            lengths[n] += 1;
            for &b in &s[..n] {
                letters[CHARS.iter().position(|&c| c == b).expect("a letter of the alphabet")] += 1;
            }
            let mut z = [0u8; 16];
            m.nstring(&mut z);
            for &b in &z {
                assert!(b.is_ascii_digit());
                digits[(b - b'0') as usize] += 1;
            }
        }
        let even = |counts: &[u64]| {
            let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
            // Five standard deviations of a count around its mean.
            counts.iter().all(|&c| (c as f64 - mean).abs() < 5.0 * mean.sqrt())
        };
        assert!(even(&letters), "{letters:?}");
        assert!(even(&digits), "{digits:?}");
        assert!(even(&lengths[26..]), "{:?}", &lengths[26..]);
    }

    /// A record made in place (loading) is the record made whole (checking), and the
    /// conserved part results sum is known without making it.
    #[test]
    fn a_record_made_in_place_is_the_one_made_whole_and_its_conserved_part_is_known() {
        let w = Tpcc { items: 1000, customers_per_district: 300, ..Tpcc::default() }.prepare(2, 2, 2);
        for table in w.tables() {
            for row in (0..table.rows_per_node * 2).step_by(7).take(2000) {
                let key = Key { table: table.id, row };
                let whole = w.initial(key);
                let mut in_place = vec![0u8; table.record_bytes as usize];
                w.initial_into(key, &mut in_place);
                assert_eq!(in_place, whole, "{key:?}");
                assert_eq!(w.initial_conserved(key), w.conserved(key, &whole), "{key:?}");
                let mut short = vec![0u8; 5];
                w.initial_into(key, &mut short);
                assert_eq!(short, whole[..5], "{key:?}");
            }
        }
    }

    /// A record made for the check leaves out strings only: every byte it writes is the
    /// loaded record's, and the check reads the same from it. Against a store of records
    /// made whole, after a serial run of every transaction type, the check finds the same.
    #[test]
    fn a_record_made_for_the_check_leaves_out_only_what_the_check_never_reads() {
        // 3,000 customers a district: past the 1,000th, C_LAST is drawn after C_FIRST.
        let w = Tpcc { items: 1000, customers_per_district: 3000, ..Tpcc::default() }.prepare(2, 2, 2);
        let mut left_out = 0;
        for table in w.tables() {
            for row in (0..table.rows_per_node * 2).step_by(7).take(2000) {
                let key = Key { table: table.id, row };
                let whole = w.initial(key);
                let mut checked = vec![0u8; table.record_bytes as usize];
                w.initial_checked_into(key, &mut checked);
                for (i, (&c, &x)) in checked.iter().zip(&whole).enumerate() {
                    assert!(c == x || c == 0, "{key:?} byte {i}: {c} made for the check, {x} loaded");
                }
                left_out += (checked != whole) as usize;
            }
        }
        assert!(left_out > 1000, "strings left out of {left_out} records");
        let mut store = crate::SerialStore::new();
        let mut r = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(5);
        for i in 0..3000 {
            store.run(&w, &w.generate(&mut r, (i % 2) as u16, 2));
        }
        for node in 0..2 {
            let check = |strings: bool| {
                let read = |k: Key, out: &mut Vec<u8>| {
                    if w.home(k, 2) != node {
                        return false;
                    }
                    match store.values.get(&k) {
                        Some(v) => *out = v.clone(),
                        None if strings => *out = w.initial(k),
                        None => {
                            out.resize(ROW_BYTES[k.table as usize] as usize, 0);
                            out.fill(0);
                            w.initial_checked_into(k, out);
                        }
                    }
                    true
                };
                w.check_consistency(node, 2, &read)
            };
            let (a, b) = (check(true), check(false));
            assert!(a.iter().all(|c| c.checked > 0 && c.violations == 0), "{a:?}");
            assert_eq!(a, b, "node {node}");
        }
    }

    /// A node's records from a serial run's store; `untouched` (when asked to know) is "no
    /// record of these rows was written".
    struct SerialRecords<'a> {
        w: &'a PreparedTpcc,
        store: &'a crate::SerialStore,
        node: u16,
        knows_untouched: bool,
        reads: std::cell::Cell<u64>,
    }

    impl crate::Records for SerialRecords<'_> {
        fn read(&self, k: Key, out: &mut Vec<u8>) -> bool {
            if self.w.home(k, 2) != self.node {
                return false;
            }
            self.reads.set(self.reads.get() + 1);
            *out = self.store.values.get(&k).cloned().unwrap_or_else(|| self.w.initial(k));
            true
        }
        fn untouched(&self, table: u16, rows: std::ops::Range<u64>) -> bool {
            self.knows_untouched && rows.clone().all(|row| !self.store.values.contains_key(&Key { table, row }))
        }
    }

    /// The check leaves out a district's empty slots that nothing wrote (past its next order)
    /// and finds what reading every record finds; a slot written there is read, and an order
    /// line in it that no order counts is a violation.
    #[test]
    fn the_check_skips_only_empty_slots_nothing_wrote() {
        let w =
            Tpcc { items: 1000, customers_per_district: 300, order_headroom: 300, ..Tpcc::default() }.prepare(2, 2, 2);
        let mut store = crate::SerialStore::new();
        let mut r = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(9);
        for i in 0..400 {
            store.run(&w, &w.generate(&mut r, (i % 2) as u16, 2));
        }
        fn records<'a>(
            w: &'a PreparedTpcc,
            store: &'a crate::SerialStore,
            node: u16,
            knows_untouched: bool,
        ) -> SerialRecords<'a> {
            SerialRecords { w, store, node, knows_untouched, reads: Default::default() }
        }
        for node in 0..2 {
            let (all, skipping) = (records(&w, &store, node, false), records(&w, &store, node, true));
            let (a, b) = (w.check_consistency(node, 2, &all), w.check_consistency(node, 2, &skipping));
            assert!(a.iter().all(|c| c.checked > 0 && c.violations == 0), "{a:?}");
            assert_eq!(a, b, "node {node}");
            assert!(
                skipping.reads.get() * 3 < all.reads.get() * 2,
                "node {node}: {} reads skipping, {} reading all",
                skipping.reads.get(),
                all.reads.get()
            );
        }
        // An order line in the district's last slot, far past its next order.
        let stray = w.order_line(0, 0, w.slots, 1);
        let mut line = w.initial(stray);
        put(&mut line, OL_O_ID, 4, w.slots);
        store.values.insert(stray, line);
        let c = w.check_consistency(0, 2, &records(&w, &store, 0, true));
        assert_eq!(c[3].violations, 1, "{:?}", c[3]);
    }
}
