//! The TPC-E subset DrTM+H runs (Sec. 5.5): customer-position, TPC-E's most frequent
//! transaction and read-only, plus trade-order (read-write) and market-feed (writes the prices
//! customer-position reads, so read-only transactions meet conflicts).
//!
//! Tables (fixed-size records, every row loaded up front; the store has no inserts):
//!
//! | table | rows per node | record | fields (8 B each, little-endian) |
//! | --- | --- | --- | --- |
//! | CUSTOMER | `customers_per_node` | 64 B | tier 1..=3, status, accounts, id, 4 x filler |
//! | CUSTOMER_ACCOUNT | x `accounts_per_customer` | 32 B | balance (cents), broker, customer, tax status |
//! | HOLDING_SUMMARY | x `holdings_per_account` | 16 B | quantity, security |
//! | SECURITY | `securities_per_node` | 32 B | company, exchange, shares outstanding, id |
//! | LAST_TRADE | `securities_per_node` | 32 B | price (cents), open price, volume, sequence |
//! | BROKER | `customers_per_node / 100` | 16 B | trades, commission total (cents) |
//!
//! A customer's accounts, and an account's holding summaries, are consecutive rows on the
//! customer's node. Holding slot j of account a holds a security drawn deterministically from
//! (a, j) (distinct within the account), so the read set is known before execution (RCC Sec.
//! 3.2); securities are spread over the whole cluster, so customer-position fetches most
//! LAST_TRADE rows from other nodes (DrTM+H: "asset prices fetched in a distributed way").
//!
//! Invariant (one conserved total): cash balances + holdings valued at each security's book
//! price (its initial price) + broker commissions + broker trade counts + LAST_TRADE volumes.
//! A trade-order at price p moves q x p between cash and the market: `external_delta` reports
//! q x (book - p) (buy) or q x (p - book) (sell), plus 1 for the broker's trade count; a
//! market-feed reports the volume it adds. A lost update to any of these rows breaks it.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{get_i64, Consistency, Executed, Key, Table, TxnSpec, Workload};

pub const CUSTOMER: u16 = 0;
pub const CUSTOMER_ACCOUNT: u16 = 1;
pub const HOLDING_SUMMARY: u16 = 2;
pub const SECURITY: u16 = 3;
pub const LAST_TRADE: u16 = 4;
pub const BROKER: u16 = 5;

/// TPC-E: one broker per 100 customers.
pub const CUSTOMERS_PER_BROKER: u64 = 100;
/// TPC-E's trade quantities (EGen draws from these).
pub const TRADE_QTY: [i64; 4] = [100, 200, 400, 800];
/// Commission per tier, basis points of the trade value (tier 1 pays most, as in TPC-E's
/// COMMISSION_RATE table, simplified to one rate per tier).
pub const COMMISSION_BP: [i64; 3] = [40, 30, 20];
/// Share of trade-orders that roll back on purpose (TPC-E: 1%).
pub const ROLLBACK_PERCENT: u32 = 1;
/// Most holding summaries per account: keeps a customer-position's read set (2 x 10 x 100
/// records at most) within what a coordinator's scratch is sized for.
pub const MAX_HOLDINGS: u32 = 100;

pub const KINDS: [&str; 3] = ["customer-position", "trade-order", "market-feed"];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tpce {
    /// Customers per node (DrTM+H: 5,000 per partition).
    pub customers_per_node: u64,
    /// Accounts of every customer (TPC-E: 1..=10 by tier, 5 on average).
    pub accounts_per_customer: u32,
    /// HOLDING_SUMMARY rows of every account (TPC-E: about 10 on average).
    pub holdings_per_account: u32,
    /// SECURITY and LAST_TRADE rows per node (TPC-E: 685 per 1,000 customers).
    pub securities_per_node: u64,
    /// Share of held securities that live on another node than the account; `None`: uniform
    /// over the cluster, so (nodes - 1) / nodes of them (TPC-E, DrTM+H).
    pub remote_fraction: Option<f64>,
    /// Whether the customer lives on the coordinator's node (DrTM+H runs customer-position on
    /// the customer's partition); false: anywhere.
    pub locality: bool,
    /// Mix in percent: customer-position, trade-order, market-feed.
    pub mix: [u32; 3],
    /// Securities whose LAST_TRADE one market-feed updates (TPC-E's ticker batch: 20).
    pub feed_batch: u32,
}

