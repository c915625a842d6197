"""The ``kai-scheduler`` command: argument parsing only; every subcommand lives in its own module.

Each entry of :data:`SUBCOMMANDS` names ``module:function``; the function takes the remaining
arguments (a list of strings) and returns the exit code. Modules are imported only when their
subcommand runs, so ``kai-scheduler simulate`` never loads the Kubernetes client. A malformed input
file (:class:`~kai.common.errors.ConfigError`) that a subcommand does not report itself ends in exit
code 2 and one line on stderr; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:function", one-line help)
    "simulate": ("kai.sim.simulate:main", "run the scheduler on an in-memory cluster described in YAML"),
    "fairshare": ("kai.sim.fairshare:main", "show each queue's fair share and the rule that bounded it"),
    "explain": ("kai.sim.explain:main", "why a pod or PodGroup is pending and what would make it run"),
    "conformance": ("kai.sim.conformance:main", "replay KAI conformance scenarios through the kernel"),
    "replay": ("kai.sim.replay.cli:main", "replay a GPU cluster trace through the scheduler (FGD paper's procedure)"),
    "bench": ("kai.sim.bench:main", "time scheduling actions on scenario files"),
    "crds": ("kai.kube.crds:main", "create or upgrade KAI's CRDs in a cluster (apply)"),
    "run": ("kai.run:main", "run the scheduler's components against a Kubernetes API server"),
    "dev-cluster": ("kai.dev.cli:main",
                    "a local control plane (etcd, kube-apiserver, kwok): build|up|down|env|status"),
    "plugins": ("kai.framework.plugins:list_main",
                "list installed plugins, podgroupers and binder plugins with their distributions"),
    "podgroup": ("kai.sim.podgroup:main", "print the PodGroup the podgroupers would create for pods in a YAML file"),
}


def _usage() -> str:
    lines = ["usage: kai-scheduler SUBCOMMAND [ARGS...]", "", "subcommands:"]
    width = max((len(n) for n in SUBCOMMANDS), default=0)
    for name, (_, help_text) in sorted(SUBCOMMANDS.items()):
        lines.append(f"  {name.ljust(width)}  {help_text}")
    lines.append("")
    lines.append("Run 'kai-scheduler SUBCOMMAND --help' for the options of one subcommand.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    if args[0] == "--version":
        from kai import __version__

        print(f"kai-scheduler {__version__}")
        return 0
    entry = SUBCOMMANDS.get(args[0])
    if entry is None:
        print(f"kai-scheduler: unknown subcommand {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name = entry[0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    from kai.common.errors import ConfigError
    from kai.common.yamlfile import one_line

    try:
        return func(args[1:])
    except BrokenPipeError:  # output piped into a command that stopped reading (head, less)
        sys.stderr.close()
        return 0
    except ConfigError as exc:
        print(f"kai-scheduler {args[0]}: {one_line(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
