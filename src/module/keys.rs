//! The one way to reach the lease stored at a key: open it (read or read-write), get the
//! lease (`None` for a missing key, WRONGTYPE for another type), create one, or visit every
//! lease of the selected database. Raw calls, because the crate's key wrapper would allocate
//! a `RedisString` per use and its type check is the same as ours.

use crate::lease::{Lease, LeaseError};
use crate::module::datatype::LEASE_TYPE;
use redis_module::raw;
use std::os::raw::{c_int, c_void};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Read-only commands (`LEASE.GET`, `LEASE.INFO`; allowed on replicas).
    Read,
    /// Everything that may change the lease or create the key.
    Write,
}

/// An open key, closed on drop.
pub struct LeaseKey {
    key: *mut raw::RedisModuleKey,
}

fn lease_type() -> *mut raw::RedisModuleType {
    *LEASE_TYPE.raw_type.borrow()
}

/// The lease in an open key handle.
///
/// # Safety
/// `key` is null or a key handle Redis opened and has not closed; the returned reference
/// must not outlive that handle, and no other reference to the value may exist meanwhile
/// (Redis runs module code on its main thread, one callback at a time).
pub unsafe fn lease_in<'a>(
    key: *mut raw::RedisModuleKey,
) -> Result<Option<&'a mut Lease>, LeaseError> {
    if key.is_null() {
        return Ok(None);
    }
    // SAFETY: `key` is a valid open handle (caller's contract); these calls only read it.
    unsafe {
        let key_type =
            raw::RedisModule_KeyType.map_or(raw::REDISMODULE_KEYTYPE_EMPTY as c_int, |f| f(key));
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(None);
        }
        if key_type != raw::REDISMODULE_KEYTYPE_MODULE as c_int {
            return Err(LeaseError::WrongType);
        }
        let ty = raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(key));
        if ty.is_null() || ty != lease_type() {
            return Err(LeaseError::WrongType);
        }
        let v = raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(key));
        // Every value of our type is a `Box<Lease>` (see datatype::lease_ref).
        Ok(v.cast::<Lease>().as_mut())
    }
}

impl LeaseKey {
    /// Opens `name` in the context's selected database. In `Read` mode a missing key gives a
    /// null handle, which `lease` reports as no lease.
    pub fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        mode: Mode,
    ) -> LeaseKey {
        let m = match mode {
            Mode::Read => raw::REDISMODULE_READ,
            Mode::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        } as c_int;
        // SAFETY: ctx and name are valid for the current callback; the handle is closed in
        // `drop`, before the callback returns.
        let key =
            unsafe { raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |f| f(ctx, name, m)) };
        LeaseKey { key: key.cast() }
    }

    pub fn lease(&mut self) -> Result<Option<&mut Lease>, LeaseError> {
        // SAFETY: the handle is open until `self` drops, and `&mut self` keeps the returned
        // reference unique and no longer-lived than the handle.
        unsafe { lease_in(self.key) }
    }

    /// Stores a new lease in a key opened for writing. WRONGTYPE if the key cannot take it.
    pub fn create(&mut self, lease: Lease) -> Result<(), LeaseError> {
        let Some(set) = (
            // SAFETY: reading a function pointer Redis filled in at module load.
            unsafe { raw::RedisModule_ModuleTypeSetValue }
        ) else {
            return Err(LeaseError::WrongType);
        };
        if self.key.is_null() {
            return Err(LeaseError::WrongType);
        }
        let value = Box::into_raw(Box::new(lease)).cast::<c_void>();
        // SAFETY: the handle is open for writing; on success Redis owns `value` and frees it
        // through `datatype::free`.
        let status = unsafe { set(self.key, lease_type(), value) };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            // SAFETY: Redis refused the value, so it is still ours: reclaim it.
            drop(unsafe { Box::from_raw(value.cast::<Lease>()) });
            Err(LeaseError::WrongType)
        }
    }
}

impl Drop for LeaseKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: the handle was opened by `open` and is closed exactly once, here.
            unsafe {
                if let Some(close) = raw::RedisModule_CloseKey {
                    close(self.key);
                }
            }
        }
    }
}

/// Calls `f(name, lease)` for each lease key of the context's selected database.
pub fn scan_leases(ctx: *mut raw::RedisModuleCtx, f: &mut dyn FnMut(&[u8], &mut Lease)) {
    /// # Safety
    /// Called by `RedisModule_Scan` with the key it opened for us and the `privdata` we
    /// passed (a `&mut &mut dyn FnMut` that outlives the scan).
    unsafe extern "C" fn cb(
        _ctx: *mut raw::RedisModuleCtx,
        keyname: *mut raw::RedisModuleString,
        key: *mut raw::RedisModuleKey,
        privdata: *mut c_void,
    ) {
        // SAFETY: see the function's contract; the key stays open for this call only.
        unsafe {
            let f = &mut *(privdata as *mut &mut dyn FnMut(&[u8], &mut Lease));
            if let Ok(Some(lease)) = lease_in(key) {
                f(redis_module::RedisString::string_as_slice(keyname), lease);
            }
        }
    }
    // SAFETY: the cursor is created and destroyed here; the callback only reads the key
    // Redis opened for it; `f` outlives the scan.
    unsafe {
        let (Some(create), Some(scan), Some(destroy)) = (
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_Scan,
            raw::RedisModule_ScanCursorDestroy,
        ) else {
            return;
        };
        let cursor = create();
        let mut fref: &mut dyn FnMut(&[u8], &mut Lease) = f;
        let p = &mut fref as *mut &mut dyn FnMut(&[u8], &mut Lease) as *mut c_void;
        while scan(ctx, cursor, Some(cb), p) != 0 {}
        destroy(cursor);
    }
}
