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
/// pre-write the redo log, vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubTxn {
    pub tid: u64,
    pub ops: Vec<Op>,
}

impl SubTxn {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u64(self.tid);
        b.put_u16(self.ops.len() as u16);
        for o in &self.ops {
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
        b
    }

    pub fn decode(b: &[u8]) -> Result<SubTxn, WireError> {
        let mut r = Reader::new(b);
        let tid = r.u64()?;
        let n = r.u16()?;
        let mut ops = Vec::with_capacity((n as usize).min(r.remaining() / 14));
        for _ in 0..n {
            let (idx, table, key, write) = (r.u16()?, r.u16()?, r.u64()?, r.u8()? != 0);
            let reps = r.u8()?;
            let mut replicas = Vec::with_capacity(reps as usize);
            for _ in 0..reps {
                replicas.push((r.u16()?, r.u16()?));
            }
            ops.push(Op { idx, table, key, write, replicas });
        }
        r.finish()?;
        Ok(SubTxn { tid, ops })
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
/// version and value (indexed by the record's position in the transaction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub tid: u64,
    pub commit: bool,
    pub cts: u64,
    pub writes: Vec<(u16, u64, Vec<u8>)>,
}

impl Decision {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u64(self.tid);
        b.put_u8(self.commit as u8);
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
        let (tid, commit, cts) = (r.u64()?, r.u8()? != 0, r.u64()?);
        let n = r.u16()?;
        let mut writes = Vec::with_capacity((n as usize).min(r.remaining() / 14));
        for _ in 0..n {
            let (idx, version) = (r.u16()?, r.u64()?);
            let len = r.u32()? as usize;
            writes.push((idx, version, r.bytes(len)?.to_vec()));
        }
        r.finish()?;
        Ok(Decision { tid, commit, cts, writes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_truncations_are_refused() {
        let s =
            SubTxn { tid: 7, ops: vec![Op { idx: 1, table: 2, key: 99, write: true, replicas: vec![(3, 0), (4, 2)] }] };
        let v = Vote {
            yes: true,
            cause: 0,
            ops: vec![(0, vec![Seen { node: 3, copy: 0, wts: 5, version: 2 }], vec![1, 2, 3])],
        };
        let d = Decision { tid: 7, commit: true, cts: 11, writes: vec![(1, 3, vec![9; 10])] };
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