impl Default for Tpce {
    fn default() -> Self {
        Tpce {
            customers_per_node: 5_000,
            accounts_per_customer: 5,
            holdings_per_account: 10,
            securities_per_node: 3_425,
            remote_fraction: None,
            locality: true,
            mix: [80, 19, 1],
            feed_batch: 20,
        }
    }
}

/// SplitMix64: the deterministic hash behind every drawn attribute (same on every platform).
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn hash(salt: u64, x: u64) -> u64 {
    mix64(mix64(salt) ^ x)
}

/// A uniform draw in [0, 1) from a hash, platform-independent.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn words(fields: &[i64], bytes: usize) -> Vec<u8> {
    let mut v = vec![0u8; bytes];
    for (i, f) in fields.iter().enumerate() {
        v[i * 8..i * 8 + 8].copy_from_slice(&f.to_le_bytes());
    }
    v
}

fn field(v: &[u8], i: usize) -> i64 {
    get_i64(&v[i * 8..])
}

fn set_field(v: &mut [u8], i: usize, x: i64) {
    v[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
}

/// Book price of a security in cents: its initial LAST_TRADE price ($20.00..=$30.00, TPC-E's
/// initial price range).
pub fn book_price(security: u64) -> i64 {
    2_000 + (hash(1, security) % 1_001) as i64
}

impl Tpce {
    /// Checks parameters; returns the field and the problem.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.customers_per_node == 0 || self.customers_per_node > 1 << 32 {
            return Err(("customers_per_node", format!("must be 1..=2^32, got {}", self.customers_per_node)));
        }
        if !(1..=10).contains(&self.accounts_per_customer) {
            return Err((
                "accounts_per_customer",
                format!("must be 1..=10 (TPC-E's range), got {}", self.accounts_per_customer),
            ));
        }
        if self.securities_per_node == 0 || self.securities_per_node > 1 << 32 {
            return Err(("securities_per_node", format!("must be 1..=2^32, got {}", self.securities_per_node)));
        }
        let most = (MAX_HOLDINGS as u64).min(self.securities_per_node);
        if self.holdings_per_account == 0 || self.holdings_per_account as u64 > most {
            return Err((
                "holdings_per_account",
                format!(
                    "must be 1..={most} (at most {MAX_HOLDINGS} and securities_per_node), got {}",
                    self.holdings_per_account
                ),
            ));
        }
        if let Some(p) = self.remote_fraction {
            if !(0.0..=1.0).contains(&p) {
                return Err(("remote_fraction", format!("must be a probability in [0, 1], got {p}")));
            }
        }
        let sum: u64 = self.mix.iter().map(|&m| u64::from(m)).sum();
        if sum != 100 {
            return Err(("mix", format!("percentages must add up to 100, got {sum}")));
        }
        if self.feed_batch == 0 || self.feed_batch as u64 > self.securities_per_node {
            return Err((
                "feed_batch",
                format!("must be 1..=securities_per_node ({}), got {}", self.securities_per_node, self.feed_batch),
            ));
        }
        Ok(())
    }

    /// Records a customer-position reads at most (a LAST_TRADE per held security).
    pub fn customer_position_records(&self) -> u64 {
        let holdings = self.accounts_per_customer as u64 * self.holdings_per_account as u64;
        1 + self.accounts_per_customer as u64 + 2 * holdings
    }

    /// A generator bound to a cluster of `nodes` (holdings are drawn over its securities).
    pub fn prepare(&self, nodes: u16) -> PreparedTpce {
        PreparedTpce { cfg: self.clone(), nodes: nodes.max(1) }
    }
}

fn record_bytes(table: u16) -> u32 {
    match table {
        CUSTOMER => 64,
        CUSTOMER_ACCOUNT => 32,
        HOLDING_SUMMARY => 16,
        SECURITY => 32,
        LAST_TRADE => 32,
        _ => 16,
    }
}

/// TPC-E bound to a cluster size.
#[derive(Clone, Debug)]
pub struct PreparedTpce {
    pub cfg: Tpce,
    nodes: u16,
}

impl PreparedTpce {
    fn accounts_per_node(&self) -> u64 {
        self.cfg.customers_per_node * self.cfg.accounts_per_customer as u64
    }

