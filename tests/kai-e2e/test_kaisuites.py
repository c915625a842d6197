"""KAI's e2e suites as a compatibility measure: the exclusions file, ginkgo's arguments, and reading and
classifying ginkgo's JSON reports (kaisuites.py). No Go build is needed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kaisuites import (
    EXCLUSION_CATEGORIES,
    ExclusionsError,
    SuiteResult,
    details,
    failure_counts,
    ginkgo_args,
    load_catalogue,
    read_report,
    summarize,
    table,
)

EXCLUSIONS = Path(__file__).resolve().parent / "exclusions.yaml"

CATALOGUE = """\
suites:
  - {suite: gitops, category: kai-install, reason: ArgoCD installs KAI}
labels:
  - {label: nightly, category: nightly, reason: nightly in KAI}
specs:
  - {spec: "(?i)\\\\bDRA\\\\b", category: third-party-operator, reason: a DRA driver}
  - {spec: "uses real logs", suite: allocate/resources, category: real-containers, reason: reads container logs}
failures:
  - {message: 'schedulingshards\\.kai\\.scheduler "default" not found', class: missing-feature, note: shard config}
  - {suite: allocate/resources, spec: "Fraction", class: behaviour-difference, note: fractions differ}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exclusions.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def catalogue(tmp_path):
    return load_catalogue(write(tmp_path, CATALOGUE))


def spec(text: str, state: str, containers: tuple[str, ...] = ("Resources",), labels: tuple[str, ...] = (),
         message: str = "", node: str = "It", leaf: str = "It") -> dict:
    report = {"ContainerHierarchyTexts": list(containers), "ContainerHierarchyLabels": [[] for _ in containers],
              "LeafNodeType": leaf, "LeafNodeText": text, "State": state}
    if labels:
        report["LeafNodeLabels"] = list(labels)
    if message:
        report["Failure"] = {"Message": message, "Location": {"FileName": "/src/specs.go", "LineNumber": 42},
                             "FailureNodeType": node}
    return report


def report(*specs: dict, seconds: float = 90, reasons: tuple[str, ...] = ()) -> list[dict]:
    return [{"SuiteDescription": "Resources", "RunTime": int(seconds * 1e9), "SpecReports": list(specs),
             "SpecialSuiteFailureReasons": list(reasons)}]


def test_the_projects_exclusions_file_is_well_formed_with_a_reason_for_each_entry():
    catalogue = load_catalogue(EXCLUSIONS)
    assert catalogue.excluded_suite("integrations/third_party/ray.io").category == "third-party-operator"
    assert catalogue.excluded_suite("allocate/quota") is None
    assert all(e.reason.strip() and e.category in EXCLUSION_CATEGORIES for e in catalogue.exclusions)
    assert catalogue.rules and all(r.note.strip() for r in catalogue.rules)


def test_exclusions_become_ginkgo_filters_of_the_suite_they_name(catalogue):
    assert catalogue.label_filter() == "!nightly"
    assert catalogue.skip_patterns("allocate/resources") == ["(?i)\\bDRA\\b", "uses real logs"]
    assert catalogue.skip_patterns("allocate/quota") == ["(?i)\\bDRA\\b"]
    args = ginkgo_args(catalogue, "allocate/quota", "/out/r.json", 599.5)
    assert args[:5] == ["-test.timeout=0", "-ginkgo.no-color", "-ginkgo.v", "-ginkgo.json-report=/out/r.json",
                        "-ginkgo.timeout=599s"]
    assert args[5:] == ["-ginkgo.label-filter=!nightly", "-ginkgo.skip=(?i)\\bDRA\\b"]
    assert ginkgo_args(catalogue, "allocate/quota", "r.json", 10, dry_run=True)[-1] == "-ginkgo.dry-run"


@pytest.mark.parametrize("text, problem", [
    ("suites: [{suite: a, category: gpus, reason: r}]", "field 'category' must be one of"),
    ("suites: [{suite: a, category: nightly}]", "suites[0]: field 'reason' is missing"),
    ("labels: [{label: '', category: nightly, reason: r}]", "labels[0]: field 'label' is empty"),
    ("specs: [{spec: '(', category: nightly, reason: r}]", "field 'spec' is not a valid regular expression"),
    ("specs: [{spec: a, category: nightly, reason: r, suit: b}]", "field 'suit' is not known; did you mean 'suite'"),
    ("failures: [{class: missing-feature, note: n}]", "failures[0]: give at least one of suite, spec and message"),
    ("failures: [{class: broken, note: n, suite: a}]", "field 'class' must be one of"),
    ("exclude: []", "field 'exclude' is not known"),
    ("- a list", "must be a mapping"),
])
def test_a_malformed_exclusions_file_is_refused_naming_the_entry(tmp_path, text, problem):
    path = write(tmp_path, text)
    with pytest.raises(ExclusionsError, match=re.escape(problem)) as info:
        load_catalogue(path)
    assert str(path) in str(info.value)


