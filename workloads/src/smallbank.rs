//! SmallBank (H-Store's banking benchmark) with the mix of DrTM Table VII.
//!
//! Tables SAVINGS and CHECKING hold one 8-byte balance per account. Transactions:
//!
//! | type | share | does |
//! | --- | --- | --- |
//! | SendPayment (SP) | 25% | checking[a] -= x, checking[b] += x; user abort if checking[a] < x |
//! | Amalgamate (AMG) | 15% | checking[b] += savings[a] + checking[a]; both of a's set to 0 |
//! | Balance (BLA) | 15% | reads savings[a] + checking[a] (read-only) |
//! | DepositChecking (DC) | 15% | checking[a] += x |
//! | WriteCheck (WC) | 15% | checking[a] -= x, or x + 1 if savings[a] + checking[a] < x |
//! | TransactSavings (TS) | 15% | savings[a] += x |
//!
//! Accounts: `accounts_per_node` per node; 90% of account choices fall in the first 4% of a
//! node's accounts (DrTM+H Sec. 5). Account a lives on the coordinator's node unless
//! `locality` is off (DrTM+H: no locality assumed); SP and AMG pick b on another node with
//! probability `distributed`. Amounts are 1..=100. The total balance changes only by DC, TS
//! (deposits) and WC (withdrawals): `external_delta` reports exactly that.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{get_i64, with_i64, Executed, Key, Table, TxnSpec, Workload};

pub const SAVINGS: u16 = 0;
pub const CHECKING: u16 = 1;
pub const INITIAL_BALANCE: i64 = 10_000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmallBank {
    pub accounts_per_node: u64,
    /// Fraction of a node's accounts that are hot.
    pub hot_fraction: f64,
    /// Probability that an account choice falls in the hot set.
    pub hot_probability: f64,
    /// Probability that SP and AMG pick their second account on another node.
    pub distributed: f64,
    /// Whether a transaction's first account lives on the coordinator's node.
    pub locality: bool,
    /// Mix in percent: SP, AMG, BLA, DC, WC, TS.
    pub mix: [u32; 6],
}

impl Default for SmallBank {
    fn default() -> Self {
        SmallBank {
            accounts_per_node: 100_000,
            hot_fraction: 0.04,
            hot_probability: 0.9,
            distributed: 0.01,
            locality: true,
            mix: [25, 15, 15, 15, 15, 15],
        }
    }
}

pub const KINDS: [&str; 6] =
    ["send-payment", "amalgamate", "balance", "deposit-checking", "write-check", "transact-savings"];

impl SmallBank {
    /// Checks parameters; returns the field and the problem.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.accounts_per_node < 2 {
            return Err(("accounts_per_node", format!("must be at least 2, got {}", self.accounts_per_node)));
        }
        for (name, p) in [
            ("hot_fraction", self.hot_fraction),
            ("hot_probability", self.hot_probability),
            ("distributed", self.distributed),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err((name, format!("must be a probability in [0, 1], got {p}")));
            }
        }
        let sum: u64 = self.mix.iter().map(|&m| u64::from(m)).sum();
        if sum != 100 {
            return Err(("mix", format!("percentages must add up to 100, got {sum}")));
        }
        Ok(())
    }

    fn account_on(&self, rng: &mut ChaCha8Rng, node: u16) -> u64 {
        let n = self.accounts_per_node;
        let hot = ((n as f64 * self.hot_fraction) as u64).clamp(1, n);
        let local =
            if hot < n && !rng.gen_bool(self.hot_probability) { rng.gen_range(hot..n) } else { rng.gen_range(0..hot) };
        node as u64 * n + local
    }

    fn other_node(rng: &mut ChaCha8Rng, node: u16, nodes: u16) -> u16 {
        if nodes < 2 {
            return node;
        }
        let r = rng.gen_range(0..nodes - 1);
        if r >= node {
            r + 1
        } else {
            r
        }
    }
}

