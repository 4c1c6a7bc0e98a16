//! Argument parsing for every command, pure so it is tested without a server. The module
//! layer hands over raw byte slices; nothing here allocates a C string or can panic on any
//! byte sequence (owners may contain NUL bytes: they are binary-safe ids).

use super::error::LeaseError;
use super::state::TOKEN_LIMIT;

/// Limits in force (from `lease.max-ttl` / `lease.max-owner-len`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_ttl_ms: u64,
    pub max_owner_len: usize,
}

/// Strict decimal like Redis' string2ll for non-negative values: digits only, no sign, no
/// spaces, no leading zeros (except "0" itself), no overflow.
pub fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

pub fn parse_owner<'a>(b: &'a [u8], l: &Limits) -> Result<&'a [u8], LeaseError> {
    if b.is_empty() || b.len() > l.max_owner_len {
        return Err(LeaseError::BadOwner {
            max: l.max_owner_len,
        });
    }
    Ok(b)
}

pub fn parse_ttl(b: &[u8], l: &Limits) -> Result<u64, LeaseError> {
    match parse_u64(b) {
        Some(0) | None => Err(LeaseError::BadTtl),
        Some(v) if v > l.max_ttl_ms => Err(LeaseError::TtlTooLarge { max: l.max_ttl_ms }),
        Some(v) => Ok(v),
    }
}

pub fn parse_token(b: &[u8]) -> Result<u64, LeaseError> {
    match parse_u64(b) {
        Some(v) if v > 0 && v < TOKEN_LIMIT => Ok(v),
        _ => Err(LeaseError::BadToken),
    }
}

/// BLOCK timeout in ms; 0 = forever. Capped at 2^48 so adding it to a clock cannot overflow.
pub fn parse_timeout(b: &[u8]) -> Result<u64, LeaseError> {
    match parse_u64(b) {
        Some(v) if v < (1 << 48) => Ok(v),
        _ => Err(LeaseError::BadTimeout),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
    /// `Some(timeout_ms)` with BLOCK (0 = forever).
    pub block: Option<u64>,
}

/// `owner ttl [BLOCK timeout]` (everything after the key).
pub fn parse_acquire<'a>(args: &[&'a [u8]], l: &Limits) -> Result<AcquireArgs<'a>, LeaseError> {
    let (owner, ttl, rest) = match args {
        [owner, ttl, rest @ ..] => (owner, ttl, rest),
        _ => return Err(LeaseError::WrongArity("lease.acquire")),
    };
    let owner = parse_owner(owner, l)?;
    let ttl_ms = parse_ttl(ttl, l)?;
    let block = match rest {
        [] => None,
        [opt, t] if opt.eq_ignore_ascii_case(b"BLOCK") => Some(parse_timeout(t)?),
        [opt] if opt.eq_ignore_ascii_case(b"BLOCK") => {
            return Err(LeaseError::WrongArity("lease.acquire"))
        }
        [opt, ..] => return Err(LeaseError::UnknownOption(printable(opt))),
    };
    Ok(AcquireArgs {
        owner,
        ttl_ms,
        block,
    })
}

/// An option echoed back in an error: lossy UTF-8, at most 64 chars, no control characters
/// (an error reply must stay one line).
pub fn printable(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .chars()
        .take(64)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        max_ttl_ms: 30_000,
        max_owner_len: 8,
    };

    #[test]
    fn integers_are_strict() {
        for ok in [("0", 0), ("1", 1), ("18446744073709551615", u64::MAX)] {
            assert_eq!(parse_u64(ok.0.as_bytes()), Some(ok.1));
        }
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1 ",
            "01",
            "1.5",
            "1e3",
            "18446744073709551616",
            "abc",
            "\0",
        ] {
            assert_eq!(parse_u64(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn each_argument_error() {
        assert_eq!(parse_ttl(b"0", &L), Err(LeaseError::BadTtl));
        assert_eq!(parse_ttl(b"-5", &L), Err(LeaseError::BadTtl));
        assert_eq!(
            parse_ttl(b"30001", &L),
            Err(LeaseError::TtlTooLarge { max: 30_000 })
        );
        assert_eq!(parse_ttl(b"30000", &L), Ok(30_000));
        assert_eq!(parse_token(b"0"), Err(LeaseError::BadToken));
        assert_eq!(parse_token(b"9007199254740992"), Err(LeaseError::BadToken));
        assert_eq!(parse_token(b"9007199254740991"), Ok(TOKEN_LIMIT - 1));
        assert_eq!(parse_owner(b"", &L), Err(LeaseError::BadOwner { max: 8 }));
        assert_eq!(
            parse_owner(b"123456789", &L),
            Err(LeaseError::BadOwner { max: 8 })
        );
        assert_eq!(parse_owner(b"a\0b", &L), Ok(&b"a\0b"[..]));
        assert_eq!(parse_timeout(b"0"), Ok(0));
        assert_eq!(parse_timeout(b"-1"), Err(LeaseError::BadTimeout));
    }

    #[test]
    fn acquire_options() {
        let p = |a: &[&str]| {
            let v: Vec<&[u8]> = a.iter().map(|s| s.as_bytes()).collect();
            parse_acquire(&v, &L).map(|x| (x.owner.to_vec(), x.ttl_ms, x.block))
        };
        assert_eq!(p(&["o", "100"]), Ok((b"o".to_vec(), 100, None)));
        assert_eq!(
            p(&["o", "100", "block", "0"]),
            Ok((b"o".to_vec(), 100, Some(0)))
        );
        assert_eq!(
            p(&["o", "100", "BLOCK", "250"]),
            Ok((b"o".to_vec(), 100, Some(250)))
        );
        assert_eq!(p(&["o"]), Err(LeaseError::WrongArity("lease.acquire")));
        assert_eq!(
            p(&["o", "100", "BLOCK"]),
            Err(LeaseError::WrongArity("lease.acquire"))
        );
        assert_eq!(
            p(&["o", "100", "NX"]),
            Err(LeaseError::UnknownOption("NX".into()))
        );
        assert_eq!(
            p(&["o", "100", "BLOCK", "1", "x"]),
            Err(LeaseError::UnknownOption("BLOCK".into()))
        );
        assert_eq!(p(&["o", "100", "BLOCK", "x"]), Err(LeaseError::BadTimeout));
        assert!(printable(b"a\r\nb").chars().all(|c| !c.is_control()));
    }
}
