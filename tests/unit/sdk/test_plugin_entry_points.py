"""Plugins of every entry-point group installed from a distribution: found, loaded and built the same way,
hooks and their arguments checked against the specs, binder plugins discovered and listed like the others."""

from __future__ import annotations

import sys
import zipfile
from importlib.metadata import version
from types import SimpleNamespace

import pytest

from kai import hookimpl, plugin_loader
from kai import testing as kt
from kai import testing_podgroupers as ktp
from kai.binder.plugins import build_plugins
from kai.framework import PluginError, Plugins, PluginSpec, SchedulerConfig
from kai.framework.plugins import list_main
from kai.grouping import hub as hub_module
from kai.plugin_loader import BINDER_PLUGIN_GROUP, discover
from support.wheel import wheel

MODULE = "kai_typo_test_plugins"

SOURCE = '''
from kai import hookimpl


class Scores:
    @hookimpl
    def kai_node_score(self, task, nodes):
        return [1.0 for _ in nodes]


class ScoresByTsk:
    @hookimpl
    def kai_node_scores(self, session, tsk, nodes):
        return [1.0 for _ in nodes]


class Grouper:
    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("example.com", "v1", "Sweep")]

    @hookimpl
    def kai_podgroup_metdata(self, hub, top_owner, pod, owners):
        return hub.default_metadata(top_owner, pod)


class GrouperByPd(Grouper):
    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pd, owners):
        return hub.default_metadata(top_owner, pd)


class Recorder:
    name = "recorder"

    def __init__(self, arguments):
        self.arguments, self.kube = arguments, None

    def setup(self, kube):
        self.kube = kube


def build_scores(arguments):
    return Scores()


def build_scores_by_tsk(arguments):
    return ScoresByTsk()


def build_grouper(arguments):
    return Grouper()


def build_grouper_by_pd(arguments):
    return GrouperByPd()


def build_recorder(arguments):
    return Recorder(arguments)
'''


@pytest.fixture
def install(tmp_path, monkeypatch):
    """Puts a distribution's files on ``sys.path``, as pip would into site-packages; gone after the test."""

    def install(dist: str, entry_points: str) -> None:
        site = tmp_path / dist
        with zipfile.ZipFile(wheel(tmp_path, dist, {f"{MODULE}.py": SOURCE}, entry_points, version="1.2")) as whl:
            whl.extractall(site)
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.delitem(sys.modules, MODULE, raising=False)

    hub_module._installed.cache_clear()
    yield install
    hub_module._installed.cache_clear()


def test_a_plugin_implementing_an_unknown_hook_fails_to_load_naming_its_distribution(install):
    install("kai-typo-plugins", f"[kai.plugins]\nscores = {MODULE}:build_scores\n")
    config = SchedulerConfig(("allocate",), (PluginSpec("predicates"), PluginSpec("scores")))
    with pytest.raises(PluginError) as err:
        Plugins(config, discover())
    assert str(err.value) == ("plugin 'scores' (kai-typo-plugins 1.2) implements unknown hook 'kai_node_score' "
                              "(did you mean 'kai_node_scores'?)")


def test_a_podgrouper_implementing_an_unknown_hook_fails_to_load_naming_its_distribution(install):
    install("kai-typo-podgroupers", f"[kai.podgroupers]\nsweep = {MODULE}:build_grouper\n")
    with pytest.raises(PluginError) as err:
        ktp.hub()
    assert str(err.value) == ("podgrouper 'sweep' (kai-typo-podgroupers 1.2) implements unknown hook "
                              "'kai_podgroup_metdata' (did you mean 'kai_podgroup_metadata'?)")


def test_a_plugin_declaring_an_argument_its_hook_lacks_fails_to_load_naming_its_distribution(install):
    install("kai-typo-plugins", f"[kai.plugins]\nscores = {MODULE}:build_scores_by_tsk\n")
    config = SchedulerConfig(("allocate",), (PluginSpec("predicates"), PluginSpec("scores")))
    with pytest.raises(PluginError) as err:
        Plugins(config, discover())
    assert str(err.value) == ("plugin 'scores' (kai-typo-plugins 1.2): hook 'kai_node_scores' has no argument 'tsk' "
                              "(did you mean 'task'?)")


