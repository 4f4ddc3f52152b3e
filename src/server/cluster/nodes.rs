//! The `CLUSTER NODES` parser, and what a parsed view says: the slot map
//! and who follows whom.

/// `(first, last, port)` slot ranges, in slot order.
pub(super) type SlotMap = Vec<(u16, u16, u16)>;
/// `(port, port of its master)` of each node (`None` for a master).
pub(super) type Roles = Vec<(u16, Option<u16>)>;

/// One line of `CLUSTER NODES`:
/// `ID IP:PORT@BUSPORT[,HOSTNAME] FLAGS MASTER PING PONG EPOCH LINK SLOT...`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct NodeLine {
    pub(super) id: String,
    pub(super) port: u16,
    pub(super) flags: Vec<String>,
    /// The master's id, for a replica (`-` for a master).
    pub(super) master_id: Option<String>,
    /// `(first, last)` slot ranges it serves.
    pub(super) slots: Vec<(u16, u16)>,
    /// A `[SLOT->-ID]` or `[SLOT-<-ID]` entry: a slot being moved.
    pub(super) migrating: bool,
}

impl NodeLine {
    pub(super) fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    pub(super) fn myself(&self) -> bool {
        self.has("myself")
    }
    pub(super) fn is_master(&self) -> bool {
        self.has("master")
    }
    pub(super) fn failed(&self) -> bool {
        self.has("fail") || self.has("fail?") || self.has("noaddr")
    }
}

/// Parses a `CLUSTER NODES` reply; `None` if a line is malformed.
pub(super) fn parse_nodes(text: &str) -> Option<Vec<NodeLine>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() < 8 {
                return None;
            }
            let addr = words[1].split(['@', ',']).next()?;
            let port: u16 = addr.rsplit_once(':')?.1.parse().ok()?;
            let mut slots = Vec::new();
            let mut migrating = false;
            for word in &words[8..] {
                if word.starts_with('[') {
                    migrating = true;
                } else if let Some((a, b)) = word.split_once('-') {
                    slots.push((a.parse().ok()?, b.parse().ok()?));
                } else {
                    let s = word.parse().ok()?;
                    slots.push((s, s));
                }
            }
            Some(NodeLine {
                id: words[0].to_owned(),
                port,
                flags: words[2].split(',').map(str::to_owned).collect(),
                master_id: (words[3] != "-").then(|| words[3].to_owned()),
                slots,
                migrating,
            })
        })
        .collect()
}

/// The slot map of a view: `(first, last, port)` ranges in slot order.
pub(super) fn slot_map(view: &[NodeLine]) -> SlotMap {
    let mut map: SlotMap = view
        .iter()
        .flat_map(|n| n.slots.iter().map(move |(a, b)| (*a, *b, n.port)))
        .collect();
    map.sort_unstable();
    map
}

/// The roles in a view: `(port, port of its master)` of every node not
/// thought failed, in port order (`None` for a master).
pub(super) fn roles(view: &[NodeLine]) -> Roles {
    let mut out: Roles = view
        .iter()
        .filter(|n| !n.failed())
        .map(|n| {
            let master = n
                .master_id
                .as_ref()
                .map(|id| view.iter().find(|m| &m.id == id).map_or(0, |m| m.port));
            (n.port, master)
        })
        .collect();
    out.sort_unstable();
    out
}

/// Who serves `slot` in `map`.
pub(super) fn owner(map: &[(u16, u16, u16)], slot: u16) -> Option<u16> {
    map.iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    // CLUSTER NODES lines of Redis 7.0 and Valkey (with hostnames and migration markers) parse.
    #[test]
    fn parses_cluster_nodes() {
        let text = "07c3 127.0.0.1:30004@31004,host replica,myself e7d1 0 1426238317239 4 connected\n\
                    e7d1 127.0.0.1:30001@31001 master - 0 1426238316232 1 connected 0-5460 7000 [5461->-67ed]\n\
                    67ed 127.0.0.1:30002@31002 master,fail - 1426238316232 1426238316232 2 disconnected\n";
        let view = parse_nodes(text).unwrap();
        assert_eq!(view.len(), 3);
        assert_eq!(view[0].port, 30004);
        assert!(view[0].myself());
        assert_eq!(view[0].master_id.as_deref(), Some("e7d1"));
        assert_eq!(view[1].slots, vec![(0, 5460), (7000, 7000)]);
        assert!(view[1].migrating);
        assert!(view[2].failed());
        assert_eq!(slot_map(&view), vec![(0, 5460, 30001), (7000, 7000, 30001)]);
        assert_eq!(owner(&slot_map(&view), 7000), Some(30001));
        assert_eq!(owner(&slot_map(&view), 6000), None);
    }
}
