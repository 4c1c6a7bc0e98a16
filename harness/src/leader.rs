//! Who leads now, from the electors' own histories (docs/conformance.md's `grant`/`stop`).
//!
//! Faults aimed at the leader used to ask the server (`LEASE.GET` and the owner id's
//! prefix). A peer elector (redsync, Redisson, etcd, ZooKeeper, ...) keeps its lock under a
//! key type and an owner id we cannot set, so the server cannot name the slot for it; every
//! elector, ours or a peer, writes the same history. The leader is the elector whose newest
//! grant has no later `stop` of that token, `resign` or `exit`: the library said "you lead"
//! and has not taken it back. When several have an open reign (a paused leader that has not
//! noticed its loss, beside its successor) the newest grant wins: the older one can no longer
//! hold a lease the newer one was granted after it.

use crate::history::{read_jsonl, ElectorEvent};
use std::path::Path;

/// The newest grant of `events` still open: `(t, token)` of a `grant` with no later `stop`
/// of the same token and no later `resign` or `exit`.
///
/// A `stop` of another token does not close it: an `ignore-deadline` elector's detached
/// worker records its old token's `stop` up to 3 TTLs late, after the elector was granted
/// again.
pub fn open_reign(events: &[ElectorEvent]) -> Option<(u64, u64)> {
    let mut open: Option<(u64, u64)> = None;
    for e in events {
        match e {
            ElectorEvent::Grant { t, token, .. } => open = Some((*t, *token)),
            ElectorEvent::Stop { token, .. } if open.is_some_and(|(_, k)| k == *token) => {
                open = None
            }
            ElectorEvent::Resign { .. } | ElectorEvent::Exit { .. } => open = None,
            _ => {}
        }
    }
    open
}

/// Among `(slot, history)` pairs, the slot whose open reign began last.
pub fn newest_open<'a, K>(
    histories: impl IntoIterator<Item = (K, &'a [ElectorEvent])>,
) -> Option<K> {
    histories
        .into_iter()
        .filter_map(|(k, ev)| open_reign(ev).map(|(t, _)| (t, k)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, k)| k)
}

/// The history file of a running elector, read as it is now (a torn last line, the one being
/// written, is skipped). Unreadable counts as "no open reign": the lookup only aims faults.
pub fn read_history(path: &Path) -> Vec<ElectorEvent> {
    read_jsonl(path).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(t: u64, token: u64) -> ElectorEvent {
        ElectorEvent::Grant {
            t,
            token,
            deadline: t + 1000,
            call: None,
        }
    }

    fn stop(t: u64, token: u64) -> ElectorEvent {
        ElectorEvent::Stop {
            t,
            token,
            why: "lost".into(),
        }
    }

    fn check(t: u64, token: u64) -> ElectorEvent {
        ElectorEvent::Check {
            t,
            token,
            seq: 1,
            deadline: t + 500,
        }
    }

    #[test]
    fn a_grant_stays_open_until_its_own_stop() {
        assert_eq!(open_reign(&[]), None);
        assert_eq!(open_reign(&[grant(10, 7), check(11, 7)]), Some((10, 7)));
        assert_eq!(open_reign(&[grant(10, 7), stop(20, 7)]), None);
        // Granted again after a loss: the new reign is open.
        assert_eq!(
            open_reign(&[grant(10, 7), stop(20, 7), grant(30, 9)]),
            Some((30, 9))
        );
    }

    #[test]
    fn a_late_stop_of_an_older_token_does_not_close_the_new_reign() {
        let ev = [grant(10, 7), grant(30, 9), stop(40, 7)];
        assert_eq!(open_reign(&ev), Some((30, 9)));
    }

    #[test]
    fn resign_and_exit_close_every_reign() {
        assert_eq!(
            open_reign(&[grant(10, 7), ElectorEvent::Resign { t: 20 }]),
            None
        );
        let exit = ElectorEvent::Exit {
            t: 20,
            why: "signal".into(),
        };
        assert_eq!(open_reign(&[grant(10, 7), exit]), None);
    }

    #[test]
    fn the_newest_open_grant_leads() {
        let paused = vec![grant(10, 7)]; // never noticed its loss
        let successor = vec![grant(50, 8), check(51, 8)];
        let resigned = vec![grant(90, 9), stop(95, 9)];
        let h = [
            (0usize, paused.as_slice()),
            (1, successor.as_slice()),
            (2, resigned.as_slice()),
        ];
        assert_eq!(newest_open(h), Some(1));
        assert_eq!(newest_open([(0usize, paused.as_slice())]), Some(0));
        assert_eq!(newest_open([(2usize, resigned.as_slice())]), None);
        assert_eq!(newest_open(Vec::<(usize, &[ElectorEvent])>::new()), None);
    }
}
