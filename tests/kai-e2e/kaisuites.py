"""KAI's own e2e suites as a compatibility measure: what is left out and why, and what the runs say.

Pure parts of the e2e harness (:mod:`kaie2e`, ``tox -e kai-e2e``): reading the exclusions
file (whole suites, ginkgo labels and spec patterns left out, each with a category and a reason) and
the classification rules of failures, reading ginkgo's JSON reports, and summing them up per suite.

A spec counts as *excluded* when an exclusion left it out, *skipped* when ginkgo skipped it for another
reason (the spec called ``Skip``, or an earlier spec of its ordered container failed), and every failed
spec -- and a failed suite-level node such as ``BeforeSuite`` -- gets the class of the first rule that
matches it, else ``unclassified``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kai.common.errors import ConfigError
from kai.common.yamlfile import Fields, read_yaml

#: Why a suite, label or spec is left out.
EXCLUSION_CATEGORIES = ("real-containers", "real-gpus", "third-party-operator", "kai-install", "nightly")
#: What a failure says about this project.
FAILURE_CLASSES = ("missing-feature", "behaviour-difference", "needs-real-cluster", "environment")
UNCLASSIFIED = "unclassified"
#: Ginkgo's states of a spec that did not pass and was not skipped.
FAILED_STATES = ("failed", "panicked", "interrupted", "aborted", "timedout")
#: Suite-level nodes whose failure fails the specs of the suite.
SUITE_NODES = ("BeforeSuite", "SynchronizedBeforeSuite", "AfterSuite", "SynchronizedAfterSuite",
               "ReportBeforeSuite", "ReportAfterSuite")


class ExclusionsError(ConfigError):
    """The exclusions or classification file is malformed."""


@dataclass(frozen=True)
class Exclusion:
    """One thing left out: a whole suite, a ginkgo label, or the specs whose full text a regex matches."""

    kind: str  # "suite", "label" or "spec"
    target: str
    category: str
    reason: str
    suite: str = ""  # for "spec": only in this suite ("" for every suite)

    def matches_spec(self, suite: str, full_text: str, labels: Iterable[str]) -> bool:
        if self.kind == "suite":
            return self.target == suite
        if self.kind == "label":
            return self.target in labels
        return (not self.suite or self.suite == suite) and re.search(self.target, full_text) is not None


@dataclass(frozen=True)
class Rule:
    """Classifies failures: every pattern given must match (``suite`` exactly, ``spec`` and ``message`` as
    regexes searched in the spec's full text and in the failure message with its location)."""

    cls: str
    note: str
    suite: str = ""
    spec: str = ""
    message: str = ""

    def matches(self, suite: str, full_text: str, message: str) -> bool:
        return ((not self.suite or self.suite == suite)
                and (not self.spec or re.search(self.spec, full_text) is not None)
                and (not self.message or re.search(self.message, message, re.S) is not None))


@dataclass(frozen=True)
class Catalogue:
    """The exclusions and the failure rules, as read from their file."""

    exclusions: tuple[Exclusion, ...]
    rules: tuple[Rule, ...]

    def excluded_suite(self, suite: str) -> Exclusion | None:
        return next((e for e in self.exclusions if e.kind == "suite" and e.target == suite), None)

    def label_filter(self) -> str:
        """Ginkgo's ``--label-filter`` leaving out every excluded label ("" for none)."""
        return " && ".join(f"!{e.target}" for e in self.exclusions if e.kind == "label")

    def skip_patterns(self, suite: str) -> list[str]:
        """Ginkgo ``--skip`` regexes of the specs excluded in ``suite``."""
        return [e.target for e in self.exclusions if e.kind == "spec" and e.suite in ("", suite)]

    def exclusion_of(self, suite: str, full_text: str, labels: Iterable[str]) -> Exclusion | None:
        labels = tuple(labels)
        return next((e for e in self.exclusions if e.matches_spec(suite, full_text, labels)), None)

    def classify(self, suite: str, full_text: str, message: str) -> Rule | None:
        return next((r for r in self.rules if r.matches(suite, full_text, message)), None)


def _regex(f: Fields, key: str) -> str:
    value: str = f.text(key, "")
    try:
        re.compile(value)
    except re.error as exc:
        raise f.fail(key, f"is not a valid regular expression: {exc}") from None
    return value


def load_catalogue(path: str | Path) -> Catalogue:
    """Reads the exclusions file: ``suites``, ``labels`` and ``specs`` to leave out, ``failures`` to classify.

    Each exclusion names its ``category`` (one of :data:`EXCLUSION_CATEGORIES`) and a ``reason``; each
    failure rule a ``class`` (one of :data:`FAILURE_CLASSES`), a ``note`` and at least one of ``suite``,
    ``spec`` and ``message``. Errors name the file, the entry and the field.
    """
    top = Fields(read_yaml(path, ExclusionsError, dict, "a mapping"), str(path),
                 ("suites", "labels", "specs", "failures"), ExclusionsError)
    exclusions: list[Exclusion] = []
    for kind, key, target_key in (("suite", "suites", "suite"), ("label", "labels", "label"),
                                  ("spec", "specs", "spec")):
        known = ("suite", "spec", "category", "reason") if kind == "spec" else (target_key, "category", "reason")
        for i, item in enumerate(top.sequence(key, [])):
            f = Fields(item, f"{path}: {key}[{i}]", known, ExclusionsError)
            target = _regex(f, "spec") if kind == "spec" else f.text(target_key)
            if not target:
                raise f.fail(target_key, "is empty")
            exclusions.append(Exclusion(kind, target, f.text("category", choices=EXCLUSION_CATEGORIES),
                                        f.text("reason"), f.text("suite", "") if kind == "spec" else ""))
    rules = []
    for i, item in enumerate(top.sequence("failures", [])):
        f = Fields(item, f"{path}: failures[{i}]", ("class", "note", "suite", "spec", "message"), ExclusionsError)
        rule = Rule(f.text("class", choices=FAILURE_CLASSES), f.text("note"), f.text("suite", ""),
                    _regex(f, "spec"), _regex(f, "message"))
        if not (rule.suite or rule.spec or rule.message):
            raise ExclusionsError(f"{path}: failures[{i}]: give at least one of suite, spec and message")
        rules.append(rule)
    return Catalogue(tuple(exclusions), tuple(rules))


@dataclass(frozen=True)
class Failure:
    """A failed spec or suite-level node, classified."""

    suite: str
    name: str
    state: str
    message: str
    location: str
    cls: str
    note: str


@dataclass
class SuiteResult:
    """What one suite's run came to; ``excluded_reason`` set when the whole suite was left out."""

    suite: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    excluded: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    excluded_reason: str = ""
    error: str = ""  # why the run was cut short (suite timeout, killed, no report)


def ginkgo_args(catalogue: Catalogue, suite: str, report: str | Path, timeout: float,
                dry_run: bool = False) -> list[str]:
    """Arguments of a compiled suite (``go test -c``): the exclusions as ginkgo filters, a JSON report,
    ginkgo's own suite timeout (it interrupts the running spec and still writes the report)."""
    args = ["-test.timeout=0", "-ginkgo.no-color", "-ginkgo.v", f"-ginkgo.json-report={report}",
            f"-ginkgo.timeout={max(1, int(timeout))}s"]
    if catalogue.label_filter():
        args.append(f"-ginkgo.label-filter={catalogue.label_filter()}")
    args += [f"-ginkgo.skip={pattern}" for pattern in catalogue.skip_patterns(suite)]
    return [*args, "-ginkgo.dry-run"] if dry_run else args


def spec_labels(spec: dict) -> list[str]:
    """Every label of a spec report: its containers' and its own."""
    labels = [label for level in spec.get("ContainerHierarchyLabels") or () for label in level or ()]
    return labels + list(spec.get("LeafNodeLabels") or ())


def full_text(spec: dict) -> str:
    """The text ginkgo's ``--focus`` and ``--skip`` match: container texts and the leaf's, space-joined."""
    return " ".join([*(spec.get("ContainerHierarchyTexts") or ()), spec.get("LeafNodeText") or ""]).strip()


def _failure(suite: str, spec: dict, catalogue: Catalogue) -> Failure:
    failure = spec.get("Failure") or {}
    location = failure.get("Location") or {}
    where = f"{location.get('FileName', '')}:{location.get('LineNumber', '')}".strip(":")
    node = failure.get("FailureNodeType") or ""
    message = (failure.get("Message") or failure.get("ForwardedPanic") or "").strip()
    name = full_text(spec) or spec.get("LeafNodeType", "")
    if spec.get("LeafNodeType") in SUITE_NODES:
        name = spec["LeafNodeType"]
    elif node and node != "It":
        name = f"{name} [in {node}]"
    rule = catalogue.classify(suite, full_text(spec) or name, f"{message}\n{where}")
    return Failure(suite, name, spec.get("State", ""), message, where,
                   rule.cls if rule else UNCLASSIFIED, rule.note if rule else "")


def summarize(suite: str, reports: list[dict], catalogue: Catalogue) -> SuiteResult:
    """Counts one suite's ginkgo JSON report (the list ``--json-report`` writes) and classifies its failures."""
    result = SuiteResult(suite)
    for report in reports:
        result.seconds += (report.get("RunTime") or 0) / 1e9
        for spec in report.get("SpecReports") or ():
            state = spec.get("State", "")
            if spec.get("LeafNodeType") != "It":
                if state in FAILED_STATES:
                    result.failures.append(_failure(suite, spec, catalogue))
                continue
            if state == "passed":
                result.passed += 1
            elif state in ("skipped", "pending"):
                if catalogue.exclusion_of(suite, full_text(spec), spec_labels(spec)):
                    result.excluded += 1
                else:
                    result.skipped += 1
            else:
                result.failed += 1
                result.failures.append(_failure(suite, spec, catalogue))
        reasons = report.get("SpecialSuiteFailureReasons") or ()
        if reasons:  # e.g. the suite's timeout elapsed: the specs after the interrupted one did not run
            result.error = "; ".join(reasons)
    return result


def read_report(path: str | Path) -> list[dict]:
    """A ginkgo JSON report: a list of suite reports."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: not a ginkgo JSON report (a list of suite reports)")
    return data


def table(results: list[SuiteResult]) -> str:
    """The per-suite table (Markdown), with a total row; whole excluded suites show their category."""
    lines = ["| suite | passed | failed | skipped | excluded | minutes |", "|---|---:|---:|---:|---:|---:|"]
    total = SuiteResult("total")
    for r in results:
        if r.excluded_reason:
            lines.append(f"| {r.suite} | | | | suite ({r.excluded_reason}) | |")
            continue
        note = f" ({r.error})" if r.error else ""
        lines.append(f"| {r.suite}{note} | {r.passed} | {r.failed} | {r.skipped} | {r.excluded} | "
                     f"{r.seconds / 60:.1f} |")
        for name in ("passed", "failed", "skipped", "excluded", "seconds"):
            setattr(total, name, getattr(total, name) + getattr(r, name))
    excluded_suites = sum(1 for r in results if r.excluded_reason)
    lines.append(f"| **total** ({excluded_suites} suites excluded) | {total.passed} | {total.failed} | "
                 f"{total.skipped} | {total.excluded} | {total.seconds / 60:.1f} |")
    return "\n".join(lines) + "\n"


def failure_counts(results: list[SuiteResult]) -> dict[str, int]:
    """Failures per class, every class listed (unclassified last)."""
    counts = dict.fromkeys((*FAILURE_CLASSES, UNCLASSIFIED), 0)
    for r in results:
        for f in r.failures:
            counts[f.cls] += 1
    return counts


def details(results: list[SuiteResult], catalogue: Catalogue) -> str:
    """Markdown: the table, failures per class, every failure with its message, and the exclusions."""
    out = ["# KAI e2e suites against kai-scheduler\n", table(results), "\n## Failures per class\n"]
    out += [f"* {cls}: {n}\n" for cls, n in failure_counts(results).items()]
    for r in results:
        if not r.failures and not r.error:
            continue
        out.append(f"\n## {r.suite}\n")
        if r.error:
            out.append(f"\nRun error: {r.error}\n")
        for f in r.failures:
            note = f" -- {f.note}" if f.note else ""
            out.append(f"\n* **{f.name}** ({f.state}, {f.cls}{note}) at `{f.location}`\n\n")
            out.append("  ```\n" + "".join(f"  {line}\n" for line in f.message.splitlines()[:20]) + "  ```\n")
    out.append("\n## Exclusions\n\n| kind | what | category | reason |\n|---|---|---|---|\n")
    for e in catalogue.exclusions:
        what = (f"{e.suite}: {e.target}" if e.suite else e.target).replace("|", "\\|")
        out.append(f"| {e.kind} | `{what}` | {e.category} | {e.reason} |\n")
    return "".join(out)
