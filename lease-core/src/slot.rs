//! Redis Cluster hash slot of a key (CRC16/XMODEM of the hash tag or the whole key, mod
//! 16384). Computed here rather than through `RedisModule_ClusterKeySlot`, which Redis 7.0
//! does not export, so `LEASE.FENCE` can refuse an inner command whose keys live elsewhere.

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
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

/// The part of the key that is hashed: the content of the first non-empty `{...}`.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&c| c == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&c| c == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) & 0x3FFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_slots() {
        // Values from `CLUSTER KEYSLOT` on a real server.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }
}
