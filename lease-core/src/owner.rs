//! The holder's id as the lease stores it: a small-string byte buffer that keeps owners up
//! to `OWNER_INLINE` bytes inside the `Lease` value itself (one allocation per lease instead
//! of two), and the hard cap on any stored owner's length.

/// Owners up to this many bytes live inside the `Lease` itself. 30 makes `Owner` 32 bytes
/// and `Lease` 64 (with its quorum-mode membership id), one jemalloc size class: with a
/// 27-byte owner (a hostname-pid-random id) the value was a 48-byte `Lease` plus a 32-byte
/// owner allocation (80 B); it is 64 B. A longer owner costs a separate allocation (and 16 B
/// more than before the inline owner). It was 38 until the membership id (issue 32) took 8
/// bytes: keeping 38 would have moved every lease to the 80-byte class; now only owners of
/// 31..=38 bytes pay a 32- or 48-byte owner allocation.
pub const OWNER_INLINE: usize = 30;

/// Hard cap on a stored owner's length, independent of `lease.max-owner-len` (which can be
/// lowered at run time and must not make existing data unloadable).
pub const OWNER_HARD_CAP: usize = 64 * 1024;

/// A small-owner-optimised byte string. Canonical: `Inline` exactly when the length is at
/// most `OWNER_INLINE`, and the inline bytes past `len` are zero; equality and hashing go
/// through `as_slice` anyway, so they never depend on the representation.
#[derive(Clone)]
pub(crate) enum Owner {
    Inline { len: u8, bytes: [u8; OWNER_INLINE] },
    Heap(Box<[u8]>),
}

impl Owner {
    pub(crate) const EMPTY: Owner = Owner::Inline {
        len: 0,
        bytes: [0; OWNER_INLINE],
    };

    pub(crate) fn new(owner: &[u8]) -> Owner {
        if owner.len() <= OWNER_INLINE {
            let mut bytes = [0; OWNER_INLINE];
            bytes[..owner.len()].copy_from_slice(owner);
            Owner::Inline {
                len: owner.len() as u8,
                bytes,
            }
        } else {
            Owner::Heap(owner.into())
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            // `len <= OWNER_INLINE` by construction; `get` keeps even a broken invariant
            // from panicking.
            Owner::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            Owner::Heap(b) => b,
        }
    }

    /// Bytes allocated outside the `Lease` (for `MEMORY USAGE`).
    pub(crate) fn heap_len(&self) -> usize {
        match self {
            Owner::Inline { .. } => 0,
            Owner::Heap(b) => b.len(),
        }
    }
}

impl PartialEq for Owner {
    fn eq(&self, other: &Owner) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Owner {}

impl std::hash::Hash for Owner {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}
