//! Argument parsing for every command, pure so it is tested without a server. The module
//! layer hands over raw byte slices; nothing here allocates a C string or can panic on any
//! byte sequence (owners may contain NUL bytes: they are binary-safe ids).

use crate::error::LeaseError;
use crate::request::Request;
use crate::state::{Apply, Lease, TOKEN_LIMIT};

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
    if b.len() <= 19 {
        // At most 19 digits cannot overflow u64: no checked arithmetic on the hot path
        // (every token and TTL of every command goes through here).
        for &c in b {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v = v * 10 + u64::from(d);
        }
        return Some(v);
    }
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

/// A quorum-mode membership id (docs/quorum.md §4.1, docs/client-protocol.md Q9): exactly
/// 16 hex digits (either case), not all zero (0 stands for "none" in the value).
pub fn parse_membership(b: &[u8]) -> Result<u64, LeaseError> {
    if b.len() != 16 || !b.iter().all(u8::is_ascii_hexdigit) {
        return Err(LeaseError::BadMembership);
    }
    let v = b.iter().fold(0u64, |v, &c| {
        // Every byte is a hex digit (checked above), so `to_digit` cannot fail here.
        (v << 4) | u64::from(char::from(c).to_digit(16).unwrap_or(0))
    });
    if v == 0 {
        return Err(LeaseError::BadMembership);
    }
    Ok(v)
}

/// The optional `MEMBERSHIP id` that ends RENEW, RAISE and the effects.
fn trailing_membership(rest: &[&[u8]], cmd: &'static str) -> Result<Option<u64>, LeaseError> {
    match rest {
        [] => Ok(None),
        [opt, id] if opt.eq_ignore_ascii_case(b"MEMBERSHIP") => parse_membership(id).map(Some),
        [opt] if opt.eq_ignore_ascii_case(b"MEMBERSHIP") => Err(LeaseError::WrongArity(cmd)),
        [opt, ..] => Err(LeaseError::UnknownOption(printable(opt))),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
    /// `Some(timeout_ms)` with BLOCK (0 = forever).
    pub block: Option<u64>,
    /// `Some(id)` with MEMBERSHIP (quorum mode).
    pub membership: Option<u64>,
}

/// `owner ttl [BLOCK timeout] [MEMBERSHIP id]` (everything after the key; the options in
/// any order, each at most once, not both).
pub fn parse_acquire<'a>(args: &[&'a [u8]], l: &Limits) -> Result<AcquireArgs<'a>, LeaseError> {
    let (owner, ttl, mut rest) = match args {
        [owner, ttl, rest @ ..] => (owner, ttl, rest),
        _ => return Err(LeaseError::WrongArity("lease.acquire")),
    };
    let owner = parse_owner(owner, l)?;
    let ttl_ms = parse_ttl(ttl, l)?;
    let (mut block, mut membership) = (None, None);
    while let [opt, tail @ ..] = rest {
        let is_block = opt.eq_ignore_ascii_case(b"BLOCK");
        let is_membership = opt.eq_ignore_ascii_case(b"MEMBERSHIP");
        let repeated = (is_block && block.is_some()) || (is_membership && membership.is_some());
        if !(is_block || is_membership) || repeated {
            return Err(LeaseError::UnknownOption(printable(opt)));
        }
        let [value, tail @ ..] = tail else {
            return Err(LeaseError::WrongArity("lease.acquire"));
        };
        if is_block {
            block = Some(parse_timeout(value)?);
        } else {
            membership = Some(parse_membership(value)?);
        }
        rest = tail;
    }
    if block.is_some() && membership.is_some() {
        return Err(LeaseError::MembershipWithBlock);
    }
    Ok(AcquireArgs {
        owner,
        ttl_ms,
        block,
        membership,
    })
}

/// `LEASE.ACQUIRE`: everything after the key.
pub fn acquire_request<'a>(args: &[&'a [u8]], l: &Limits) -> Result<Request<'a>, LeaseError> {
    let a = parse_acquire(args, l)?;
    Ok(Request::Acquire {
        owner: a.owner,
        ttl_ms: a.ttl_ms,
        block: a.block,
        membership: a.membership,
    })
}

