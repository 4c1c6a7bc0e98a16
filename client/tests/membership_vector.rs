//! Quorum mode's shared vectors (`conformance/vectors/quorum/*.json`, docs/client-protocol.md
//! Q9): the membership id of a node list and the `MEMBERSHIP` error's kind. A folder of their
//! own until every client has quorum mode's membership id (the single-primary runners load
//! `conformance/vectors/*.json` only, and fail on a decision they do not know).

use std::path::PathBuf;

use redis_lease_client::{membership_id_of, node_identity, CommandError};
use serde_json::{json, Value};

fn quorum_vectors() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/vectors/quorum");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("conformance/vectors/quorum exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

fn run(decision: &str, input: &Value) -> Value {
    match decision {
        "membership_id" => {
            let nodes: Vec<String> = input["nodes"]
                .as_array()
                .expect("nodes")
                .iter()
                .map(|n| n.as_str().expect("url").to_string())
                .collect();
            let mut ids: Vec<String> = nodes
                .iter()
                .map(|n| node_identity(n).expect("identity"))
                .collect();
            ids.sort();
            json!({"identities": ids, "membership_id": membership_id_of(&nodes).expect("id")})
        }
        "classify_error" => {
            let line = input["error"].as_str().expect("error");
            let (code, detail) = line.split_once(' ').unwrap_or((line, ""));
            let e = CommandError::from_server(code, detail);
            json!({"kind": e.kind.label(), "grace_us": Value::Null})
        }
        other => panic!("unknown quorum decision {other}"),
    }
}

#[test]
fn every_quorum_vector_passes() {
    let files = quorum_vectors();
    let decisions: Vec<String> = files
        .iter()
        .map(|f| {
            let doc: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            doc["decision"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(
        decisions.contains(&"membership_id".to_string()),
        "{decisions:?}"
    );
    let (mut cases, mut failures) = (0, vec![]);
    for f in &files {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let decision = doc["decision"].as_str().unwrap();
        for case in doc["cases"].as_array().unwrap() {
            cases += 1;
            let got = run(decision, &case["input"]);
            // Every key of `expect` is compared, and nothing else may be missing.
            let want = &case["expect"];
            let keys: Vec<&String> = want.as_object().unwrap().keys().collect();
            for k in &keys {
                assert!(
                    got.get(k.as_str()).is_some(),
                    "{}: unknown expect key {k}",
                    case["name"]
                );
            }
            if keys.iter().any(|k| got[k.as_str()] != want[k.as_str()]) {
                failures.push(format!("{}: expected {want} got {got}", case["name"]));
            }
        }
    }
    assert!(cases > 0);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `lease-run --print-membership-id` prints the vector's id for every case (what an operator
/// passes to `LEASE.MEMBERSHIP key old new`, docs/quorum.md §4.1), and a bad URL is exit 2.
#[test]
fn lease_run_prints_the_membership_id_of_its_node_list() {
    let bin = env!("CARGO_BIN_EXE_lease-run");
    let path = quorum_vectors()
        .into_iter()
        .find(|p| p.ends_with("membership_id.json"))
        .expect("vector");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in doc["cases"].as_array().unwrap() {
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("--print-membership-id");
        for n in case["input"]["nodes"].as_array().unwrap() {
            cmd.arg("--redis").arg(n.as_str().unwrap());
        }
        let out = cmd.output().expect("lease-run runs");
        assert!(out.status.success(), "{}: {out:?}", case["name"]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            case["expect"]["membership_id"].as_str().unwrap(),
            "{}",
            case["name"]
        );
    }
    let out = std::process::Command::new(bin)
        .args(["--print-membership-id", "--redis", "nope://"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