    pub fn brokers_per_node(&self) -> u64 {
        (self.cfg.customers_per_node / CUSTOMERS_PER_BROKER).max(1)
    }

    /// The node an account (cluster-wide row) lives on.
    fn account_node(&self, account: u64) -> u64 {
        account / self.accounts_per_node()
    }

    /// The broker (cluster-wide row) of an account: on the account's node.
    pub fn broker_of(&self, account: u64) -> u64 {
        let per = self.brokers_per_node();
        self.account_node(account) * per + hash(2, account) % per
    }

    /// The securities (cluster-wide rows) held in an account's holding slots, distinct.
    pub fn holdings_of(&self, account: u64) -> Vec<u64> {
        let (per, nodes) = (self.cfg.securities_per_node, self.nodes as u64);
        let home = self.account_node(account) % nodes;
        let h = self.cfg.holdings_per_account as usize;
        let mut out: Vec<u64> = Vec::with_capacity(h);
        let mut k = 0u64;
        while out.len() < h {
            let x = hash(3, account.wrapping_mul(1 << 20).wrapping_add(k));
            k += 1;
            let s = match self.cfg.remote_fraction {
                None => x % (per * nodes),
                Some(p) => {
                    let node = if nodes < 2 || unit(x) >= p {
                        home
                    } else {
                        let r = mix64(x) % (nodes - 1);
                        if r >= home {
                            r + 1
                        } else {
                            r
                        }
                    };
                    node * per + mix64(x ^ 0x5555) % per
                }
            };
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    fn customer_on(&self, rng: &mut ChaCha8Rng, node: u16, nodes: u16) -> u64 {
        let n = if self.cfg.locality { node } else { rng.gen_range(0..nodes) };
        n as u64 * self.cfg.customers_per_node + rng.gen_range(0..self.cfg.customers_per_node)
    }

    fn customer_position(&self, c: u64) -> TxnSpec {
        let a0 = c * self.cfg.accounts_per_customer as u64;
        let h = self.cfg.holdings_per_account as u64;
        let accounts = a0..a0 + self.cfg.accounts_per_customer as u64;
        let mut reads = vec![Key { table: CUSTOMER, row: c }];
        reads.extend(accounts.clone().map(|row| Key { table: CUSTOMER_ACCOUNT, row }));
        reads.extend(accounts.clone().flat_map(|a| (a * h..a * h + h).map(|row| Key { table: HOLDING_SUMMARY, row })));
        // One LAST_TRADE read per distinct security (two accounts may hold the same one).
        let mut seen = Vec::new();
        for a in accounts {
            for s in self.holdings_of(a) {
                if !seen.contains(&s) {
                    seen.push(s);
                    reads.push(Key { table: LAST_TRADE, row: s });
                }
            }
        }
        TxnSpec { kind: KINDS[0], reads, writes: vec![], params: vec![], compute_ns: 0 }
    }

    fn trade_order(&self, rng: &mut ChaCha8Rng, c: u64) -> TxnSpec {
        let a = c * self.cfg.accounts_per_customer as u64 + rng.gen_range(0..self.cfg.accounts_per_customer as u64);
        let slot = rng.gen_range(0..self.cfg.holdings_per_account as u64);
        let s = self.holdings_of(a)[slot as usize];
        let buy = rng.gen_bool(0.5) as i64;
        let qty = TRADE_QTY[rng.gen_range(0..TRADE_QTY.len())];
        let rollback = (rng.gen_range(0..100u32) < ROLLBACK_PERCENT) as i64;
        TxnSpec {
            kind: KINDS[1],
            reads: vec![
                Key { table: CUSTOMER, row: c },
                Key { table: SECURITY, row: s },
                Key { table: LAST_TRADE, row: s },
            ],
            writes: vec![
                Key { table: CUSTOMER_ACCOUNT, row: a },
                Key { table: HOLDING_SUMMARY, row: a * self.cfg.holdings_per_account as u64 + slot },
                Key { table: BROKER, row: self.broker_of(a) },
            ],
            params: vec![buy, qty, rollback],
            compute_ns: 0,
        }
    }

    fn market_feed(&self, rng: &mut ChaCha8Rng, nodes: u16) -> TxnSpec {
        let total = self.cfg.securities_per_node * nodes as u64;
        let mut writes: Vec<Key> = Vec::new();
        let mut params = Vec::new();
        while writes.len() < self.cfg.feed_batch as usize {
            let k = Key { table: LAST_TRADE, row: rng.gen_range(0..total) };
            if writes.contains(&k) {
                continue;
            }
            writes.push(k);
            // Price move in cents, then traded quantity.
            params.push(rng.gen_range(-25..=25));
            params.push(TRADE_QTY[rng.gen_range(0..TRADE_QTY.len())]);
        }
        TxnSpec { kind: KINDS[2], reads: vec![], writes, params, compute_ns: 0 }
    }
}

impl Workload for PreparedTpce {
    fn name(&self) -> &'static str {
        "tpce"
    }

    fn tables(&self) -> Vec<Table> {
        let c = &self.cfg;
        let accounts = self.accounts_per_node();
        let t = |id: u16, name: &'static str, rows_per_node: u64| Table {
            id,
            name,
            record_bytes: record_bytes(id),
            rows_per_node,
        };
        vec![
            t(CUSTOMER, "customer", c.customers_per_node),
            t(CUSTOMER_ACCOUNT, "customer_account", accounts),
            t(HOLDING_SUMMARY, "holding_summary", accounts * c.holdings_per_account as u64),
            t(SECURITY, "security", c.securities_per_node),
            t(LAST_TRADE, "last_trade", c.securities_per_node),
            t(BROKER, "broker", self.brokers_per_node()),
        ]
    }

