//! Hash slots: a key's slot (CRC16 and hash tags, as the cluster computes
//! it) and each master's share of the 16384.

use crate::server::error::ServerError;

/// How many hash slots a cluster has.
pub const CLUSTER_SLOTS: u16 = 16_384;

/// Master `i` of `n`'s share of the slots, `(first, last)`.
pub(super) fn slot_share(i: usize, n: usize) -> (u16, u16) {
    let total = usize::from(CLUSTER_SLOTS);
    ((i * total / n) as u16, ((i + 1) * total / n - 1) as u16)
}

pub(super) fn check_slot(slot: u16) -> Result<(), ServerError> {
    if slot >= CLUSTER_SLOTS {
        return Err(ServerError::Invalid(format!("slot {slot} is past 16383")));
    }
    Ok(())
}

/// The hash slot of `key`: CRC16 (XMODEM) of the key, or of the part
/// between the first `{` and the next `}` when that is not empty.
pub(super) fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % CLUSTER_SLOTS
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the cluster's
/// key hash.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::super::MAX_MASTERS;
    use super::*;

    // The key hash matches the cluster specification's examples and honours hash tags.
    #[test]
    fn key_slots_follow_the_specification() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    // The slots are split evenly and completely between the masters.
    #[test]
    fn slot_shares_cover_every_slot() {
        for n in 1..=MAX_MASTERS {
            let shares: Vec<(u16, u16)> = (0..n).map(|i| slot_share(i, n)).collect();
            assert_eq!(shares[0].0, 0);
            assert_eq!(shares[n - 1].1, CLUSTER_SLOTS - 1);
            for w in shares.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
        }
    }
}
