"""The shared decision vectors (conformance/vectors/*.json) against redis_lease.decide and
redis_lease.quorum_decide.

The files are loaded from the repository (``../../conformance/vectors`` from this client's
folder), never copied. The loader fails when the folder has no files, on an unknown decision
and on an unknown key in ``expect``, and names file + case on every mismatch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from redis_lease import _quorum, decide
from redis_lease import quorum_decide as qd
from redis_lease.decide import Config

CLIENT_DIR = Path(__file__).resolve().parent.parent
VECTORS_DIR = CLIENT_DIR.parent.parent / "conformance" / "vectors"
SCHEMA = CLIENT_DIR.parent.parent / "conformance" / "schema.json"

Json = Dict[str, Any]


def vector_files() -> List[Path]:
    # conformance/vectors/quorum/: quorum mode's vectors (the membership id, Q9).
    files = list(VECTORS_DIR.glob("*.json")) + list((VECTORS_DIR / "quorum").glob("*.json"))
    return sorted(files, key=lambda p: str(p.relative_to(VECTORS_DIR)))


def config_of(defaults: Optional[Json], case: Json) -> Optional[Config]:
    raw: Json = dict((defaults or {}).get("config", {}))
    raw.update(case.get("config", {}))
    if not raw:
        return None
    known = {f for f in Config.__dataclass_fields__}
    unknown = set(raw) - known
    if unknown:
        raise AssertionError(f"unknown config keys {sorted(unknown)}")
    return Config._of_units(**raw)


def failed_of(r: Json) -> decide.Failed:
    kind = r["kind"]
    if kind not in {k.value for k in decide.ErrorKind}:
        raise AssertionError(f"unknown error kind {kind!r}")
    return decide.Failed(decide.ErrorKind(kind), "vector", grace_us=r.get("grace_us"))


def acquire_result(r: Json) -> decide.AcquireResult:
    reply = r["reply"]
    if reply == "granted":
        return decide.Granted(int(r["token"]), r.get("acked"))
    if reply == "nil":
        return decide.NotGranted()
    if reply == "error":
        return failed_of(r)
    raise AssertionError(f"unknown acquire reply {reply!r}")


def renew_result(r: Json) -> decide.RenewResult:
    reply = r["reply"]
    if reply == "renewed":
        return decide.Renewed(r.get("acked"))
    if reply == "not_held":
        return decide.NotHeld()
    if reply == "error":
        return failed_of(r)
    raise AssertionError(f"unknown renew reply {reply!r}")


def need(cfg: Optional[Config]) -> Config:
    assert cfg is not None, "this decision needs a configuration"
    return cfg


def config_json(c: Config) -> Json:
    # node_quarantine_us is quorum mode's (protocol Q7), not in the single-node vectors.
    return {f: getattr(c, f) for f in Config.__dataclass_fields__ if f != "node_quarantine_us"}


def run_config_defaults(cfg: Optional[Config], i: Json) -> Json:
    return config_json(Config._of_units(ttl_ms=i["ttl_ms"]))


def run_config_validate(cfg: Optional[Config], i: Json) -> Json:
    p = decide.config_problem(need(cfg), i["key"], i["owner"])
    return {"valid": p is None, "rule": None if p is None else p[0]}


def run_deadline(cfg: Optional[Config], i: Json) -> Json:
    c = need(cfg)
    d = decide.deadline_us(c, i["sent_at_us"])
    return {
        "lead_time_us": decide.lead_time_us(c),
        "deadline_us": d,
        "stop_at_us": decide.stop_at_us(c, d),
    }


def run_op_limit(cfg: Optional[Config], i: Json) -> Json:
    return {"limit_us": decide.op_limit_us(need(cfg), i["block_us"])}


def run_wait_for(cfg: Optional[Config], i: Json) -> Json:
    w = decide.wait_for(need(cfg))
    return {"wait": None if w is None else {"replicas": w.replicas, "timeout_ms": w.timeout_ms}}


def run_retry_interval(cfg: Optional[Config], i: Json) -> Json:
    return {"retry_us": decide.retry_interval_us(need(cfg))}


def run_backoff(cfg: Optional[Config], i: Json) -> Json:
    c = need(cfg)
    return {
        "cap_us": decide.backoff_cap_us(c, i["attempt"]),
        "delay_us": decide.backoff_us(c, i["attempt"], i["unit"]),
    }


def run_classify_error(cfg: Optional[Config], i: Json) -> Json:
    if "error" in i:
        f = decide.classify_error_line(i["error"])
    else:
        f = failed_of({"kind": i["transport"]})
    return {"kind": f.kind.value, "grace_us": f.grace_us}


def run_on_acquire(cfg: Optional[Config], i: Json) -> Json:
    a = decide.on_acquire(need(cfg), i["sent_at_us"], i["now_us"], acquire_result(i["result"]))
    if isinstance(a, decide.Lead):
        return {
            "action": "lead",
            "token": a.token,
            "deadline_us": a.deadline_us,
            "next_renew_us": a.next_renew_us,
        }
    if isinstance(a, decide.Unconfirmed):
        return {"action": "unconfirmed", "token": a.token, "retry_in_us": a.retry_in_us, "why": a.why.value}
    if isinstance(a, decide.NotGrantedAction):
        return {"action": "not_granted"}
    if isinstance(a, decide.GraceWait):
        return {"action": "grace", "wait_us": a.wait_us}
    return {"action": "backoff", "kind": a.kind.value}


def run_not_granted_pause(cfg: Optional[Config], i: Json) -> Json:
    return {
        "pause_us": decide.not_granted_pause_us(
            need(cfg), i["block_us"], i["sent_at_us"], i["now_us"], i["unit"]
        )
    }


def run_on_renew(cfg: Optional[Config], i: Json) -> Json:
    a = decide.on_renew(
        need(cfg), i["deadline_us"], i["sent_at_us"], i["now_us"], renew_result(i["result"])
    )
    if isinstance(a, decide.RenewedAction):
        return {"action": "renewed", "deadline_us": a.deadline_us, "next_renew_us": a.next_renew_us}
    if isinstance(a, decide.StepDown):
        return {"action": "step_down", "reason": a.reason.value}
    return {"action": "retry", "at_us": a.at_us, "why": a.why.value}


def run_must_stop(cfg: Optional[Config], i: Json) -> Json:
    return {"stop": decide.must_stop(need(cfg), i["deadline_us"], i["now_us"])}


def run_step_down(cfg: Optional[Config], i: Json) -> Json:
    return {"release": decide.release_after(decide.StepDownReason(i["reason"]))}


def run_reign_owner(cfg: Optional[Config], i: Json) -> Json:
    return {"reign_owner": decide.reign_owner(i["owner"], i["reign"])}


def run_next_reign(cfg: Optional[Config], i: Json) -> Json:
    return {"reign": decide.next_reign(i["reign"], decide.ReignEvent(i["event"]))}


def acquire_replies(i: Json) -> List[qd.AcquireReply]:
    """A round's ACQUIRE replies, one per node in node order (null = no reply in time)."""
    out: List[qd.AcquireReply] = []
    for r in i["replies"]:
        if r is None:
            out.append(None)
            continue
        a = acquire_result(r)
        if isinstance(a, decide.Granted):
            out.append(a.token)
        elif isinstance(a, decide.NotGranted):
            out.append(qd.REFUSED)
        else:
            out.append(a)
    return out