    fn initial(&self, key: Key) -> Vec<u8> {
        let r = key.row;
        let bytes = record_bytes(key.table) as usize;
        let a_per_c = self.cfg.accounts_per_customer as u64;
        match key.table {
            CUSTOMER => {
                let tier = 1 + (hash(4, r) % 3) as i64;
                words(&[tier, 0, a_per_c as i64, r as i64], bytes)
            }
            CUSTOMER_ACCOUNT => {
                // $10,000..=$50,000, TPC-E's initial CA_BAL range.
                let bal = 1_000_000 + (hash(5, r) % 4_000_001) as i64;
                words(&[bal, self.broker_of(r) as i64, (r / a_per_c) as i64, (hash(6, r) % 3) as i64], bytes)
            }
            HOLDING_SUMMARY => {
                let h = self.cfg.holdings_per_account as u64;
                let s = self.holdings_of(r / h)[(r % h) as usize];
                let qty = 100 * (1 + (hash(7, r) % 80) as i64);
                words(&[qty, s as i64], bytes)
            }
            SECURITY => {
                let outstanding = 4_000_000 + (hash(8, r) % 9_500_000_000) as i64;
                words(&[(r * 500 / 685) as i64, (hash(9, r) % 4) as i64, outstanding, r as i64], bytes)
            }
            LAST_TRADE => {
                let p = book_price(r);
                words(&[p, p, (hash(10, r) % 10_000) as i64, 0], bytes)
            }
            _ => words(&[0, 0], bytes),
        }
    }

    fn generate(&self, rng: &mut ChaCha8Rng, node: u16, nodes: u16) -> TxnSpec {
        let roll = rng.gen_range(0..100u32);
        let mut acc = 0;
        let kind = self.cfg.mix.iter().position(|&m| {
            acc += m;
            roll < acc
        });
        match kind.unwrap_or(2) {
            0 => {
                let c = self.customer_on(rng, node, nodes);
                self.customer_position(c)
            }
            1 => {
                let c = self.customer_on(rng, node, nodes);
                self.trade_order(rng, c)
            }
            _ => self.market_feed(rng, nodes),
        }
    }