impl Workload for SmallBank {
    fn name(&self) -> &'static str {
        "smallbank"
    }

    fn tables(&self) -> Vec<Table> {
        vec![
            Table { id: SAVINGS, name: "savings", record_bytes: 8, rows_per_node: self.accounts_per_node },
            Table { id: CHECKING, name: "checking", record_bytes: 8, rows_per_node: self.accounts_per_node },
        ]
    }

    fn initial(&self, _key: Key) -> Vec<u8> {
        INITIAL_BALANCE.to_le_bytes().to_vec()
    }
    fn initial_into(&self, _key: Key, record: &mut [u8]) {
        let b = INITIAL_BALANCE.to_le_bytes();
        let n = b.len().min(record.len());
        record[..n].copy_from_slice(&b[..n]);
    }

    fn generate(&self, rng: &mut ChaCha8Rng, node: u16, nodes: u16) -> TxnSpec {
        let first_node = if self.locality { node } else { rng.gen_range(0..nodes) };
        let a = self.account_on(rng, first_node);
        let second = |rng: &mut ChaCha8Rng| {
            let n = if rng.gen_bool(self.distributed) { Self::other_node(rng, first_node, nodes) } else { first_node };
            loop {
                let b = self.account_on(rng, n);
                if b != a {
                    return b;
                }
            }
        };
        let roll = rng.gen_range(0..100u32);
        let mut acc = 0;
        let kind = self.mix.iter().position(|&m| {
            acc += m;
            roll < acc
        });
        let s = |row| Key { table: SAVINGS, row };
        let c = |row| Key { table: CHECKING, row };
        let spec = |kind: usize, reads: Vec<Key>, writes: Vec<Key>, params: Vec<i64>| TxnSpec {
            kind: KINDS[kind],
            reads,
            writes,
            params,
            compute_ns: 0,
        };
        match kind.unwrap_or(5) {
            0 => {
                let b = second(rng);
                let x = rng.gen_range(1..=100);
                spec(0, vec![], vec![c(a), c(b)], vec![x])
            }
            1 => {
                let b = second(rng);
                spec(1, vec![], vec![s(a), c(a), c(b)], vec![])
            }
            2 => spec(2, vec![s(a), c(a)], vec![], vec![]),
            3 => spec(3, vec![], vec![c(a)], vec![rng.gen_range(1..=100)]),
            4 => spec(4, vec![s(a)], vec![c(a)], vec![rng.gen_range(1..=100)]),
            _ => spec(5, vec![], vec![s(a)], vec![rng.gen_range(1..=100)]),
        }
    }

    fn execute(&self, spec: &TxnSpec, read_values: &[&[u8]], old: &[&[u8]]) -> Executed {
        let commit = |new_values, external_delta| Executed::Commit { new_values, external_delta };
        match spec.kind {
            "send-payment" => {
                let (from, to, x) = (get_i64(old[0]), get_i64(old[1]), spec.params[0]);
                if from < x {
                    return Executed::UserAbort;
                }
                commit(vec![with_i64(old[0], from - x), with_i64(old[1], to + x)], 0)
            }
            "amalgamate" => {
                let total = get_i64(old[0]) + get_i64(old[1]);
                commit(vec![with_i64(old[0], 0), with_i64(old[1], 0), with_i64(old[2], get_i64(old[2]) + total)], 0)
            }
            "balance" => {
                let _ = get_i64(read_values[0]) + get_i64(read_values[1]);
                commit(vec![], 0)
            }
            "deposit-checking" => commit(vec![with_i64(old[0], get_i64(old[0]) + spec.params[0])], spec.params[0]),
            "write-check" => {
                let x = spec.params[0];
                let total = get_i64(read_values[0]) + get_i64(old[0]);
                let out = if total < x { x + 1 } else { x };
                commit(vec![with_i64(old[0], get_i64(old[0]) - out)], -out)
            }
            _ => commit(vec![with_i64(old[0], get_i64(old[0]) + spec.params[0])], spec.params[0]),
        }
    }

    fn conserved(&self, _key: Key, value: &[u8]) -> i64 {
        get_i64(value)
    }
}

/// The registry's entry (`crate::REGISTRY`).
pub static KIND: crate::Kind<SmallBank> = crate::Kind::new(
    "SmallBank",
    "SmallBank",
    "SmallBank transactions over checking and savings accounts, with a conserved total",
);

impl crate::Params for SmallBank {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        SmallBank::validate(self)
    }
    fn build(&self, _: crate::Shape) -> std::sync::Arc<dyn crate::Workload> {
        std::sync::Arc::new(self.clone())
    }
}