def test_a_podgrouper_declaring_an_argument_its_hook_lacks_fails_to_load_naming_its_distribution(install):
    install("kai-typo-podgroupers", f"[kai.podgroupers]\nsweep = {MODULE}:build_grouper_by_pd\n")
    with pytest.raises(PluginError) as err:
        ktp.hub()
    assert str(err.value) == ("podgrouper 'sweep' (kai-typo-podgroupers 1.2): hook 'kai_podgroup_metadata' has no "
                              "argument 'pd' (did you mean 'pod'?)")


class Misspelt:
    @hookimpl
    def kai_job_ordr(self, left, right):
        return None


class OptionalExtra:
    @hookimpl(optionalhook=True)
    def kai_job_ordr(self, left, right):
        return None

    @hookimpl
    def kai_job_order(self, left, right):
        return None


def test_an_unknown_hook_is_an_error_without_a_distribution_too_unless_it_is_optional():
    with pytest.raises(PluginError, match=r"plugin 'mine' \(\?\) implements unknown hook 'kai_job_ordr' "
                                          r"\(did you mean 'kai_job_order'\?\)"):
        kt.plugin_manager(["predicates", "mine"], extra_plugins={"mine": lambda a: Misspelt()})
    assert kt.plugin_manager(["mine"], extra_plugins={"mine": lambda a: OptionalExtra()}).names == ["mine"]


def test_a_podgrouper_given_built_with_an_unknown_hook_is_an_error():
    with pytest.raises(PluginError, match=r"podgrouper 'mine' \(\?\) implements unknown hook 'kai_job_ordr'"):
        ktp.hub(plugins={"mine": Misspelt()})


class MisspeltArgument:
    @hookimpl
    def kai_job_order(self, left, rigth):
        return None


class UnlikeArgument:
    @hookimpl(specname="kai_task_order")
    def order_by_label(self, session, left, tasks):
        return None


def test_an_unknown_hook_argument_is_an_error_without_a_distribution_too():
    with pytest.raises(PluginError, match=r"^plugin 'mine' \(\?\): hook 'kai_job_order' has no argument 'rigth' "
                                          r"\(did you mean 'right'\?\)$"):
        kt.plugin_manager(["predicates", "mine"], extra_plugins={"mine": lambda a: MisspeltArgument()})
    with pytest.raises(PluginError, match=r"^plugin 'mine' \(\?\): hook 'kai_task_order' has no argument 'tasks'$"):
        kt.plugin_manager(["mine"], extra_plugins={"mine": lambda a: UnlikeArgument()})
    with pytest.raises(PluginError, match=r"^podgrouper 'mine' \(\?\): hook 'kai_job_order' has no argument 'rigth'"):
        ktp.hub(plugins={"mine": MisspeltArgument()})


def test_a_podgrouper_name_claimed_by_two_distributions_is_an_error(install):
    install("kai-other-job", f"[kai.podgroupers]\njob = {MODULE}:build_grouper\n")
    with pytest.raises(PluginError, match=r"plugin name 'job' in group kai.podgroupers is claimed by two "
                                          r"distributions: .*kai-other-job 1.2"):
        ktp.hub()


def test_a_podgrouper_rejecting_its_arguments_is_an_error_naming_it():
    with pytest.raises(PluginError, match=r"podgrouper 'skiptopowner': invalid arguments \{'table': \[\{\}\]\}: "):
        ktp.hub(arguments={"skiptopowner": {"table": [{}]}})


def _ep(name, value, dist, version="1.0"):
    return SimpleNamespace(name=name, value=value, dist=SimpleNamespace(name=dist, version=version))


def test_two_distributions_claiming_one_name_names_both(monkeypatch):
    eps = [_ep("fair", "alpha_sched:build", "alpha-sched"), _ep("fair", "beta_sched.fair:build", "beta-sched", "2.1")]
    monkeypatch.setattr(plugin_loader, "entry_points", lambda group: eps)
    with pytest.raises(PluginError) as err:
        discover()
    msg = str(err.value)
    assert "'fair'" in msg and "alpha-sched 1.0 (alpha_sched:build)" in msg
    assert "beta-sched 2.1 (beta_sched.fair:build)" in msg