/// `LEASE.RENEW`: `owner token ttl [MEMBERSHIP id]` (arity checked by the command table).
pub fn renew_request<'a>(args: &[&'a [u8]], l: &Limits) -> Result<Request<'a>, LeaseError> {
    let [owner, token, ttl, rest @ ..] = args else {
        return Err(LeaseError::WrongArity("lease.renew"));
    };
    // Checked in this order (owner, token, ttl, membership): the first bad one is the error
    // reported.
    Ok(Request::Renew {
        owner: parse_owner(owner, l)?,
        token: parse_token(token)?,
        ttl_ms: parse_ttl(ttl, l)?,
        membership: trailing_membership(rest, "lease.renew")?,
    })
}

/// `LEASE.RELEASE`: `owner token`.
pub fn release_request<'a>(args: &[&'a [u8]], l: &Limits) -> Result<Request<'a>, LeaseError> {
    let [owner, token] = args else {
        return Err(LeaseError::WrongArity("lease.release"));
    };
    Ok(Request::Release {
        owner: parse_owner(owner, l)?,
        token: parse_token(token)?,
    })
}

/// `LEASE.RAISE`: `owner token newtoken [MEMBERSHIP id]`. A lower new token is a request
/// error (checked here, before the key is looked at): tokens on a key never go down.
pub fn raise_request<'a>(args: &[&'a [u8]], l: &Limits) -> Result<Request<'a>, LeaseError> {
    let [owner, token, new_token, rest @ ..] = args else {
        return Err(LeaseError::WrongArity("lease.raise"));
    };
    let owner = parse_owner(owner, l)?;
    let token = parse_token(token)?;
    let new_token = parse_token(new_token)?;
    if new_token < token {
        return Err(LeaseError::TokenBelow);
    }
    Ok(Request::Raise {
        owner,
        token,
        new_token,
        membership: trailing_membership(rest, "lease.raise")?,
    })
}

/// `LEASE.MEMBERSHIP`: `old new [TOKEN t]`, `old` an id or `NONE` (the key is bound to
/// nothing or does not exist), `new` an id, `t` a token.
pub fn membership_request<'a>(args: &[&'a [u8]], _: &Limits) -> Result<Request<'a>, LeaseError> {
    let [old, new, rest @ ..] = args else {
        return Err(LeaseError::WrongArity("lease.membership"));
    };
    let old = if old.eq_ignore_ascii_case(b"NONE") {
        None
    } else {
        Some(parse_membership(old)?)
    };
    let new = parse_membership(new)?;
    let token = match rest {
        [] => None,
        [opt, t] if opt.eq_ignore_ascii_case(b"TOKEN") => Some(parse_token(t)?),
        [opt] if opt.eq_ignore_ascii_case(b"TOKEN") => {
            return Err(LeaseError::WrongArity("lease.membership"))
        }
        [opt, ..] => return Err(LeaseError::UnknownOption(printable(opt))),
    };
    Ok(Request::Membership { old, new, token })
}

/// `LEASE.FENCE`: `token [command arg ...]`.
pub fn fence_request<'a>(args: &[&'a [u8]], _: &Limits) -> Result<Request<'a>, LeaseError> {
    let [token, rest @ ..] = args else {
        return Err(LeaseError::WrongArity("lease.fence"));
    };
    Ok(Request::Fence {
        token: parse_token(token)?,
        with_command: !rest.is_empty(),
    })
}

/// `LEASE.GET`: nothing after the key.
pub fn get_request<'a>(args: &[&'a [u8]], _: &Limits) -> Result<Request<'a>, LeaseError> {
    match args {
        [] => Ok(Request::Get),
        _ => Err(LeaseError::WrongArity("lease.get")),
    }
}

/// `LEASE.INFO`: nothing after the key.
pub fn info_request<'a>(args: &[&'a [u8]], _: &Limits) -> Result<Request<'a>, LeaseError> {
    match args {
        [] => Ok(Request::Info),
        _ => Err(LeaseError::WrongArity("lease.info")),
    }
}

/// `LEASE.APPLY`: `HOLD owner token expires_wall_ms` | `FREE token`, each optionally
/// followed by `MEMBERSHIP id` (the key's quorum-mode binding; without it the key replays
/// as bound to nothing). Only the primary's replication stream and AOF loading send it, but
/// that input is data too: every field is checked before it becomes state.
pub fn apply_request<'a>(args: &[&'a [u8]], _: &Limits) -> Result<Request<'a>, LeaseError> {
    parse_apply(args).map(Request::Apply)
}

