//! RedT's messages between a coordinator and the executors of other data centers (Sec.
//! 4.2): the sub-transaction, the executor's vote, the decision and its acknowledgement.

use txbed_txn::wire::{Put, Reader, WireError};

/// One operation of a sub-transaction: a record of the transaction and the copies of it in
/// the executor's data center.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// Index of the record in the transaction (`ops::records` order).
    pub idx: u16,
    pub table: u16,
    pub key: u64,
    pub write: bool,
    /// (node, copy number) of each replica in this data center; copy 0 is the home's.
    pub replicas: Vec<(u16, u16)>,
}

/// The execution phase's request: lock every replica of these records in the data center,
/// pre-write the redo log, vote. And what a new coordinator needs should this one fail
/// (Sec. 5.1.1): every data center's executor, and the coordinator's own data center's
/// operations (no other executor holds them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubTxn {
    pub tid: u64,
    pub ops: Vec<Op>,
    /// (data center, executor) of every sub-transaction, the coordinator's first.
    pub executors: Vec<(u16, u16)>,
    /// The coordinator's data center's operations.
    pub home_ops: Vec<Op>,
}

fn put_ops(b: &mut Vec<u8>, ops: &[Op]) {
    b.put_u16(ops.len() as u16);
    for o in ops {
        b.put_u16(o.idx);
        b.put_u16(o.table);
        b.put_u64(o.key);
        b.put_u8(o.write as u8);
        b.put_u8(o.replicas.len() as u8);
        for &(node, copy) in &o.replicas {
            b.put_u16(node);
            b.put_u16(copy);
        }
    }
}

fn read_ops(r: &mut Reader<'_>) -> Result<Vec<Op>, WireError> {
    let n = r.u16()?;
    let mut ops = Vec::with_capacity((n as usize).min(r.remaining() / 14));
    for _ in 0..n {
        let (idx, table, key, write) = (r.u16()?, r.u16()?, r.u64()?, r.u8()? != 0);
        let reps = r.u8()?;
        let mut replicas = Vec::with_capacity((reps as usize).min(r.remaining() / 4));
        for _ in 0..reps {
            replicas.push((r.u16()?, r.u16()?));
        }
        ops.push(Op { idx, table, key, write, replicas });
    }
    Ok(ops)
}

impl SubTxn {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u64(self.tid);
        put_ops(&mut b, &self.ops);
        b.put_u16(self.executors.len() as u16);
        for &(dc, node) in &self.executors {
            b.put_u16(dc);
            b.put_u16(node);
        }
        put_ops(&mut b, &self.home_ops);
        b
    }

    pub fn decode(b: &[u8]) -> Result<SubTxn, WireError> {
        let mut r = Reader::new(b);
        let tid = r.u64()?;
        let ops = read_ops(&mut r)?;
        let n = r.u16()?;
        let mut executors = Vec::with_capacity((n as usize).min(r.remaining() / 4));
        for _ in 0..n {
            executors.push((r.u16()?, r.u16()?));
        }
        let home_ops = read_ops(&mut r)?;
        r.finish()?;
        Ok(SubTxn { tid, ops, executors, home_ops })
    }
}

/// ADOPT: a data center's sub-transaction and its decision, for another node of that data
/// center to carry out when its executor failed (Sec. 5.1.1: "a new executor in the DC").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adopt {
    pub decision: Decision,
    pub ops: Vec<Op>,
}

impl Adopt {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        put_ops(&mut b, &self.ops);
        b.extend_from_slice(&self.decision.encode());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Adopt, WireError> {
        let mut r = Reader::new(b);
        let ops = read_ops(&mut r)?;
        let rest = r.bytes(r.remaining())?;
        Ok(Adopt { ops, decision: Decision::decode(rest)? })
    }
}

/// What an executor answers a new coordinator's RECOVER (Sec. 5.1.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// It received this decision (a commit carries every write's value).
    Decided(Decision),
    /// It voted and waits for the decision.
    Voted,
    /// It holds nothing of the transaction (and now refuses it).
    Unknown,
}

impl Status {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Status::Decided(d) => {
                let mut b = vec![0u8];
                b.extend_from_slice(&d.encode());
                b
            }
            Status::Voted => vec![1],
            Status::Unknown => vec![2],
        }
    }

    pub fn decode(b: &[u8]) -> Result<Status, WireError> {
        match b.split_first() {
            Some((0, rest)) => Ok(Status::Decided(Decision::decode(rest)?)),
            Some((1, [])) => Ok(Status::Voted),
            Some((2, [])) => Ok(Status::Unknown),
            _ => Err(WireError::Invalid("a RedT recovery status")),
        }
    }
}

/// What one replica showed its executor: its node, wts and version (under the lock).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub node: u16,
    pub copy: u16,
    pub wts: u64,
    pub version: u64,
}