    fn execute(&self, spec: &TxnSpec, read_values: &[&[u8]], old: &[&[u8]]) -> Executed {
        match spec.kind {
            "customer-position" => {
                // Frame 1: each account's cash plus its holdings at current prices.
                let a = self.cfg.accounts_per_customer as usize;
                let h = self.cfg.holdings_per_account as usize;
                let price = |s: i64| {
                    spec.reads[1 + a + a * h..]
                        .iter()
                        .position(|k| k.row == s as u64)
                        .map_or(0, |i| field(read_values[1 + a + a * h + i], 0))
                };
                let mut total = 0i64;
                for i in 0..a {
                    let mut assets = 0i64;
                    for hs in &read_values[1 + a + i * h..1 + a + (i + 1) * h] {
                        assets += field(hs, 0) * price(field(hs, 1));
                    }
                    total += field(read_values[1 + i], 0) + assets;
                }
                let _ = total;
                Executed::Commit { new_values: vec![], external_delta: 0 }
            }
            "trade-order" => {
                let (buy, qty, rollback) = (spec.params[0] == 1, spec.params[1], spec.params[2] == 1);
                let tier = field(read_values[0], 0).clamp(1, 3) as usize;
                let s = spec.reads[1].row;
                let p = field(read_values[2], 0);
                let (bal, held) = (field(old[0], 0), field(old[1], 0));
                let value = qty * p;
                let comm = value * COMMISSION_BP[tier - 1] / 10_000;
                // TPC-E rolls back 1% on purpose; a cash account cannot overdraw, nor sell
                // more than it holds (no short sales here).
                if rollback || (buy && bal < value + comm) || (!buy && held < qty) {
                    return Executed::UserAbort;
                }
                let (mut ca, mut hs, mut b) = (old[0].to_vec(), old[1].to_vec(), old[2].to_vec());
                let book = book_price(s);
                let delta = if buy {
                    set_field(&mut ca, 0, bal - value - comm);
                    set_field(&mut hs, 0, held + qty);
                    qty * (book - p)
                } else {
                    set_field(&mut ca, 0, bal + value - comm);
                    set_field(&mut hs, 0, held - qty);
                    qty * (p - book)
                };
                set_field(&mut b, 0, field(old[2], 0) + 1);
                set_field(&mut b, 1, field(old[2], 1) + comm);
                Executed::Commit { new_values: vec![ca, hs, b], external_delta: delta + 1 }
            }
            _ => {
                // Market-feed: a price move, the traded volume, the next sequence number.
                let mut new_values = Vec::with_capacity(old.len());
                let mut volume = 0;
                for (i, lt) in old.iter().enumerate() {
                    let (dp, qty) = (spec.params[2 * i], spec.params[2 * i + 1]);
                    let mut v = lt.to_vec();
                    set_field(&mut v, 0, (field(lt, 0) + dp).clamp(1_000, 5_000));
                    set_field(&mut v, 2, field(lt, 2) + qty);
                    set_field(&mut v, 3, field(lt, 3) + 1);
                    volume += qty;
                    new_values.push(v);
                }
                Executed::Commit { new_values, external_delta: volume }
            }
        }
    }

    fn conserved(&self, key: Key, value: &[u8]) -> i64 {
        match key.table {
            CUSTOMER_ACCOUNT => field(value, 0),
            HOLDING_SUMMARY => field(value, 0) * book_price(field(value, 1) as u64),
            LAST_TRADE => field(value, 2),
            BROKER => field(value, 0) + field(value, 1),
            _ => 0,
        }
    }

    fn max_accesses(&self) -> Vec<(u16, u32)> {
        let (a, h) = (self.cfg.accounts_per_customer, self.cfg.holdings_per_account);
        let m = &self.cfg.mix;
        let mut max = [0u32; 6];
        let per_kind: [&[(u16, u32)]; 3] = [
            &[(CUSTOMER, 1), (CUSTOMER_ACCOUNT, a), (HOLDING_SUMMARY, a * h), (LAST_TRADE, a * h)],
            &[(CUSTOMER, 1), (SECURITY, 1), (LAST_TRADE, 1), (CUSTOMER_ACCOUNT, 1), (HOLDING_SUMMARY, 1), (BROKER, 1)],
            &[(LAST_TRADE, self.cfg.feed_batch)],
        ];
        for (k, list) in per_kind.iter().enumerate() {
            if m[k] > 0 {
                for &(t, n) in list.iter() {
                    max[t as usize] = max[t as usize].max(n);
                }
            }
        }
        (0..6u16).map(|t| (t, max[t as usize])).filter(|&(_, n)| n > 0).collect()
    }