def renew_replies(i: Json) -> List[qd.NodeReply[bool]]:
    out: List[qd.NodeReply[bool]] = []
    for r in i["replies"]:
        if r is None:
            out.append(None)
            continue
        a = renew_result(r)
        out.append(a if isinstance(a, decide.Failed) else isinstance(a, decide.Renewed))
    return out


def run_quorum_after_acquire(cfg: Optional[Config], i: Json) -> Json:
    a = qd.after_acquire(qd.QuorumControl.CORRECT, acquire_replies(i), 0)
    if isinstance(a, qd.Raise):
        return {"action": "raise", "target": a.target, "nodes": list(a.nodes)}
    if isinstance(a, qd.ActUnified):
        raise AssertionError("ActUnified is a negative control")
    o = a.outcome
    failed = o if isinstance(o, decide.Failed) else None
    if failed is not None:
        outcome = "error"
    elif isinstance(o, qd.MembershipMismatch):
        outcome = "membership_mismatch"
    else:
        outcome = "not_granted"
    return {
        "action": "abort",
        "partial": [[n, t] for n, t in a.release],
        "outcome": outcome,
        "error_kind": None if failed is None else failed.kind.value,
        "grace_us": failed.grace_us if failed is not None and failed.kind == decide.ErrorKind.GRACE else None,
    }


def run_quorum_after_renew(cfg: Optional[Config], i: Json) -> Json:
    replies = renew_replies(i)
    return {
        "action": qd.after_renew(qd.QuorumControl.CORRECT, replies).value,
        "confirmed": qd.raise_confirmed(qd.QuorumControl.CORRECT, replies, len(replies)),
    }


def run_quorum_wait(cfg: Optional[Config], i: Json) -> Json:
    node = qd.wait_node(i["urls"])
    c = need(cfg)
    wait = qd.wait_after_refusal(
        acquire_replies(i), node, i["released_any"], i["block_us"], c.op_timeout_us, c.renew_interval_us
    )
    return {"wait_node": node, "wait_us": wait}


def run_quorum_identity(cfg: Optional[Config], i: Json) -> Json:
    c = qd.check_identity(i["me"], i["seen"], i["known"])
    return {"check": c.kind.value, "of": c.of}


def run_quorum_quarantine(cfg: Optional[Config], i: Json) -> Json:
    c = need(cfg)
    return {"quarantine_us": qd.quarantine_us(c.ttl_ms * 1000, i["node_quarantine_us"], c.drift)}