pub fn parse_apply(a: &[&[u8]]) -> Result<Apply, LeaseError> {
    let int = |b: &[u8]| parse_u64(b).ok_or(LeaseError::BadEffect);
    let membership = |rest: &[&[u8]]| match rest {
        [] => Ok(None),
        [opt, id] if opt.eq_ignore_ascii_case(b"MEMBERSHIP") => parse_membership(id)
            .map(Some)
            .map_err(|_| LeaseError::BadEffect),
        _ => Err(LeaseError::BadEffect),
    };
    let eff = match a {
        [kind, owner, token, wall, rest @ ..] if kind.eq_ignore_ascii_case(b"HOLD") => {
            Apply::Hold {
                owner: owner.to_vec(),
                token: int(token)?,
                expires_wall_ms: int(wall)?,
                membership: membership(rest)?,
            }
        }
        [kind, token, rest @ ..] if kind.eq_ignore_ascii_case(b"FREE") => Apply::Free {
            token: int(token)?,
            membership: membership(rest)?,
        },
        _ => return Err(LeaseError::BadEffect),
    };
    Lease::validate_effect(&eff)?;
    Ok(eff)
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

    /// Both paths of `parse_u64` (≤ 19 digits unchecked, 20 checked) agree with the strict
    /// rule at their edges, and bytes next to the digits in ASCII are refused.
    #[test]
    fn parse_u64_edges() {
        let p = |s: &str| parse_u64(s.as_bytes());
        assert_eq!(p("0"), Some(0));
        assert_eq!(p("9999999999999999999"), Some(9_999_999_999_999_999_999));
        assert_eq!(p("18446744073709551615"), Some(u64::MAX));
        assert_eq!(p("18446744073709551616"), None);
        assert_eq!(p("99999999999999999999"), None);
        for bad in [
            "",
            "01",
            "+1",
            "-1",
            "1 ",
            "/",
            ":",
            "1/",
            "9:",
            "123456789012345678a",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
    }

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
        // The first word that is no option (or a repeated one) is named.
        assert_eq!(
            p(&["o", "100", "BLOCK", "1", "x"]),
            Err(LeaseError::UnknownOption("x".into()))
        );
        assert_eq!(
            p(&["o", "100", "BLOCK", "1", "BLOCK", "2"]),
            Err(LeaseError::UnknownOption("BLOCK".into()))
        );
        assert_eq!(p(&["o", "100", "BLOCK", "x"]), Err(LeaseError::BadTimeout));
        assert!(printable(b"a\r\nb").chars().all(|c| !c.is_control()));
    }

    #[test]
    fn effects_parse_strictly() {
        let p = |v: &[&str]| {
            let b: Vec<&[u8]> = v.iter().map(|s| s.as_bytes()).collect();
            parse_apply(&b)
        };
        assert_eq!(
            p(&["HOLD", "o", "7", "100"]),
            Ok(Apply::Hold {
                owner: b"o".to_vec(),
                token: 7,
                expires_wall_ms: 100,
                membership: None,
            })
        );
        assert_eq!(
            p(&["FREE", "7"]),
            Ok(Apply::Free {
                token: 7,
                membership: None
            })
        );
        assert_eq!(
            p(&["FREE", "0"]),
            Ok(Apply::Free {
                token: 0,
                membership: None
            })
        );
        for bad in [
            &["HOLD", "", "7", "1"][..],
            &["HOLD", "o", "0", "1"],
            &["FREE"],
            &["X", "1"],
            &["FREE", "-1"],
        ] {
            assert_eq!(p(bad), Err(LeaseError::BadEffect), "{bad:?}");
        }
    }

    #[test]
    fn request_parsers_check_fields_in_order() {
        let v =
            |a: &[&'static str]| -> Vec<&'static [u8]> { a.iter().map(|s| s.as_bytes()).collect() };
        assert_eq!(
            renew_request(&v(&["", "0", "0"]), &L),
            Err(LeaseError::BadOwner { max: 8 })
        );
        assert_eq!(
            renew_request(&v(&["o", "0", "0"]), &L),
            Err(LeaseError::BadToken)
        );
        assert_eq!(
            renew_request(&v(&["o", "1", "0"]), &L),
            Err(LeaseError::BadTtl)
        );
        assert_eq!(
            renew_request(&v(&["o", "1", "5"]), &L),
            Ok(Request::Renew {
                owner: b"o",
                token: 1,
                ttl_ms: 5,
                membership: None,
            })
        );
        assert_eq!(
            release_request(&v(&["o", "2"]), &L),
            Ok(Request::Release {
                owner: b"o",
                token: 2
            })
        );
        assert_eq!(
            fence_request(&v(&["2", "SET", "k", "v"]), &L),
            Ok(Request::Fence {
                token: 2,
                with_command: true
            })
        );
        assert_eq!(fence_request(&v(&["x"]), &L), Err(LeaseError::BadToken));
        assert_eq!(
            raise_request(&v(&["o", "5", "5"]), &L),
            Ok(Request::Raise {
                owner: b"o",
                token: 5,
                new_token: 5,
                membership: None,
            })
        );
        assert_eq!(
            raise_request(&v(&["o", "5", "4"]), &L),
            Err(LeaseError::TokenBelow)
        );
        assert_eq!(
            raise_request(&v(&["o", "5", "9007199254740992"]), &L),
            Err(LeaseError::BadToken)
        );
        assert_eq!(
            raise_request(&v(&["", "5", "6"]), &L),
            Err(LeaseError::BadOwner { max: 8 })
        );
        assert_eq!(
            raise_request(&v(&["o", "x", "6"]), &L),
            Err(LeaseError::BadToken)
        );
        assert_eq!(get_request(&v(&[]), &L), Ok(Request::Get));
        assert_eq!(
            info_request(&v(&["x"]), &L),
            Err(LeaseError::WrongArity("lease.info"))
        );
        assert_eq!(apply_request(&v(&["FREE"]), &L), Err(LeaseError::BadEffect));
    }

    /// `MEMBERSHIP id` (quorum mode): 16 hex digits in either case, not all zero; on
    /// ACQUIRE in any order with BLOCK but never both, on RENEW and RAISE last, on the
    /// effects optional; every bad spelling is the one-line error, never a partial request.
    #[test]
    fn membership_ids_parse_strictly() {
        let id = "0123456789abcdef";
        assert_eq!(parse_membership(id.as_bytes()), Ok(0x0123_4567_89ab_cdef));
        assert_eq!(
            parse_membership(b"0123456789ABCDEF"),
            Ok(0x0123_4567_89ab_cdef)
        );
        assert_eq!(parse_membership(b"ffffffffffffffff"), Ok(u64::MAX));
        for bad in [
            "",
            "0123456789abcde",
            "0123456789abcdef0",
            "0000000000000000",
            "0123456789abcdeg",
            "0x23456789abcdef",
            " 123456789abcdef",
            "+123456789abcdef",
            "0123456789abcd\u{e9}",
        ] {
            assert_eq!(
                parse_membership(bad.as_bytes()),
                Err(LeaseError::BadMembership),
                "{bad:?}"
            );
        }
        let v =
            |a: &[&'static str]| -> Vec<&'static [u8]> { a.iter().map(|s| s.as_bytes()).collect() };
        let acq = |a: &[&'static str]| acquire_request(&v(a), &L);
        assert_eq!(
            acq(&["o", "100", "membership", id]),
            Ok(Request::Acquire {
                owner: b"o",
                ttl_ms: 100,
                block: None,
                membership: Some(0x0123_4567_89ab_cdef)
            })
        );
        assert_eq!(
            acq(&["o", "100", "MEMBERSHIP"]),
            Err(LeaseError::WrongArity("lease.acquire"))
        );
        assert_eq!(
            acq(&["o", "100", "MEMBERSHIP", "xyz"]),
            Err(LeaseError::BadMembership)
        );
        assert_eq!(
            acq(&["o", "100", "MEMBERSHIP", id, "MEMBERSHIP", id]),
            Err(LeaseError::UnknownOption("MEMBERSHIP".into()))
        );
        for both in [
            &["o", "100", "MEMBERSHIP", id, "BLOCK", "0"][..],
            &["o", "100", "BLOCK", "0", "MEMBERSHIP", id],
        ] {
            assert_eq!(acq(both), Err(LeaseError::MembershipWithBlock), "{both:?}");
        }
        assert_eq!(
            renew_request(&v(&["o", "1", "5", "MEMBERSHIP", id]), &L),
            Ok(Request::Renew {
                owner: b"o",
                token: 1,
                ttl_ms: 5,
                membership: Some(0x0123_4567_89ab_cdef)
            })
        );
        for (bad, err) in [
            (
                &["o", "1", "5", "MEMBERSHIP"][..],
                LeaseError::WrongArity("lease.renew"),
            ),
            (
                &["o", "1", "5", "MEMBERSHIP", "0"],
                LeaseError::BadMembership,
            ),
            (
                &["o", "1", "5", "NX", id],
                LeaseError::UnknownOption("NX".into()),
            ),
            (
                &["o", "1", "5", "MEMBERSHIP", id, "x"],
                LeaseError::UnknownOption("MEMBERSHIP".into()),
            ),
        ] {
            assert_eq!(renew_request(&v(bad), &L), Err(err), "{bad:?}");
        }
        assert_eq!(
            raise_request(&v(&["o", "5", "6", "MEMBERSHIP", id]), &L),
            Ok(Request::Raise {
                owner: b"o",
                token: 5,
                new_token: 6,
                membership: Some(0x0123_4567_89ab_cdef)
            })
        );
        assert_eq!(
            raise_request(&v(&["o", "5", "6", "MEMBERSHIP", "12"]), &L),
            Err(LeaseError::BadMembership)
        );
        assert_eq!(
            membership_request(&v(&["none", id]), &L),
            Ok(Request::Membership {
                old: None,
                new: 0x0123_4567_89ab_cdef,
                token: None
            })
        );
        assert_eq!(
            membership_request(&v(&[id, "fedcba9876543210", "token", "77"]), &L),
            Ok(Request::Membership {
                old: Some(0x0123_4567_89ab_cdef),
                new: 0xfedc_ba98_7654_3210,
                token: Some(77)
            })
        );
        for (bad, err) in [
            (
                &[id, id, "TOKEN"][..],
                LeaseError::WrongArity("lease.membership"),
            ),
            (&[id, id, "TOKEN", "0"], LeaseError::BadToken),
            (&[id, id, "TOKEN", "9007199254740992"], LeaseError::BadToken),
            (&[id, id, "NX", "1"], LeaseError::UnknownOption("NX".into())),
            (
                &[id, id, "TOKEN", "1", "x"],
                LeaseError::UnknownOption("TOKEN".into()),
            ),
        ] {
            assert_eq!(membership_request(&v(bad), &L), Err(err), "{bad:?}");
        }
        for bad in [&[id, "NONE"][..], &["x", id], &[id, "0000000000000000"]] {
            assert_eq!(
                membership_request(&v(bad), &L),
                Err(LeaseError::BadMembership),
                "{bad:?}"
            );
        }
        assert_eq!(
            membership_request(&v(&[id]), &L),
            Err(LeaseError::WrongArity("lease.membership"))
        );
        let eff = |a: &[&'static str]| parse_apply(&v(a));
        assert_eq!(
            eff(&["FREE", "7", "MEMBERSHIP", id]),
            Ok(Apply::Free {
                token: 7,
                membership: Some(0x0123_4567_89ab_cdef)
            })
        );
        assert_eq!(
            eff(&["HOLD", "o", "7", "100", "MEMBERSHIP", id]),
            Ok(Apply::Hold {
                owner: b"o".to_vec(),
                token: 7,
                expires_wall_ms: 100,
                membership: Some(0x0123_4567_89ab_cdef)
            })
        );
        for bad in [
            &["FREE", "7", "MEMBERSHIP"][..],
            &["FREE", "7", "MEMBERSHIP", "0000000000000000"],
            &["FREE", "7", "X", id],
            &["HOLD", "o", "7", "100", "MEMBERSHIP", id, "x"],
        ] {
            assert_eq!(eff(bad), Err(LeaseError::BadEffect), "{bad:?}");
        }
    }
}
