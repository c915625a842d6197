"""Hooks of the eviction actions: kai_can_reclaim, kai_victim_filter, kai_scenario_validator,
kai_job_solution_start."""

import pytest

from kai import hookimpl
from kai import testing as kt
from kai.api import Reject

SPECS = {
    "kai_can_reclaim": (("session", "job"), True),
    "kai_victim_filter": (("session", "action", "preemptor", "victim"), True),
    "kai_scenario_validator": (("session", "action", "scenario"), True),
    "kai_job_solution_start": (("session", "job"), False),
}


class Everything:
    @hookimpl
    def kai_can_reclaim(self, session, job):
        return Reject("everything", "no")

    @hookimpl
    def kai_victim_filter(self, session, action, preemptor, victim):
        return Reject("everything", "no")

    @hookimpl
    def kai_scenario_validator(self, session, action, scenario):
        return Reject("everything", "no")

    @hookimpl
    def kai_job_solution_start(self, session, job):
        return None


@pytest.mark.parametrize("hook", sorted(SPECS))
def test_kai_eviction_hook_specs_keep_their_contract(hook):
    pm = kt.plugin_manager(["predicates", "all"], extra_plugins={"all": lambda a: Everything()}).pm
    caller = getattr(pm.hook, hook)
    args, firstresult = SPECS[hook]
    assert tuple(caller.spec.argnames) == args
    assert bool(caller.spec.opts.get("firstresult")) is firstresult
    assert [i.plugin_name for i in caller.get_hookimpls()] == ["all"]


def test_kai_can_reclaim_spec():
    test_kai_eviction_hook_specs_keep_their_contract("kai_can_reclaim")


def test_kai_victim_filter_spec():
    test_kai_eviction_hook_specs_keep_their_contract("kai_victim_filter")


def test_kai_scenario_validator_spec():
    test_kai_eviction_hook_specs_keep_their_contract("kai_scenario_validator")


def test_kai_job_solution_start_spec():
    test_kai_eviction_hook_specs_keep_their_contract("kai_job_solution_start")
