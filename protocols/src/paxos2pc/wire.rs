//! The messages of 2PC over Paxos-replicated partitions: a request names a transaction and
//! records, a change carries a record's new version and value.

use txbed_txn::wire::{Put, Reader, WireError};

/// A record at a primary: table, key, write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub table: u16,
    pub key: u64,
    pub write: bool,
}

/// A change to replicate or install: the copy's table (`store::copy_table`), key, the new
/// version and value (empty: an intent, values with the decision).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub table: u16,
    pub key: u64,
    pub version: u64,
    pub value: Vec<u8>,
}

/// A request: transaction id, a flag (commit; or "replicate" for execution), items and
/// changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Req {
    pub tid: u64,
    pub flag: bool,
    pub items: Vec<Item>,
    pub changes: Vec<Change>,
}

impl Req {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u64(self.tid);
        b.put_u8(self.flag as u8);
        b.put_u16(self.items.len() as u16);
        for i in &self.items {
            b.put_u16(i.table);
            b.put_u64(i.key);
            b.put_u8(i.write as u8);
        }
        b.put_u16(self.changes.len() as u16);
        for c in &self.changes {
            b.put_u16(c.table);
            b.put_u64(c.key);
            b.put_u64(c.version);
            b.put_u32(c.value.len() as u32);
            b.put_bytes(&c.value);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Req, WireError> {
        let mut r = Reader::new(b);
        let (tid, flag) = (r.u64()?, r.u8()? != 0);
        let n = r.u16()?;
        let mut items = Vec::with_capacity((n as usize).min(r.remaining() / 11));
        for _ in 0..n {
            items.push(Item { table: r.u16()?, key: r.u64()?, write: r.u8()? != 0 });
        }
        let n = r.u16()?;
        let mut changes = Vec::with_capacity((n as usize).min(r.remaining() / 22));
        for _ in 0..n {
            let (table, key, version) = (r.u16()?, r.u64()?, r.u64()?);
            let len = r.u32()? as usize;
            changes.push(Change { table, key, version, value: r.bytes(len)?.to_vec() });
        }
        r.finish()?;
        Ok(Req { tid, flag, items, changes })
    }
}

/// A primary's answer: whether every record was locked, the tuples (in request order), and
/// what it exchanged with other data centers on the way (messages, round trips in a row).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    pub ok: bool,
    pub tuples: Vec<Vec<u8>>,
    pub inter_dc_messages: u32,
    pub inter_dc_round_trips: u8,
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u8(self.ok as u8);
        b.put_u32(self.inter_dc_messages);
        b.put_u8(self.inter_dc_round_trips);
        b.put_u16(self.tuples.len() as u16);
        for t in &self.tuples {
            b.put_u32(t.len() as u32);
            b.put_bytes(t);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Reply, WireError> {
        let mut r = Reader::new(b);
        let (ok, inter_dc_messages, inter_dc_round_trips) = (r.u8()? != 0, r.u32()?, r.u8()?);
        let n = r.u16()?;
        let mut tuples = Vec::with_capacity((n as usize).min(r.remaining() / 4));
        for _ in 0..n {
            let len = r.u32()? as usize;
            tuples.push(r.bytes(len)?.to_vec());
        }
        r.finish()?;
        Ok(Reply { ok, tuples, inter_dc_messages, inter_dc_round_trips })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_truncations_are_refused() {
        let q = Req {
            tid: 5,
            flag: true,
            items: vec![Item { table: 1, key: 2, write: true }],
            changes: vec![Change { table: 3, key: 4, version: 6, value: vec![7; 9] }],
        };
        let p = Reply { ok: true, tuples: vec![vec![1, 2, 3]], inter_dc_messages: 4, inter_dc_round_trips: 1 };
        assert_eq!(Req::decode(&q.encode()).unwrap(), q);
        assert_eq!(Reply::decode(&p.encode()).unwrap(), p);
        for cut in 0..q.encode().len() {
            assert!(Req::decode(&q.encode()[..cut]).is_err(), "{cut}");
        }
        for cut in 0..p.encode().len() {
            assert!(Reply::decode(&p.encode()[..cut]).is_err(), "{cut}");
        }
    }
}