def test_the_same_entry_point_seen_twice_is_not_a_conflict(monkeypatch):
    eps = [_ep("fair", "alpha_sched:build", "alpha-sched"), _ep("fair", "alpha_sched:build", "alpha-sched")]
    monkeypatch.setattr(plugin_loader, "entry_points", lambda group: eps)
    assert list(discover()) == ["fair"]


def test_unloadable_plugin_names_its_distribution():
    class BrokenEntryPoint(SimpleNamespace):
        def load(self):
            raise ImportError("no module named cuda_magic")

    available = {"magic": BrokenEntryPoint(name="magic", value="magic:build",
                                           dist=SimpleNamespace(name="magic-sched", version="0.3"))}
    with pytest.raises(PluginError, match=r"plugin 'magic' \(magic-sched 0.3\): cannot load magic:build"):
        plugin_loader.build_plugin("magic", {}, available)


def test_binder_plugins_are_found_through_their_entry_point_group(install):
    install("kai-recorder-binder", f"[kai.binder_plugins]\nrecorder = {MODULE}:build_recorder\n")
    found = discover(BINDER_PLUGIN_GROUP)
    assert found["gpusharing"].value == "kai.binder.gpusharing:build"
    assert found["recorder"].dist.name == "kai-recorder-binder"
    kube = object()
    (plugin,) = build_plugins(["recorder"], {"recorder": {"level": 3}}, kube)
    assert (plugin.arguments, plugin.kube) == ({"level": 3}, kube)


def test_the_binder_runs_installed_binder_plugins_by_priority_with_their_arguments(install):
    from kai.metrics import Registry
    from kai.run import COMPONENTS, Context, _parser

    install("kai-recorder-binder", f"[kai.binder_plugins]\nrecorder = {MODULE}:build_recorder\n")

    def binder_plugins(config: str) -> list:
        args = _parser().parse_args(["--binder-plugins", config])
        binder = COMPONENTS["binder"](Context(args, SchedulerConfig(("allocate",), ()), NoKube(), Registry()))
        return binder.plugins

    first = binder_plugins('{"recorder": {"priority": 150, "arguments": {"level": "3"}}}')
    assert [p.name for p in first] == ["volumebinding", "dynamicresources", "recorder", "gpusharing"]
    assert first[2].arguments == {"level": "3"}
    assert [p.name for p in binder_plugins('{"recorder": {}}')] == [
        "volumebinding", "dynamicresources", "gpusharing", "recorder"]  # KAI: priority 0
    assert [p.name for p in binder_plugins('{"recorder": {"priority": 100}}')] == [
        "volumebinding", "dynamicresources", "gpusharing", "recorder"]  # by name


class NoKube:
    api_client = None
    timeout = 30.0


def test_a_binder_plugin_name_claimed_by_two_distributions_is_an_error(install):
    install("kai-other-gpusharing", f"[kai.binder_plugins]\ngpusharing = {MODULE}:build_recorder\n")
    with pytest.raises(PluginError, match=r"plugin name 'gpusharing' in group kai.binder_plugins is claimed by two "
                                          r"distributions: .*kai-other-gpusharing 1.2"):
        discover(BINDER_PLUGIN_GROUP)


def test_kai_scheduler_plugins_lists_binder_plugins(install, capsys):
    install("kai-recorder-binder", f"[kai.binder_plugins]\nrecorder = {MODULE}:build_recorder\n")
    assert list_main([]) == 0
    out = capsys.readouterr().out
    listing = out[out.index("binder plugins (5):"):].splitlines()
    ours = ["gpusharing", "kai-scheduler", version("kai-scheduler"), "kai.binder.gpusharing:build"]
    assert listing[2].split() == ours
    assert listing[4].split() == ["recorder", "kai-recorder-binder", "1.2", f"{MODULE}:build_recorder"]