def run_membership_id(cfg: Optional[Config], i: Json) -> Json:
    ids = sorted((_quorum.node_identity(u) for u in i["nodes"]), key=lambda s: s.encode("utf-8"))
    return {"identities": ids, "membership_id": _quorum.membership_id_of(i["nodes"])}


RUNNERS: Dict[str, Callable[[Optional[Config], Json], Json]] = {
    "config_defaults": run_config_defaults,
    "config_validate": run_config_validate,
    "deadline": run_deadline,
    "op_limit": run_op_limit,
    "wait_for": run_wait_for,
    "retry_interval": run_retry_interval,
    "backoff": run_backoff,
    "classify_error": run_classify_error,
    "on_acquire": run_on_acquire,
    "not_granted_pause": run_not_granted_pause,
    "on_renew": run_on_renew,
    "must_stop": run_must_stop,
    "step_down": run_step_down,
    "reign_owner": run_reign_owner,
    "next_reign": run_next_reign,
    "quorum_after_acquire": run_quorum_after_acquire,
    "quorum_after_renew": run_quorum_after_renew,
    "quorum_wait": run_quorum_wait,
    "quorum_identity": run_quorum_identity,
    "quorum_quarantine": run_quorum_quarantine,
    "membership_id": run_membership_id,
}


def same(key: str, want: Any, got: Any) -> bool:
    """Equality, with +-1 us on `*_us` numbers (floating point products) and recursion into
    objects (every key of an expected object must be present and equal)."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(want) != set(got):
            return False
        return all(same(k, want[k], got[k]) for k in want)
    if key.endswith("_us") and isinstance(want, int) and not isinstance(want, bool):
        return isinstance(got, int) and not isinstance(got, bool) and abs(got - want) <= 1
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(want, bool) or isinstance(got, bool) or want is None or got is None:
            return False
        return math.isclose(float(want), float(got), rel_tol=0, abs_tol=1e-12)
    return type(want) is type(got) and bool(want == got)


def check_file(path: Path) -> Tuple[int, List[str]]:
    """Run every case of one file; returns (cases run, mismatch messages)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    decision = doc.get("decision")
    if decision not in RUNNERS:
        raise AssertionError(f"{path.name}: unknown decision {decision!r}")
    runner = RUNNERS[decision]
    cases = doc.get("cases") or []
    if not cases:
        raise AssertionError(f"{path.name}: no cases")
    problems: List[str] = []
    for case in cases:
        where = f"{path.name} / {case.get('name')!r}"
        try:
            got = runner(config_of(doc.get("defaults"), case), case["input"])
        except Exception as e:  # a crash is a mismatch too, with its place
            problems.append(f"{where}: raised {e!r}")
            continue
        expect: Json = case["expect"]
        unknown = set(expect) - set(got)
        if unknown:
            problems.append(f"{where}: unknown key(s) in expect {sorted(unknown)}")
        for k, want in expect.items():
            if k in got and not same(k, want, got[k]):
                problems.append(f"{where}: {k}: want {want!r}, got {got[k]!r}")
    return len(cases), problems


def test_vector_folder_is_not_empty() -> None:
    assert VECTORS_DIR.is_dir(), f"no vector folder at {VECTORS_DIR}"
    assert vector_files(), f"no *.json vector files in {VECTORS_DIR}"


def test_every_decision_has_a_runner_and_a_file() -> None:
    decisions = {json.loads(p.read_text(encoding="utf-8"))["decision"] for p in vector_files()}
    assert decisions == set(RUNNERS), f"files {sorted(decisions)} vs runners {sorted(RUNNERS)}"


@pytest.mark.parametrize("path", vector_files(), ids=lambda p: str(p.relative_to(VECTORS_DIR)))
def test_vector_file(path: Path) -> None:
    n, problems = check_file(path)
    assert n > 0
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", vector_files(), ids=lambda p: str(p.relative_to(VECTORS_DIR)))
def test_vector_file_matches_schema(path: Path) -> None:
    if not SCHEMA.exists():
        pytest.skip(f"{SCHEMA} not in the repository yet")
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validate(json.loads(path.read_text(encoding="utf-8")), schema)


def test_loader_rejects_unknown_decision_and_unknown_expect_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"decision": "nope", "cases": [{"name": "x", "input": {}, "expect": {}}]}))
    with pytest.raises(AssertionError, match="unknown decision"):
        check_file(bad)
    extra = tmp_path / "extra.json"
    extra.write_text(
        json.dumps(
            {
                "decision": "step_down",
                "cases": [
                    {"name": "x", "input": {"reason": "deadline"}, "expect": {"release": True, "new_rule": 1}}
                ],
            }
        )
    )
    _, problems = check_file(extra)
    assert problems and "extra.json / 'x'" in problems[0] and "new_rule" in problems[0]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(
        json.dumps(
            {
                "decision": "step_down",
                "cases": [{"name": "y", "input": {"reason": "deadline"}, "expect": {"release": False}}],
            }
        )
    )
    _, problems = check_file(wrong)
    assert problems == ["wrong.json / 'y': release: want False, got True"]