    /// Conditions every serializable run keeps (TPC-E's own consistency conditions need the
    /// TRADE and HOLDING tables this subset leaves out): cash accounts never overdraw and
    /// holdings never go short (trade-order checks both under its isolation, so lost updates
    /// or write skew break them), holding rows keep their security, prices stay in the
    /// market-feed's range and volumes only grow.
    fn check_consistency(&self, node: u16, _nodes: u16, read: crate::ReadInto) -> Vec<Consistency> {
        let mut c = [
            Consistency { name: "TPC-E: CA_BAL >= 0 (cash accounts never overdraw)".into(), ..Default::default() },
            Consistency { name: "TPC-E: HS_QTY >= 0 (no short sales)".into(), ..Default::default() },
            Consistency { name: "TPC-E: HS_S_ID is the holding slot's security".into(), ..Default::default() },
            Consistency {
                name: "TPC-E: LT_PRICE in [$10, $50], LT_VOL at least its initial volume".into(),
                ..Default::default()
            },
        ];
        let fail = |c: &mut Consistency, why: String| {
            c.violations += 1;
            c.first.get_or_insert(why);
        };
        let h = self.cfg.holdings_per_account as u64;
        let per = self.accounts_per_node();
        let (mut ca, mut hs, mut lt) = (Vec::new(), Vec::new(), Vec::new());
        for a in node as u64 * per..(node as u64 + 1) * per {
            if !read.read(Key { table: CUSTOMER_ACCOUNT, row: a }, &mut ca) {
                continue;
            }
            c[0].checked += 1;
            if field(&ca, 0) < 0 {
                fail(&mut c[0], format!("account {a}: CA_BAL = {} cents", field(&ca, 0)));
            }
            for (j, s) in self.holdings_of(a).into_iter().enumerate() {
                if !read.read(Key { table: HOLDING_SUMMARY, row: a * h + j as u64 }, &mut hs) {
                    continue;
                }
                c[1].checked += 1;
                c[2].checked += 1;
                if field(&hs, 0) < 0 {
                    fail(&mut c[1], format!("account {a} security {s}: HS_QTY = {}", field(&hs, 0)));
                }
                if field(&hs, 1) != s as i64 {
                    fail(&mut c[2], format!("account {a} slot {j}: HS_S_ID = {}, expected {s}", field(&hs, 1)));
                }
            }
        }
        let per = self.cfg.securities_per_node;
        for s in node as u64 * per..(node as u64 + 1) * per {
            let key = Key { table: LAST_TRADE, row: s };
            if !read.read(key, &mut lt) {
                continue;
            }
            c[3].checked += 1;
            let (p, vol, vol0) = (field(&lt, 0), field(&lt, 2), field(&self.initial(key), 2));
            if !(1_000..=5_000).contains(&p) || vol < vol0 {
                fail(&mut c[3], format!("security {s}: LT_PRICE = {p} cents, LT_VOL = {vol} (initially {vol0})"));
            }
        }
        c.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SerialStore;
    use rand::SeedableRng;

    fn rng(seed: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(seed)
    }

    fn small() -> Tpce {
        Tpce { customers_per_node: 300, securities_per_node: 200, ..Tpce::default() }
    }

    #[test]
    fn defaults_are_valid_and_fit_the_fetch_buffer() {
        let t = Tpce::default();
        assert_eq!(t.validate(), Ok(()));
        assert_eq!(t.customer_position_records(), 106);
        assert_eq!(Tpce { accounts_per_customer: 10, holdings_per_account: 100, ..Tpce::default() }.validate(), Ok(()));
        let big = Tpce { holdings_per_account: 101, ..Tpce::default() };
        assert_eq!(big.validate().unwrap_err().0, "holdings_per_account");
        let few = Tpce { securities_per_node: 8, feed_batch: 8, ..Tpce::default() };
        assert_eq!(few.validate().unwrap_err().0, "holdings_per_account");
        assert_eq!(Tpce { mix: [80, 19, 2], ..Tpce::default() }.validate().unwrap_err().0, "mix");
        assert_eq!(Tpce { remote_fraction: Some(1.5), ..Tpce::default() }.validate().unwrap_err().0, "remote_fraction");
        assert_eq!(
            Tpce { accounts_per_customer: 11, ..Tpce::default() }.validate().unwrap_err().0,
            "accounts_per_customer"
        );
        assert_eq!(Tpce { feed_batch: 0, ..Tpce::default() }.validate().unwrap_err().0, "feed_batch");
    }

    #[test]
    fn generation_is_deterministic_and_follows_the_mix() {
        let w = small().prepare(4);
        let draw = |seed| {
            let mut r = rng(seed);
            (0..200).map(|_| w.generate(&mut r, 1, 4)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        let mut r = rng(5);
        let mut counts = [0u32; 3];
        let n = 50_000;
        for _ in 0..n {
            let t = w.generate(&mut r, 0, 4);
            counts[KINDS.iter().position(|k| *k == t.kind).unwrap()] += 1;
            assert_eq!(t.read_only(), t.kind == "customer-position");
        }
        for (c, pct) in counts.iter().zip(w.cfg.mix) {
            assert!((*c as f64 / n as f64 * 100.0 - pct as f64).abs() < 0.6, "{counts:?}");
        }
    }

    #[test]
    fn customer_position_reads_its_accounts_holdings_and_remote_prices() {
        let w = small().prepare(4);
        let mut r = rng(6);
        let (mut lt, mut remote) = (0, 0);
        for _ in 0..500 {
            let t = w.generate(&mut r, 2, 4);
            if t.kind != "customer-position" {
                continue;
            }
            assert!(t.writes.is_empty());
            let mut keys = t.reads.clone();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), t.reads.len(), "no key read twice");
            let c = t.reads[0];
            assert_eq!((c.table, w.home(c, 4)), (CUSTOMER, 2), "customer on the coordinator's node");
            for k in &t.reads[1..1 + 5 + 50] {
                assert_eq!(w.home(*k, 4), 2, "accounts and holdings live with the customer");
            }
            for k in t.reads.iter().filter(|k| k.table == LAST_TRADE) {
                lt += 1;
                remote += (w.home(*k, 4) != 2) as u32;
            }
            assert!(t.reads.len() <= 106);
        }
        let share = remote as f64 / lt as f64;
        assert!((share - 0.75).abs() < 0.05, "uniform securities: 3/4 remote on 4 nodes, got {share}");
        // The knob: no remote securities at all, or all of them.
        for p in [0.0, 1.0] {
            let w = Tpce { remote_fraction: Some(p), ..small() }.prepare(4);
            let t = w.customer_position(w.cfg.customers_per_node + 7);
            let remote = t.reads.iter().filter(|k| k.table == LAST_TRADE && w.home(**k, 4) != 1).count();
            let all = t.reads.iter().filter(|k| k.table == LAST_TRADE).count();
            assert_eq!(remote, if p == 0.0 { 0 } else { all });
        }
    }

    #[test]
    fn holding_rows_name_their_security() {
        let w = small().prepare(3);
        for a in [0u64, 17, 1499, 2 * 1500 + 3] {
            let hs = w.holdings_of(a);
            let mut d = hs.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), 10);
            for (j, s) in hs.iter().enumerate() {
                let v = w.initial(Key { table: HOLDING_SUMMARY, row: a * 10 + j as u64 });
                assert_eq!(field(&v, 1) as u64, *s);
                assert!(*s < 600);
            }
            assert_eq!(
                w.home(Key { table: BROKER, row: w.broker_of(a) }, 3),
                w.home(Key { table: CUSTOMER_ACCOUNT, row: a }, 3)
            );
        }
    }

    /// Serial runs keep the conserved total at its initial value plus the reported deltas;
    /// a planted lost update breaks it.
    #[test]
    fn conserved_total_holds_serially_and_catches_lost_updates() {
        let w = Tpce { mix: [40, 50, 10], ..small() }.prepare(2);
        let run = |lose: Option<usize>| {
            let mut store = SerialStore::new();
            let mut r = rng(11);
            let (mut delta, mut kinds) = (0i64, [0u32; 3]);
            for i in 0..20_000 {
                let t = w.generate(&mut r, (i % 2) as u16, 2);
                let before: Vec<Option<Vec<u8>>> = t.writes.iter().map(|k| store.values.get(k).cloned()).collect();
                if let Executed::Commit { external_delta, .. } = store.run(&w, &t) {
                    delta += external_delta;
                    kinds[KINDS.iter().position(|k| *k == t.kind).unwrap()] += 1;
                    // A planted bug: the transaction's writes are lost.
                    if lose.is_some_and(|k| i % k == 0) {
                        for (k, v) in t.writes.iter().zip(before) {
                            match v {
                                Some(v) => store.values.insert(*k, v),
                                None => store.values.remove(k),
                            };
                        }
                    }
                }
            }
            let sum: i64 = store.values.iter().map(|(k, v)| w.conserved(*k, v) - w.conserved(*k, &w.initial(*k))).sum();
            (sum, delta, kinds)
        };
        let (sum, delta, kinds) = run(None);
        assert_eq!(sum, delta);
        assert!(kinds.iter().all(|&k| k > 1_000), "{kinds:?}");
        let (sum, delta, _) = run(Some(7));
        assert_ne!(sum, delta, "a lost update must break the invariant");
    }

    /// The consistency conditions hold after a serial run and catch a planted overdraft,
    /// short sale and price out of range.
    #[test]
    fn consistency_conditions() {
        let w = Tpce { mix: [0, 90, 10], ..small() }.prepare(2);
        let mut store = SerialStore::new();
        let mut r = rng(13);
        for i in 0..5_000 {
            let t = w.generate(&mut r, (i % 2) as u16, 2);
            store.run(&w, &t);
        }
        let check = |store: &SerialStore, node| {
            let read = |k: Key, out: &mut Vec<u8>| {
                let mine = w.home(k, 2) == node;
                if mine {
                    *out = store.value(&w, k);
                }
                mine
            };
            w.check_consistency(node, 2, &read)
        };
        for node in 0..2 {
            let c = check(&store, node);
            assert_eq!(c.len(), 4);
            assert!(c.iter().all(|c| c.violations == 0 && c.checked > 0), "{c:?}");
        }
        let mut plant = |k: Key, i: usize, x: i64| {
            let mut v = store.value(&w, k);
            set_field(&mut v, i, x);
            store.values.insert(k, v);
        };
        plant(Key { table: CUSTOMER_ACCOUNT, row: 3 }, 0, -1);
        plant(Key { table: HOLDING_SUMMARY, row: 7 }, 0, -100);
        plant(Key { table: LAST_TRADE, row: 5 }, 0, 999);
        let c = check(&store, 0);
        assert_eq!(c.iter().map(|c| c.violations).collect::<Vec<_>>(), [1, 1, 0, 1], "{c:?}");
        assert!(c[0].first.as_deref().unwrap().contains("account 3"));
    }

    #[test]
    fn trade_order_logic() {
        let w = small().prepare(2);
        let mut r = rng(12);
        let t = loop {
            let t = w.generate(&mut r, 0, 2);
            if t.kind == "trade-order" && t.params[2] == 0 {
                break t;
            }
        };
        let mut store = SerialStore::new();
        let (a, hs, b) = (t.writes[0], t.writes[1], t.writes[2]);
        let bal0 = field(&w.initial(a), 0);
        let qty0 = field(&w.initial(hs), 0);
        let s = t.reads[2].row;
        assert_eq!(field(&w.initial(hs), 1) as u64, s, "trades a security the slot holds");
        assert!(matches!(store.run(&w, &t), Executed::Commit { .. }));
        let (buy, q, p) = (t.params[0] == 1, t.params[1], book_price(s));
        let tier = field(&w.initial(t.reads[0]), 0);
        let comm = q * p * COMMISSION_BP[tier as usize - 1] / 10_000;
        let bal = field(&store.values[&a], 0);
        let qty = field(&store.values[&hs], 0);
        if buy {
            assert_eq!((bal, qty), (bal0 - q * p - comm, qty0 + q));
        } else {
            assert_eq!((bal, qty), (bal0 + q * p - comm, qty0 - q));
        }
        assert_eq!((field(&store.values[&b], 0), field(&store.values[&b], 1)), (1, comm));
        // Rolled back on purpose: nothing written.
        let mut rb = t.clone();
        rb.params[2] = 1;
        assert_eq!(store.run(&w, &rb), Executed::UserAbort);
    }
}

/// The registry's entry (`crate::REGISTRY`).
pub static KIND: crate::Kind<Tpce> =
    crate::Kind::new("Tpce", "TPC-E", "the TPC-E subset DrTM+H runs: customer-position, trade-order, market-feed");

impl crate::Params for Tpce {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        Tpce::validate(self)
    }
    fn build(&self, shape: crate::Shape) -> std::sync::Arc<dyn crate::Workload> {
        use std::sync::Arc;
        Arc::new(self.prepare(shape.nodes))
    }
}
