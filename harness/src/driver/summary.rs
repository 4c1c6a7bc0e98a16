//! The campaign's summary beside the checker's line: faults drawn per kind, and the
//! `--min-faults` floor a campaign must reach to mean something (issue 30 item 3).

use lease_harness::checker::Summary;

/// `kill=3 pause=2 ...` (every kind the campaign drew, skipped ones not counted).
pub(crate) fn faults_per_kind(summary: &Summary) -> String {
    if summary.faults.is_empty() {
        return "none".into();
    }
    summary
        .faults
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `--min-faults KIND=N,...`: each kind at least N faults drawn (and not skipped) over the
/// campaign. A kind may be a group: `partition` counts every fault that cuts an elector
/// off (`partition`, `blackhole`, and the netns drops), `crash` `kill`, `handover` `resign`.
pub(crate) fn parse_min_faults(v: Option<&str>) -> Result<Vec<(String, u64)>, String> {
    let Some(v) = v else { return Ok(vec![]) };
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, n) = kv
                .split_once('=')
                .ok_or_else(|| format!("--min-faults: {kv:?} is not KIND=N"))?;
            let n: u64 = n
                .parse()
                .map_err(|_| format!("--min-faults: cannot parse {n:?} in {kv:?}"))?;
            if k.is_empty() {
                return Err(format!("--min-faults: empty kind in {kv:?}"));
            }
            Ok((k.to_string(), n))
        })
        .collect()
}

/// The kinds a `--min-faults` name counts.
fn fault_group(name: &str) -> Vec<&str> {
    match name {
        "crash" => vec!["kill"],
        "handover" => vec!["resign"],
        "partition" => vec!["partition", "blackhole", "oneway", "heal-delivers"],
        other => vec![other],
    }
}

/// `KIND drew N < M` for every minimum not met.
pub(crate) fn short_faults(summary: &Summary, min: &[(String, u64)]) -> Vec<String> {
    min.iter()
        .filter_map(|(k, want)| {
            let got: u64 = fault_group(k)
                .iter()
                .map(|g| summary.faults.get(*g).copied().unwrap_or(0))
                .sum();
            (got < *want).then(|| format!("{k} drew {got} < {want}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_faults_parse_and_count_groups() {
        let min = parse_min_faults(Some("crash=2,partition=3,loss=1")).expect("parse");
        let mut s = Summary::default();
        s.faults.insert("kill".into(), 2);
        s.faults.insert("blackhole".into(), 1);
        s.faults.insert("heal-delivers".into(), 1);
        // partition counts 2 of 3, loss 0 of 1; crash is met.
        assert_eq!(
            short_faults(&s, &min),
            vec![
                "partition drew 2 < 3".to_string(),
                "loss drew 0 < 1".to_string()
            ]
        );
        s.faults.insert("oneway".into(), 1);
        s.faults.insert("loss".into(), 4);
        assert!(short_faults(&s, &min).is_empty());
        assert_eq!(faults_per_kind(&s).split(' ').count(), 5);
    }

    #[test]
    fn min_faults_refuse_bad_input() {
        assert!(parse_min_faults(Some("kill")).is_err());
        assert!(parse_min_faults(Some("kill=x")).is_err());
        assert!(parse_min_faults(Some("=3")).is_err());
        assert!(parse_min_faults(None).expect("none").is_empty());
    }
}
