//! One expiry-timer entry, packed into 16 bytes plus one small allocation: every held lease
//! has one, so its size is part of a lease's memory cost (docs/scale.md). A plain
//! `(u64, i32, Box<[u8]>)` would take 32 bytes in the heap's vector plus the key copy (a
//! 13-byte key: 16 more), 48 per held lease; this takes 16 + 16.
//!
//! The entry names its key, `(deadline, db, key bytes)`; only the encoding is packed. It never points at a lease value: values are freed by `DEL`, replaced
//! by a re-grant, renamed, moved, swapped between databases, and an entry outlives all of
//! that. So the safety argument of `timers` is unchanged: a due entry only makes the module
//! open the key by name and let the engine judge the value found there against that
//! value's own deadline (`executor::check_expiry`). An entry for a deleted key finds
//! nothing; for a re-granted or renewed key it finds a deadline not yet reached and
//! re-arms; for another type at the name it gets WRONGTYPE and does nothing. An entry can
//! at worst cause one needless look at a key, never an early expiry or a missed one.
//!
//! Layout of the allocation: `[db as LEB128][key length as LEB128][key bytes]`, so the
//! pointer is thin (8 bytes, where a `Box<[u8]>` is 16) and a 13-byte key in db 0 takes
//! 15 bytes (jemalloc's 16-byte class).

use std::ptr::NonNull;

/// An owned, immutable `(db, key)` behind one thin pointer. Behaves like a `Box`: unique
/// owner, freed on drop.
pub struct DueKey(NonNull<u8>);

// SAFETY: `DueKey` owns its allocation exclusively (like `Box<[u8]>`, which is Send and
// Sync); nothing else holds the pointer, and the bytes are never mutated after `new`.
unsafe impl Send for DueKey {}
// SAFETY: as above; `&DueKey` only allows reading immutable bytes.
unsafe impl Sync for DueKey {}

fn leb128_len(v: u64) -> usize {
    (64 - v.leading_zeros() as usize).max(1).div_ceil(7)
}

fn put_leb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

impl DueKey {
    pub fn new(db: i32, key: &[u8]) -> DueKey {
        // A db number is never negative (Redis' SELECT refuses it); stored as u32 anyway.
        let (db, len) = (u64::from(db as u32), key.len() as u64);
        // Exact capacity: `into_boxed_slice` would otherwise reallocate to shrink.
        let mut buf = Vec::with_capacity(leb128_len(db) + leb128_len(len) + key.len());
        put_leb128(&mut buf, db);
        put_leb128(&mut buf, len);
        buf.extend_from_slice(key);
        let raw: *mut [u8] = Box::into_raw(buf.into_boxed_slice());
        // A boxed slice of at least 2 bytes: a real, non-null allocation.
        DueKey(NonNull::new(raw.cast::<u8>()).unwrap_or(NonNull::dangling()))
    }

    /// Reads one LEB128 number at `*at`, advancing it.
    ///
    /// # Safety
    /// `self` was built by `new`, so a complete number starts at `*at` inside the
    /// allocation.
    unsafe fn leb128(&self, at: &mut usize) -> u64 {
        let (mut v, mut shift) = (0u64, 0u32);
        loop {
            // SAFETY: within the header `new` wrote (caller's contract).
            let byte = unsafe { *self.0.as_ptr().add(*at) };
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    /// (db, key bytes, total allocation length).
    fn decode(&self) -> (i32, &[u8], usize) {
        let mut at = 0;
        // SAFETY: `self` was built by `new` (the only constructor): the header holds two
        // complete numbers, followed by exactly `len` key bytes, all inside the allocation,
        // which lives as long as `self`.
        unsafe {
            let db = self.leb128(&mut at) as u32 as i32;
            let len = self.leb128(&mut at) as usize;
            let key = std::slice::from_raw_parts(self.0.as_ptr().add(at), len);
            (db, key, at + len)
        }
    }

    pub fn db(&self) -> i32 {
        self.decode().0
    }

    pub fn key(&self) -> &[u8] {
        self.decode().1
    }
}

impl Drop for DueKey {
    fn drop(&mut self) {
        let total = self.decode().2;
        let slice = std::ptr::slice_from_raw_parts_mut(self.0.as_ptr(), total);
        // SAFETY: the pointer and length are exactly those of the `Box<[u8]>` turned into a
        // raw pointer in `new` (the length is re-read from the header it holds), and it is
        // freed once, here.
        drop(unsafe { Box::from_raw(slice) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_thin() {
        assert_eq!(std::mem::size_of::<DueKey>(), 8);
        assert_eq!(std::mem::size_of::<(u64, DueKey)>(), 16);
        let long = vec![0xffu8; 100_000];
        for (db, key) in [
            (0, &b"lease:0000000"[..]),
            (0, &b""[..]),
            (15, &b"k"[..]),
            (127, &b"\x80\x00\xff"[..]),
            (128, &long[..127]),
            (i32::MAX, &long[..128]),
            (70_000, &long[..]),
        ] {
            let k = DueKey::new(db, key);
            assert_eq!((k.db(), k.key()), (db, key));
        }
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = vec![];
            put_leb128(&mut out, v);
            assert_eq!(out.len(), leb128_len(v), "{v}");
        }
        // The case the memory figures measure: db 0, 13-byte key, 15 bytes allocated.
        assert_eq!(DueKey::new(0, b"lease:0000000").decode().2, 15);
    }
}