/// The executor's vote (Sec. 4.2.1). On yes: per operation, what each replica showed and
/// the record of the freshest one (largest wts) in this data center.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vote {
    pub yes: bool,
    /// Why a no (`super::cause::code`); 0 with a yes.
    pub cause: u8,
    /// (operation index in the request, replicas seen, record of the freshest).
    pub ops: Vec<(u16, Vec<Seen>, Vec<u8>)>,
}

impl Vote {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u8(self.yes as u8);
        b.put_u8(self.cause);
        b.put_u16(self.ops.len() as u16);
        for (idx, seen, rec) in &self.ops {
            b.put_u16(*idx);
            b.put_u8(seen.len() as u8);
            for s in seen {
                b.put_u16(s.node);
                b.put_u16(s.copy);
                b.put_u64(s.wts);
                b.put_u64(s.version);
            }
            b.put_u32(rec.len() as u32);
            b.put_bytes(rec);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Vote, WireError> {
        let mut r = Reader::new(b);
        let (yes, cause) = (r.u8()? != 0, r.u8()?);
        let n = r.u16()?;
        let mut ops = Vec::with_capacity((n as usize).min(r.remaining() / 7));
        for _ in 0..n {
            let idx = r.u16()?;
            let k = r.u8()?;
            let mut seen = Vec::with_capacity(k as usize);
            for _ in 0..k {
                seen.push(Seen { node: r.u16()?, copy: r.u16()?, wts: r.u64()?, version: r.u64()? });
            }
            let len = r.u32()? as usize;
            ops.push((idx, seen, r.bytes(len)?.to_vec()));
        }
        r.finish()?;
        Ok(Vote { yes, cause, ops })
    }
}

/// The commit phase's request: the decision, its commit timestamp, and each write's new
/// version and value (indexed by the record's position in the transaction). `recovered`:
/// sent by a new coordinator, which the fence against the old one lets through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub tid: u64,
    pub commit: bool,
    pub cts: u64,
    pub writes: Vec<(u16, u64, Vec<u8>)>,
    pub recovered: bool,
}

impl Decision {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u64(self.tid);
        b.put_u8(self.commit as u8 | (self.recovered as u8) << 1);
        b.put_u64(self.cts);
        b.put_u16(self.writes.len() as u16);
        for (idx, version, value) in &self.writes {
            b.put_u16(*idx);
            b.put_u64(*version);
            b.put_u32(value.len() as u32);
            b.put_bytes(value);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Decision, WireError> {
        let mut r = Reader::new(b);
        let (tid, flags, cts) = (r.u64()?, r.u8()?, r.u64()?);
        let (commit, recovered) = (flags & 1 != 0, flags & 2 != 0);
        let n = r.u16()?;
        let mut writes = Vec::with_capacity((n as usize).min(r.remaining() / 14));
        for _ in 0..n {
            let (idx, version) = (r.u16()?, r.u64()?);
            let len = r.u32()? as usize;
            writes.push((idx, version, r.bytes(len)?.to_vec()));
        }
        r.finish()?;
        Ok(Decision { tid, commit, cts, writes, recovered })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_truncations_are_refused() {
        let op = Op { idx: 1, table: 2, key: 99, write: true, replicas: vec![(3, 0), (4, 2)] };
        let s = SubTxn { tid: 7, ops: vec![op.clone()], executors: vec![(0, 1), (2, 5)], home_ops: vec![op.clone()] };
        let v = Vote {
            yes: true,
            cause: 0,
            ops: vec![(0, vec![Seen { node: 3, copy: 0, wts: 5, version: 2 }], vec![1, 2, 3])],
        };
        let d = Decision { tid: 7, commit: true, cts: 11, writes: vec![(1, 3, vec![9; 10])], recovered: true };
        let a = Adopt { decision: d.clone(), ops: vec![op] };
        assert_eq!(Adopt::decode(&a.encode()).unwrap(), a);
        for st in [Status::Decided(d.clone()), Status::Voted, Status::Unknown] {
            assert_eq!(Status::decode(&st.encode()).unwrap(), st);
        }
        assert!(Status::decode(&[9]).is_err() && Status::decode(&[]).is_err());
        assert_eq!(SubTxn::decode(&s.encode()).unwrap(), s);
        assert_eq!(Vote::decode(&v.encode()).unwrap(), v);
        assert_eq!(Decision::decode(&d.encode()).unwrap(), d);
        for cut in 0..s.encode().len() {
            assert!(SubTxn::decode(&s.encode()[..cut]).is_err(), "{cut}");
        }
        for cut in 0..v.encode().len() {
            assert!(Vote::decode(&v.encode()[..cut]).is_err(), "{cut}");
        }
        for cut in 0..d.encode().len() {
            assert!(Decision::decode(&d.encode()[..cut]).is_err(), "{cut}");
        }
    }
}