def test_a_report_is_counted_and_its_failures_classified(catalogue):
    result = summarize("allocate/resources", report(
        spec("Whole GPU request", "passed"),
        spec("Fraction GPU request", "failed", message="Timed out waiting for pod"),
        spec("sets the shard", "failed", message='schedulingshards.kai.scheduler "default" not found'),
        spec("something new", "timedout", message="took too long"),
        spec("DRA claim", "skipped", containers=("Dynamic Resources",)),
        spec("NUMA pool", "skipped", labels=("numa", "nightly")),
        spec("needs 16 GPUs", "skipped"),
        spec("", "passed", leaf="BeforeSuite"),
    ), catalogue)

    assert (result.passed, result.failed, result.skipped, result.excluded) == (1, 3, 1, 2)
    assert result.seconds == 90
    classes = {f.name: (f.cls, f.note, f.state, f.location) for f in result.failures}
    assert classes == {
        "Resources Fraction GPU request": ("behaviour-difference", "fractions differ", "failed", "/src/specs.go:42"),
        "Resources sets the shard": ("missing-feature", "shard config", "failed", "/src/specs.go:42"),
        "Resources something new": ("unclassified", "", "timedout", "/src/specs.go:42"),
    }


def test_a_failed_setup_node_is_a_failure_of_its_own_and_names_the_node(catalogue):
    result = summarize("allocate/quota", report(
        spec("", "failed", containers=(), leaf="BeforeSuite", message="no connection"),
        spec("Equal share", "failed", message="quota", node="BeforeAll"),
        spec("Equal share again", "skipped"),
    ), catalogue)
    assert (result.passed, result.failed, result.skipped) == (0, 1, 1)
    assert [(f.name, f.message) for f in result.failures] == [
        ("BeforeSuite", "no connection"), ("Resources Equal share [in BeforeAll]", "quota")]


def test_a_suite_cut_short_says_why(catalogue):
    result = summarize("allocate/quota", report(spec("a", "passed"), spec("b", "interrupted", message="Interrupted"),
                                                spec("c", "skipped"), reasons=("Suite Timeout Elapsed",)), catalogue)
    assert (result.passed, result.failed, result.skipped, result.error) == (1, 1, 1, "Suite Timeout Elapsed")


def test_a_report_file_must_be_a_list_of_suite_reports(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report(spec("a", "passed"))))
    assert read_report(path)[0]["SuiteDescription"] == "Resources"
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a ginkgo JSON report"):
        read_report(path)


def test_the_table_totals_the_suites_and_shows_whole_suites_excluded(catalogue):
    quota = SuiteResult("allocate/quota", passed=3, failed=1, skipped=2, excluded=1, seconds=120)
    resources = SuiteResult("allocate/resources", passed=5, seconds=60, error="killed after 6 min")
    gitops = SuiteResult("gitops", excluded_reason="kai-install")
    lines = table([quota, resources, gitops]).splitlines()
    assert lines[2] == "| allocate/quota | 3 | 1 | 2 | 1 | 2.0 |"
    assert lines[3] == "| allocate/resources (killed after 6 min) | 5 | 0 | 0 | 0 | 1.0 |"
    assert lines[4] == "| gitops | | | | suite (kai-install) | |"
    assert lines[5] == "| **total** (1 suites excluded) | 8 | 1 | 2 | 1 | 3.0 |"


def test_details_list_each_failure_with_its_class_and_every_exclusion(catalogue):
    result = summarize("allocate/resources", report(
        spec("Fraction GPU request", "failed", message="line one\nline two")), catalogue)
    text = details([result, SuiteResult("gitops", excluded_reason="kai-install")], catalogue)
    assert failure_counts([result]) == {"missing-feature": 0, "behaviour-difference": 1, "needs-real-cluster": 0,
                                        "environment": 0, "unclassified": 0}
    assert "* **Resources Fraction GPU request** (failed, behaviour-difference -- fractions differ)" in text
    assert "  line one\n  line two\n" in text
    assert "| suite | `gitops` | kai-install | ArgoCD installs KAI |" in text
    assert "| spec | `allocate/resources: uses real logs` | real-containers | reads container logs |" in text
