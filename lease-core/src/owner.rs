//! The holder's id as the lease stores it, together with the key's quorum-mode membership
//! binding: a small-string byte buffer that keeps owners up to `OWNER_INLINE` bytes inside the
//! `Lease` value itself (one allocation per lease instead of two), and the hard cap on any
//! stored owner's length.
//!
//! Why the binding lives here and not in a field of its own: a `u64` field would grow the
//! `Lease` from 64 to 72 bytes, i.e. move every lease to jemalloc's 80-byte class, for an id
//! only quorum mode uses (a handful of keys on a few nodes). Here a key bound to a membership
//! keeps the id in the last 8 inline bytes, so a bound lease inlines owners up to
//! `OWNER_INLINE - 8` bytes and an unbound one (single-primary mode: every lease there) up to
//! `OWNER_INLINE`, exactly as before the binding existed (`memory_usage_is_small`).

/// Owners up to this many bytes live inside the `Lease` itself (up to `OWNER_INLINE - 8`
/// when the key is bound to a membership id). 38 makes `Owner` 40 bytes and `Lease` 64, one
/// jemalloc size class: with a 27-byte owner (a hostname-pid-random id) the value was a
/// 48-byte `Lease` plus a 32-byte owner allocation (80 B); it is 64 B now. A longer owner
/// costs a separate allocation as before (and 16 B more than before).
pub const OWNER_INLINE: usize = 38;

/// Hard cap on a stored owner's length, independent of `lease.max-owner-len` (which can be
/// lowered at run time and must not make existing data unloadable).
pub const OWNER_HARD_CAP: usize = 64 * 1024;

/// Bit 7 of the inline length: the membership id is in the last 8 inline bytes.
const BOUND: u8 = 0x80;
/// Where the inline membership id starts; a bound inline owner is at most this long.
const ID_AT: usize = OWNER_INLINE - 8;
const ID_LEN: usize = 8;

/// A small-owner-optimised byte string plus the key's membership id (never 0; `None` =
/// bound to nothing). Canonical: `Inline` exactly when the owner fits (`OWNER_INLINE`, or
/// `ID_AT` when bound), unused inline bytes are zero, and a heap buffer of a bound key ends
/// with the id (`HeapBound`); equality and hashing go through `as_slice` and `membership`,
/// so they never depend on the representation.
#[derive(Clone)]
pub(crate) enum Owner {
    /// `len & !BOUND` owner bytes first; with `BOUND`, the id (little endian) at `ID_AT`.
    Inline { len: u8, bytes: [u8; OWNER_INLINE] },
    /// The owner, unbound.
    Heap(Box<[u8]>),
    /// The owner followed by the id (little endian, `ID_LEN` bytes).
    HeapBound(Box<[u8]>),
}

impl Owner {
    pub(crate) const EMPTY: Owner = Owner::Inline {
        len: 0,
        bytes: [0; OWNER_INLINE],
    };

    /// `owner` with the binding `membership` (`Some(0)` counts as none).
    pub(crate) fn build(owner: &[u8], membership: Option<u64>) -> Owner {
        match membership.filter(|&m| m != 0) {
            None if owner.len() <= OWNER_INLINE => {
                let mut bytes = [0; OWNER_INLINE];
                bytes[..owner.len()].copy_from_slice(owner);
                Owner::Inline {
                    len: owner.len() as u8,
                    bytes,
                }
            }
            None => Owner::Heap(owner.into()),
            Some(m) if owner.len() <= ID_AT => {
                let mut bytes = [0; OWNER_INLINE];
                bytes[..owner.len()].copy_from_slice(owner);
                bytes[ID_AT..].copy_from_slice(&m.to_le_bytes());
                Owner::Inline {
                    len: owner.len() as u8 | BOUND,
                    bytes,
                }
            }
            Some(m) => {
                let mut v = Vec::with_capacity(owner.len() + ID_LEN);
                v.extend_from_slice(owner);
                v.extend_from_slice(&m.to_le_bytes());
                Owner::HeapBound(v.into())
            }
        }
    }

