//! The RDB codec of a lease value: what RDB files, the RDB preamble of an AOF rewrite and
//! `DUMP` payloads hold, decoded into `Persisted` (checked again as values by
//! `Lease::from_persisted` before anything becomes state) and encoded from `Saved`.
//!
//! Encoding version 1 (every build before `90b8e73`; still loaded, never written): the
//! fields one module call each: unsigned token, unsigned grants, unsigned held (0|1), if held:
//! string owner, unsigned expires_wall_ms.
//!
//! Encoding version 2 (every build from `90b8e73` until the membership id; still loaded,
//! never written): the whole value in ONE module string buffer (one
//! `RedisModule_SaveStringBuffer` per key instead of five field calls: each field call costs
//! its own opcode, length encoding and rio write), little endian:
//!
//! ```text
//!   offset 0   u8   flags: bit 0 = held; every other bit must be 0
//!   offset 1   u64  token (held: the live token; free: the last token issued)
//!   offset 9   u64  grants
//!   free: the buffer ends here (exactly V2_FREE_LEN = 17 bytes)
//!   held: offset 17  u64  expires_wall_ms (absolute, Unix ms)
//!         offset 25  owner, the rest of the buffer (1..=OWNER_HARD_CAP bytes)
//! ```
//!
//! Encoding version 3 (written): version 2 plus the quorum-mode membership id (issue 32,
//! docs/quorum.md §4.1). This is THE layout (docs and the module point here;
//! `tests/compat.rs` pins the bytes a real server writes):
//!
//! ```text
//!   offset 0   u8   flags: bit 0 = held, bit 1 = membership; every other bit must be 0
//!   offset 1   u64  token (held: the live token; free: the last token issued)
//!   offset 9   u64  grants
//!   bit 1:     u64  membership id (never 0), next
//!   held:      u64  expires_wall_ms (absolute, Unix ms), next; then the owner, the rest of
//!                   the buffer (1..=OWNER_HARD_CAP bytes)
//! ```
//!
//! A value without a membership id is byte for byte what version 2 wrote (17 bytes free,
//! 25 + owner held); one with it is 8 bytes longer. The owner needs no length of its own:
//! the string buffer carries one.

use crate::owner::OWNER_HARD_CAP;

/// Fields as stored in RDB / DUMP payloads, validated before they become a `Lease`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persisted {
    pub token: u64,
    pub held: Option<(Vec<u8>, u64)>,
    pub grants: u64,
    /// Quorum mode's membership id (encoding version 3 only; never `Some(0)` from a decoder).
    pub membership: Option<u64>,
}

/// The fields of one value to save, borrowed: the module's save builds it from the lease
/// itself (`Lease::saved`), so a save copies no owner per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saved<'a> {
    pub token: u64,
    pub grants: u64,
    /// Held: the owner and the absolute wall-clock expiry (Unix ms).
    pub held: Option<(&'a [u8], u64)>,
    pub membership: Option<u64>,
}

/// The fields an RDB/DUMP payload holds, read one at a time in order (the module reads them
/// from Redis' IO; the fuzz target from bytes). `None` = the payload ends or has the wrong
/// kind of field there.
pub trait PersistedSource {
    fn unsigned(&mut self) -> Option<u64>;
    fn bytes(&mut self) -> Option<Vec<u8>>;
}

impl Persisted {
    /// Encoding version 1 (see the module doc). `None` for anything a healthy save cannot
    /// produce (`Lease::from_persisted` then checks the values).
    pub fn decode_v1(src: &mut impl PersistedSource) -> Option<Persisted> {
        let token = src.unsigned()?;
        let grants = src.unsigned()?;
        let held = match src.unsigned()? {
            0 => None,
            1 => {
                let owner = src.bytes()?;
                if owner.is_empty() || owner.len() > OWNER_HARD_CAP {
                    return None;
                }
                let wall = src.unsigned()?;
                Some((owner, wall))
            }
            _ => return None,
        };
        Some(Persisted {
            token,
            held,
            grants,
            membership: None,
        })
    }

    /// Encoding version 2 (the layout in the module doc): version 3 without the membership
    /// bit, which a version-2 value never has (refused like any unknown flag).
    pub fn decode_v2(buf: &[u8]) -> Option<Persisted> {
        if buf.first().is_some_and(|f| f & V3_MEMBERSHIP != 0) {
            return None;
        }
        Self::decode_v3(buf)
    }

