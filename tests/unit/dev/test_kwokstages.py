"""kwok's stages of pods that run until deleted: only a pod asking for it in kwok's annotation completes."""

from __future__ import annotations

from kai.dev.kwokstages import COMPLETE_DELAY_ANNOTATION, COMPLETE_JITTER_ANNOTATION, RUN_UNTIL_DELETED


def stages() -> dict[str, dict]:
    return {stage["metadata"]["name"]: stage["spec"] for stage in RUN_UNTIL_DELETED}


def test_a_pod_completes_only_when_running_and_annotated_with_its_delay():
    complete = stages()["pod-complete"]
    expressions = {e["key"]: e for e in complete["selector"]["matchExpressions"]}
    delay = f'.metadata.annotations["{COMPLETE_DELAY_ANNOTATION}"]'
    assert expressions[delay]["operator"] == "Exists"
    assert expressions[".status.phase"] == {"key": ".status.phase", "operator": "In", "values": ["Running"]}
    assert expressions[".metadata.deletionTimestamp"]["operator"] == "DoesNotExist"
    assert complete["delay"] == {
        "durationFrom": {"expressionFrom": delay},
        "jitterDurationFrom": {"expressionFrom": f'.metadata.annotations["{COMPLETE_JITTER_ANNOTATION}"]'},
    }
    assert "phase: Succeeded" in complete["next"]["statusTemplate"]
    assert not complete["next"].get("delete")


def test_no_other_stage_ends_a_pod_that_is_not_deleted():
    specs = stages()
    assert set(specs) == {"pod-ready", "pod-complete", "pod-delete"}
    assert "phase: Running" in specs["pod-ready"]["next"]["statusTemplate"]
    assert "delay" not in specs["pod-ready"] and "delay" not in specs["pod-delete"]
    assert specs["pod-delete"]["selector"]["matchExpressions"] == [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"}]
