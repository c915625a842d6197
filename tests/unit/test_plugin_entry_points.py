"""Plugins and podgroupers installed from a distribution: their hooks are checked against the specs."""

from __future__ import annotations

import sys
import zipfile

import pytest

from kai import hookimpl
from kai import testing as kt
from kai import testing_podgroupers as ktp
from kai.api.podgroup import GroupingError
from kai.framework import PluginError, PluginSpec, Plugins, SchedulerConfig
from kai.framework.plugins import discover
from kai.grouping import hub as hub_module
from support.wheel import wheel

MODULE = "kai_typo_test_plugins"

SOURCE = '''
from kai import hookimpl


class Scores:
    @hookimpl
    def kai_node_score(self, task, nodes):
        return [1.0 for _ in nodes]


class Grouper:
    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("example.com", "v1", "Sweep")]

    @hookimpl
    def kai_podgroup_metdata(self, hub, top_owner, pod, owners):
        return hub.default_metadata(top_owner, pod)


def build_scores(arguments):
    return Scores()


def build_grouper(arguments):
    return Grouper()
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

    hub_module._installed_podgroupers.cache_clear()
    yield install
    hub_module._installed_podgroupers.cache_clear()


def test_a_plugin_implementing_an_unknown_hook_fails_to_load_naming_its_distribution(install):
    install("kai-typo-plugins", f"[kai.plugins]\nscores = {MODULE}:build_scores\n")
    config = SchedulerConfig(("allocate",), (PluginSpec("predicates"), PluginSpec("scores")))
    with pytest.raises(PluginError) as err:
        Plugins(config, discover())
    assert str(err.value) == ("plugin 'scores' (kai-typo-plugins 1.2) implements unknown hook 'kai_node_score' "
                              "(did you mean 'kai_node_scores'?)")


def test_a_podgrouper_implementing_an_unknown_hook_fails_to_load_naming_its_distribution(install):
    install("kai-typo-podgroupers", f"[kai.podgroupers]\nsweep = {MODULE}:build_grouper\n")
    with pytest.raises(GroupingError) as err:
        ktp.hub()
    assert str(err.value) == ("podgrouper 'sweep' (kai-typo-podgroupers 1.2) implements unknown hook "
                              "'kai_podgroup_metdata' (did you mean 'kai_podgroup_metadata'?)")


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
    with pytest.raises(GroupingError, match=r"podgrouper 'mine' \(\?\) implements unknown hook 'kai_job_ordr'"):
        ktp.hub(plugins={"mine": Misspelt()})