    /// Encoding version 3 (the layout in the module doc). `None` for anything `encode_v3`
    /// cannot produce (a short or long buffer, an unknown flag bit, an owner out of bounds, a
    /// membership id of 0); as in v1, `Lease::from_persisted` then checks the values (token
    /// below 2^53, expiry within the TTL cap).
    pub fn decode_v3(buf: &[u8]) -> Option<Persisted> {
        let (&flags, rest) = buf.split_first()?;
        let (token, rest) = take_u64(rest)?;
        let (grants, rest) = take_u64(rest)?;
        let (membership, rest) = if flags & V3_MEMBERSHIP != 0 {
            let (m, rest) = take_u64(rest)?;
            if m == 0 {
                return None;
            }
            (Some(m), rest)
        } else {
            (None, rest)
        };
        let held = match flags & !V3_MEMBERSHIP {
            0 => {
                // Trailing bytes after a free lease: not something a save wrote.
                if !rest.is_empty() {
                    return None;
                }
                None
            }
            V2_HELD => {
                let (wall, owner) = take_u64(rest)?;
                if owner.is_empty() || owner.len() > OWNER_HARD_CAP {
                    return None;
                }
                Some((owner.to_vec(), wall))
            }
            // Unknown flag bits: a newer layout or corruption; refuse rather than guess.
            _ => return None,
        };
        Some(Persisted {
            token,
            held,
            grants,
            membership,
        })
    }

    /// These fields, borrowed, for `encode_v3`.
    pub fn as_saved(&self) -> Saved<'_> {
        Saved {
            token: self.token,
            grants: self.grants,
            held: self.held.as_ref().map(|(o, w)| (o.as_slice(), *w)),
            membership: self.membership,
        }
    }
}

/// Flag bit 0 of encoding versions 2 and 3: the lease is held (owner and expiry follow).
const V2_HELD: u8 = 1;
/// Flag bit 1 of encoding version 3: a membership id follows the grants.
const V3_MEMBERSHIP: u8 = 2;

/// Length of a free lease in encoding version 2, and of a held one without its owner.
pub const V2_FREE_LEN: usize = 17;
pub const V2_HELD_FIXED_LEN: usize = 25;

fn take_u64(b: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = b.split_first_chunk::<8>()?;
    Some((u64::from_le_bytes(*head), rest))
}

