//! Where the copies of a partition live when they span data centers (RedT Sec. 3-4;
//! docs/redt-plan.md): replica 0 on the partition's home, replica k in the k-th data center
//! after the home's (mod their number), at the home's position inside its data center; with
//! more replicas than data centers, the extra ones take the next position in the same data
//! center (RedT's "several replicas of a partition in one data center", run as groups). With
//! one data center this is the shared log's rule, backup k on node home + k.
//!
//! And the quorums RedT counts in replicas: a commit needs more than 3/4 of a partition's
//! replicas (Sec. 4.2.1), a new coordinator more than 1/2 of them (Sec. 5.1.1).

/// The nodes of each data center, in node order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    dc_of: Vec<u16>,
    members: Vec<Vec<u16>>,
}

impl Placement {
    /// `dc_of[n]` is node n's data center (empty: all `nodes` in one).
    pub fn new(dc_of: &[u16], nodes: u16) -> Placement {
        let dc_of: Vec<u16> = (0..nodes).map(|n| dc_of.get(n as usize).copied().unwrap_or(0)).collect();
        let dcs = dc_of.iter().copied().max().map_or(1, |d| d as usize + 1);
        let mut members = vec![Vec::new(); dcs];
        for (n, &d) in dc_of.iter().enumerate() {
            members[d as usize].push(n as u16);
        }
        Placement { dc_of, members }
    }

    pub fn data_centers(&self) -> usize {
        self.members.len()
    }

    pub fn dc_of(&self, node: u16) -> u16 {
        self.dc_of[node as usize]
    }

    /// The `replicas` nodes holding node `home`'s partition, replica 0 (the home) first; an
    /// error naming the shortfall when they would not all be distinct nodes.
    pub fn replicas(&self, home: u16, replicas: u16) -> Result<Vec<u16>, String> {
        let d = self.dc_of(home) as usize;
        let j = self.members[d].iter().position(|&n| n == home).expect("a node is in its data center");
        let dcs = self.members.len();
        let mut out = Vec::with_capacity(replicas as usize);
        for k in 0..replicas as usize {
            let dc = &self.members[(d + k) % dcs];
            let node = dc[(j + k / dcs) % dc.len()];
            if out.contains(&node) {
                return Err(format!(
                    "{replicas} replicas of node {home}'s partition do not fit on distinct nodes: data center {} has {} nodes",
                    (d + k) % dcs,
                    dc.len()
                ));
            }
            out.push(node);
        }
        Ok(out)
    }
}

impl Placement {
    /// For each copy k = 1..replicas, the homes whose copy k is on `node` (in node order).
    pub fn copies_held(&self, node: u16, replicas: u16) -> Result<Vec<Vec<u16>>, String> {
        let mut held = vec![Vec::new(); replicas.saturating_sub(1) as usize];
        for home in 0..self.dc_of.len() as u16 {
            for (k, &at) in self.replicas(home, replicas)?.iter().enumerate().skip(1) {
                if at == node {
                    held[k - 1].push(home);
                }
            }
        }
        Ok(held)
    }

    /// For each copy k = 1..replicas, the most partitions' copy k one node holds (room the
    /// store reserves: 1 when data centers are the same size).
    pub fn copy_load(&self, replicas: u16) -> Result<Vec<u64>, String> {
        let mut most = vec![0u64; replicas.saturating_sub(1) as usize];
        for node in 0..self.dc_of.len() as u16 {
            for (k, homes) in self.copies_held(node, replicas)?.iter().enumerate() {
                most[k] = most[k].max(homes.len() as u64);
            }
        }
        Ok(most.into_iter().map(|m| m.max(1)).collect())
    }
}

/// The fewest votes that are more than 3/4 of `replicas` (RedT's commit rule).
pub fn commit_quorum(replicas: u16) -> u16 {
    3 * replicas / 4 + 1
}

/// The fewest replicas that are more than half of `replicas` (RedT's recovery rule).
pub fn recovery_quorum(replicas: u16) -> u16 {
    replicas / 2 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RedT's evaluation shape: 4 DCs x 2 nodes, 3 replicas: one per DC, same position.
    #[test]
    fn three_replicas_over_four_data_centers_go_to_three_of_them() {
        let p = Placement::new(&[0, 0, 1, 1, 2, 2, 3, 3], 8);
        assert_eq!(p.replicas(0, 3).unwrap(), [0, 2, 4]);
        assert_eq!(p.replicas(1, 3).unwrap(), [1, 3, 5]);
        assert_eq!(p.replicas(6, 3).unwrap(), [6, 0, 2]);
        for home in 0..8 {
            let r = p.replicas(home, 3).unwrap();
            let mut dcs: Vec<u16> = r.iter().map(|&n| p.dc_of(n)).collect();
            dcs.dedup();
            assert_eq!(dcs.len(), 3, "{home}: {r:?}");
        }
    }

    /// Each node holds exactly one partition's copy k when data centers are the same size,
    /// and a small data center takes several when they are not.
    #[test]
    fn copies_held_are_the_inverse_of_placement() {
        let p = Placement::new(&[0, 0, 1, 1, 2, 2, 3, 3], 8);
        assert_eq!(p.copies_held(0, 3).unwrap(), [vec![6], vec![4]]);
        assert_eq!(p.copy_load(3).unwrap(), [1, 1]);
        let q = Placement::new(&[0, 0, 0, 1], 4);
        for node in 0..4 {
            for (k, homes) in q.copies_held(node, 2).unwrap().iter().enumerate() {
                for &h in homes {
                    assert_eq!(q.replicas(h, 2).unwrap()[k + 1], node);
                }
            }
        }
        assert_eq!(q.copies_held(3, 2).unwrap(), [vec![0, 1, 2]]);
        assert_eq!(q.copy_load(2).unwrap(), [3]);
    }

    /// More replicas than data centers: groups, the extra copies on the next node of a DC.
    #[test]
    fn extra_replicas_form_groups_inside_data_centers() {
        let p = Placement::new(&[0, 0, 1, 1], 4);
        assert_eq!(p.replicas(0, 4).unwrap(), [0, 2, 1, 3]);
        assert_eq!(p.replicas(3, 3).unwrap(), [3, 1, 2]);
        assert!(p.replicas(0, 5).unwrap_err().contains("distinct nodes"));
        let uneven = Placement::new(&[0, 1, 1], 3);
        assert!(uneven.replicas(0, 3).is_err(), "DC 0 has one node: two copies would share it");
    }

    /// One data center: backup k on node home + k, as the shared log places them.
    #[test]
    fn one_data_center_is_the_log_rule() {
        let p = Placement::new(&[], 5);
        assert_eq!(p.data_centers(), 1);
        for home in 0..5u16 {
            let want: Vec<u16> = (0..3).map(|k| (home + k) % 5).collect();
            assert_eq!(p.replicas(home, 3).unwrap(), want);
        }
    }

    #[test]
    fn quorums_are_strictly_more_than_the_fractions() {
        assert_eq!([1, 2, 3, 4, 5, 8].map(commit_quorum), [1, 2, 3, 4, 4, 7]);
        assert_eq!([1, 2, 3, 4, 5].map(recovery_quorum), [1, 2, 2, 3, 3]);
        for r in 1..=16u16 {
            assert!(4 * commit_quorum(r) > 3 * r && 4 * (commit_quorum(r) - 1) <= 3 * r);
            assert!(2 * recovery_quorum(r) > r && 2 * (recovery_quorum(r) - 1) <= r);
        }
    }
}