    /// A new holder (empty: free), the binding kept.
    pub(crate) fn with_owner(&self, owner: &[u8]) -> Owner {
        Owner::build(owner, self.membership())
    }

    /// The same holder, another binding.
    pub(crate) fn with_membership(&self, membership: Option<u64>) -> Owner {
        Owner::build(self.as_slice(), membership)
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            // `len <= OWNER_INLINE` by construction; `get` keeps even a broken invariant
            // from panicking.
            Owner::Inline { len, bytes } => bytes.get(..usize::from(*len & !BOUND)).unwrap_or(&[]),
            Owner::Heap(b) => b,
            Owner::HeapBound(b) => b.get(..b.len().saturating_sub(ID_LEN)).unwrap_or(&[]),
        }
    }

    pub(crate) fn membership(&self) -> Option<u64> {
        let id = match self {
            Owner::Inline { len, bytes } if len & BOUND != 0 => bytes.get(ID_AT..),
            Owner::HeapBound(b) => b.len().checked_sub(ID_LEN).and_then(|i| b.get(i..)),
            _ => None,
        }?;
        let id: [u8; ID_LEN] = id.try_into().ok()?;
        Some(u64::from_le_bytes(id)).filter(|&m| m != 0)
    }

    /// Bytes allocated outside the `Lease` (for `MEMORY USAGE`).
    pub(crate) fn heap_len(&self) -> usize {
        match self {
            Owner::Inline { .. } => 0,
            Owner::Heap(b) | Owner::HeapBound(b) => b.len(),
        }
    }
}

impl PartialEq for Owner {
    fn eq(&self, other: &Owner) -> bool {
        self.as_slice() == other.as_slice() && self.membership() == other.membership()
    }
}

impl Eq for Owner {}

impl std::hash::Hash for Owner {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
        self.membership().hash(state);
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("owner", &self.as_slice())
            .field("membership", &self.membership())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every owner length around both inline limits, bound and unbound: the owner and the
    /// id read back, rebinding and re-owning keep the other half, the representation is the
    /// canonical one, and the heap is used only past the limit that applies.
    #[test]
    fn owner_and_binding_share_the_inline_bytes() {
        assert_eq!(std::mem::size_of::<Owner>(), 40);
        let m = 0x0102_0304_0506_0708_u64;
        for len in [
            0,
            1,
            ID_AT - 1,
            ID_AT,
            ID_AT + 1,
            OWNER_INLINE,
            OWNER_INLINE + 1,
            300,
        ] {
            let owner: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
            for membership in [None, Some(m), Some(u64::MAX)] {
                let o = Owner::build(&owner, membership);
                assert_eq!(o.as_slice(), &owner[..], "{len} {membership:?}");
                assert_eq!(o.membership(), membership, "{len}");
                let limit = if membership.is_some() {
                    ID_AT
                } else {
                    OWNER_INLINE
                };
                let extra = match (len > limit, membership) {
                    (false, _) => 0,
                    (true, None) => len,
                    (true, Some(_)) => len + ID_LEN,
                };
                assert_eq!(o.heap_len(), extra, "{len} {membership:?}");
                let rebound = o.with_membership(Some(7));
                assert_eq!(
                    (rebound.as_slice(), rebound.membership()),
                    (&owner[..], Some(7))
                );
                let unbound = o.with_membership(None);
                assert_eq!(
                    (unbound.as_slice(), unbound.membership()),
                    (&owner[..], None)
                );
                let freed = o.with_owner(&[]);
                assert_eq!(
                    (freed.as_slice(), freed.membership()),
                    (&[][..], membership)
                );
                assert_eq!(freed.heap_len(), 0, "a free key never allocates");
                let again = freed.with_owner(&owner);
                assert_eq!(again, o);
                assert_eq!(format!("{again:?}"), format!("{o:?}"));
            }
        }
        assert_ne!(Owner::build(b"a", None), Owner::build(b"a", Some(m)));
        assert_eq!(Owner::build(b"a", Some(0)), Owner::build(b"a", None));
    }
}