/// THE encoder: encoding version 3 of `v` into `out` (cleared first), so the module's save
/// can reuse one buffer for every key instead of allocating per key. Without a membership
/// id the bytes are version 2's.
pub fn encode_v3(v: Saved<'_>, out: &mut Vec<u8>) {
    out.clear();
    let membership = v.membership.filter(|&m| m != 0);
    let mut flags = if v.held.is_some() { V2_HELD } else { 0 };
    if membership.is_some() {
        flags |= V3_MEMBERSHIP;
    }
    out.push(flags);
    out.extend_from_slice(&v.token.to_le_bytes());
    out.extend_from_slice(&v.grants.to_le_bytes());
    if let Some(m) = membership {
        out.extend_from_slice(&m.to_le_bytes());
    }
    if let Some((owner, wall)) = v.held {
        out.extend_from_slice(&wall.to_le_bytes());
        out.extend_from_slice(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Lease, Now, TOKEN_LIMIT, TTL_HARD_CAP_MS};

    const WALL0: u64 = 1_800_000_000_000; // 2027, ms

    fn at(ms: u64) -> Now {
        Now {
            mono_us: 5_000_000 + ms * 1000,
            wall_ms: WALL0 + ms,
        }
    }

    fn fields(token: u64, grants: u64, held: Option<(&[u8], u64)>) -> Saved<'_> {
        Saved {
            token,
            grants,
            held,
            membership: None,
        }
    }

    /// Encoding version 2 (`decode_v2`): round trips, every truncation, wrong lengths,
    /// unknown flags, owner bounds, and the value checks of `from_persisted` behind it.
    #[test]
    fn v2_encoding_round_trips_and_refuses_what_a_save_cannot_write() {
        let mut held = Lease::new();
        held.acquire(b"owner-\x00\xff", 5000, at(0), 0, 0).unwrap();
        let mut buf = Vec::new();
        // The exact layout: flags, token, grants, expiry, owner, all little endian.
        encode_v3(held.saved(at(1000)), &mut buf);
        let mut want = vec![1u8];
        want.extend_from_slice(&held.last_token().to_le_bytes());
        want.extend_from_slice(&1u64.to_le_bytes());
        want.extend_from_slice(&(WALL0 + 5000).to_le_bytes());
        want.extend_from_slice(b"owner-\x00\xff");
        assert_eq!(buf, want);
        assert_eq!(buf.len(), V2_HELD_FIXED_LEN + 8);
        let p = held.to_persisted(at(1000));
        assert_eq!(Persisted::decode_v2(&buf), Some(p.clone()));
        // A decoded `Persisted` encodes to the same bytes as the save path, into a used buffer.
        let mut again = vec![9u8; 100];
        encode_v3(p.as_saved(), &mut again);
        assert_eq!(again, buf);
        let back = Lease::from_persisted(p.clone(), at(1000)).unwrap();
        assert_eq!(back.to_persisted(at(1000)), p);

        let free = Persisted {
            token: 77,
            held: None,
            grants: 3,
            membership: None,
        };
        let mut fbuf = Vec::new();
        encode_v3(free.as_saved(), &mut fbuf);
        assert_eq!(fbuf.len(), V2_FREE_LEN);
        assert_eq!(fbuf[0], 0);
        assert_eq!(Persisted::decode_v2(&fbuf), Some(free.clone()));

        // Every truncation is refused. (A held buffer cut inside its owner still decodes,
        // to a shorter owner: the string buffer's own length is the owner's, as for the v1
        // owner string; the DUMP CRC and the RDB checksum guard the bytes themselves.)
        for cut in 0..=V2_HELD_FIXED_LEN {
            assert_eq!(Persisted::decode_v2(&buf[..cut]), None, "held cut at {cut}");
        }
        for cut in 0..V2_FREE_LEN {
            assert_eq!(
                Persisted::decode_v2(&fbuf[..cut]),
                None,
                "free cut at {cut}"
            );
        }
        // Wrong lengths: a free lease with trailing bytes.
        for extra in [1usize, 8, 9] {
            let mut b = fbuf.clone();
            b.resize(V2_FREE_LEN + extra, 0);
            assert_eq!(Persisted::decode_v2(&b), None, "free + {extra}");
        }
        // Unknown flag bits, alone or beside the held bit.
        for flags in [2u8, 3, 0x80, 0x81, 0xff] {
            for base in [&buf, &fbuf] {
                let mut b = base.clone();
                b[0] = flags;
                assert_eq!(Persisted::decode_v2(&b), None, "flags {flags:#x}");
            }
        }
        // Owner bounds: 1 and OWNER_HARD_CAP bytes load, OWNER_HARD_CAP + 1 does not.
        for (len, ok) in [
            (1, true),
            (OWNER_HARD_CAP, true),
            (OWNER_HARD_CAP + 1, false),
        ] {
            let owner = vec![b'o'; len];
            let mut b = Vec::new();
            encode_v3(fields(5, 1, Some((&owner, WALL0 + 10))), &mut b);
            assert_eq!(
                Persisted::decode_v2(&b).is_some(),
                ok,
                "owner of {len} bytes"
            );
        }
        // Values the structure allows but a lease cannot have: same checks as v1.
        for (token, held) in [
            (TOKEN_LIMIT, None),
            (u64::MAX, None),
            (TOKEN_LIMIT, Some((&b"a"[..], WALL0 + 10))),
            (0, Some((&b"a"[..], WALL0 + 10))),
        ] {
            let mut b = Vec::new();
            encode_v3(fields(token, 1, held), &mut b);
            let p = Persisted::decode_v2(&b).expect("structurally fine");
            assert!(
                Lease::from_persisted(p, at(1000)).is_none(),
                "{token} {held:?}"
            );
        }
        // An expiry beyond the TTL cap from the load's wall clock (the loading server's clock
        // weeks behind) loads, its remaining time clamped, its token kept (issue 24).
        let far = WALL0 + 1000 + TTL_HARD_CAP_MS + 1;
        let mut b = Vec::new();
        encode_v3(fields(5, 3, Some((&b"a"[..], far))), &mut b);
        let p = Persisted::decode_v2(&b).expect("structurally fine");
        let (l, clamped) = Lease::load_persisted(p.clone(), at(1000), 30_000).expect("loads");
        assert_eq!(clamped, Some(TTL_HARD_CAP_MS + 1));
        assert_eq!(
            l.holder(at(1000))
                .map(|h| (h.owner.to_vec(), h.token, h.pttl_ms)),
            Some((b"a".to_vec(), 5, 30_000))
        );
        assert_eq!(l.grants(), 3);
        let l = Lease::from_persisted(p, at(1000)).expect("loads");
        assert_eq!(l.holder(at(1000)).map(|h| h.pttl_ms), Some(TTL_HARD_CAP_MS));
        // Within the cap nothing is clamped.
        let mut b = Vec::new();
        encode_v3(
            fields(5, 3, Some((&b"a"[..], WALL0 + 1000 + TTL_HARD_CAP_MS))),
            &mut b,
        );
        let p = Persisted::decode_v2(&b).expect("structurally fine");
        let (l, clamped) = Lease::load_persisted(p, at(1000), 30_000).expect("loads");
        assert_eq!(clamped, None);
        assert_eq!(l.holder(at(1000)).map(|h| h.pttl_ms), Some(TTL_HARD_CAP_MS));
        // The largest valid token loads.
        let mut b = Vec::new();
        encode_v3(fields(TOKEN_LIMIT - 1, 1, None), &mut b);
        let p = Persisted::decode_v2(&b).unwrap();
        assert_eq!(
            Lease::from_persisted(p, at(1000)).map(|l| l.last_token()),
            Some(TOKEN_LIMIT - 1)
        );
    }

    /// Encoding version 3: without a membership id the bytes are version 2's (both decoders
    /// agree); with one, 8 bytes follow the grants, version 2 refuses it, every truncation
    /// and an id of 0 are refused, and the id survives the round trip into a `Lease`.
    #[test]
    fn v3_adds_the_membership_id_and_reads_v2() {
        let m = 0x0123_4567_89ab_cdef_u64;
        for held in [None, Some((&b"owner-x"[..], WALL0 + 10))] {
            let plain = fields(9, 2, held);
            let mut b2 = Vec::new();
            encode_v3(plain, &mut b2);
            assert_eq!(Persisted::decode_v2(&b2), Persisted::decode_v3(&b2));
            assert_eq!(Persisted::decode_v3(&b2).map(|p| p.membership), Some(None));
            let with = Saved {
                membership: Some(m),
                ..plain
            };
            let mut b3 = Vec::new();
            encode_v3(with, &mut b3);
            assert_eq!(b3.len(), b2.len() + 8);
            assert_eq!(b3[0], b2[0] | 2);
            assert_eq!(&b3[17..25], &m.to_le_bytes());
            let p = Persisted::decode_v3(&b3).expect("v3 decodes");
            assert_eq!(p.membership, Some(m));
            assert_eq!(p.as_saved(), with);
            assert_eq!(Persisted::decode_v2(&b3), None, "v2 never had the bit");
            let lease = Lease::from_persisted(p, at(0)).expect("loads");
            assert_eq!(lease.membership(), Some(m));
            let mut again = Vec::new();
            encode_v3(lease.saved(at(0)), &mut again);
            assert_eq!(again, b3);
            for cut in 0..25 {
                assert_eq!(Persisted::decode_v3(&b3[..cut]), None, "cut at {cut}");
            }
            let mut zero = b3.clone();
            zero[17..25].copy_from_slice(&0u64.to_le_bytes());
            assert_eq!(Persisted::decode_v3(&zero), None, "id 0");
            for flags in [4u8, 0x80, 0xff] {
                let mut b = b3.clone();
                b[0] |= flags;
                assert_eq!(Persisted::decode_v3(&b), None, "flags {flags:#x}");
            }
        }
        // A `Persisted` with an id of 0 (only a hostile caller builds one) is refused too.
        let p = Persisted {
            token: 1,
            held: None,
            grants: 0,
            membership: Some(0),
        };
        assert!(Lease::from_persisted(p, at(0)).is_none());
    }
}
