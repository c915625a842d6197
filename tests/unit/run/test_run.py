"""``kai-scheduler run``: component selection, and how components stop together."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from kai import run
from kai.logs import record_fields


def test_components_default_to_every_available_one():
    assert run.parse_components(",".join(run.COMPONENTS)) == list(run.COMPONENTS)
    assert run.parse_components(" scheduler , binder,scheduler") == ["scheduler", "binder"]


@pytest.mark.parametrize("value, message", [
    ("schedular", "unknown component(s) schedular; KAI's components are scheduler, binder"),
    ("", "names no component"),
])
def test_bad_component_names_are_errors_naming_the_choices(value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        run.parse_components(value)


def test_a_kai_component_missing_from_this_build_is_named(monkeypatch):
    monkeypatch.delitem(run.COMPONENTS, "binder")
    with pytest.raises(ValueError, match=r"component\(s\) binder not available in this version; available: "):
        run.parse_components("scheduler,binder")


def test_cli_reports_bad_usage_with_exit_2(capsys, tmp_path):
    assert run.main(["--components", "nope"]) == 2
    assert "unknown component(s) nope" in capsys.readouterr().err
    bad = tmp_path / "config.yaml"
    bad.write_text("actions: [1, 2]\n")
    assert run.main(["--components", "scheduler", "--config", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert run.main(["--components", "binder", "--console"]) == 2
    assert "--console serves the scheduler's console" in capsys.readouterr().err


def test_an_unknown_binder_plugin_exits_2_naming_the_flag(capsys, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"  # never contacted: the binder fails while it is being built
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    argv = ["--kubeconfig", str(kubeconfig), "--components", "binder", "--metrics-address", "127.0.0.1:0"]
    assert run.main([*argv, "--binder-plugins", '{"nosuchplugin": {"enabled": true}}']) == 2
    err = capsys.readouterr().err
    assert "--binder-plugins: unknown binder plugin 'nosuchplugin'; installed binder plugins: dynamicresources" in err
    assert run.main([*argv, "--binder-plugins", '{"gpusharing": {"priority": "high"}}']) == 2
    assert "--binder-plugins: gpusharing.priority: expected an integer, not 'high'" in capsys.readouterr().err


class Loop:
    def __init__(self, name, fail=False):
        self.name, self.fail, self.stopped = name, fail, False

    def run(self, stop: threading.Event) -> None:
        if self.fail:
            raise RuntimeError("broken")
        stop.wait(10)
        self.stopped = True


def test_a_failing_component_stops_the_others_and_exits_1():
    healthy = Loop("scheduler")
    assert run.run_components([healthy, Loop("binder", fail=True)], threading.Event()) == 1
    assert healthy.stopped


def test_stop_ends_every_component_with_exit_0():
    stop = threading.Event()
    loops = [Loop("scheduler"), Loop("binder")]
    threading.Timer(0.2, stop.set).start()
    assert run.run_components(loops, stop) == 0
    assert all(loop.stopped for loop in loops)


class Stuck:
    name = "podgrouper"

    def __init__(self) -> None:
        self.release = threading.Event()

    def run(self, stop: threading.Event) -> None:
        stop.wait()
        self.release.wait(60)  # a bug: it does not return when stopped


def test_a_component_that_does_not_return_after_stop_is_left_behind_with_exit_1(caplog):
    stop = threading.Event()
    stuck, healthy = Stuck(), Loop("scheduler")
    threading.Timer(0.1, stop.set).start()
    begin = time.monotonic()
    assert run.run_components([healthy, stuck], stop, stop_timeout=0.3) == 1
    assert time.monotonic() - begin < 30  # not the 60 s it hangs
    assert healthy.stopped
    (record,) = [r for r in caplog.records if r.getMessage() == "components did not stop in time; exiting without them"]
    assert record_fields(record)["components"] == "podgrouper"
    stuck.release.set()
