"""kwok's pod stages for pods that run until they are deleted, as a real kubelet runs ``sleep infinity``.

kwok's built-in pod stages make a bound pod Running, complete the pods Jobs own at once, and remove
deleted pods. :data:`RUN_UNTIL_DELETED` is the first and the last of them: given in kwok's
configuration they replace the built-in ones, so Job pods keep their node and its resources until
they are deleted, as on KAI's kind clusters. Only a pod that asks for it in kwok's own annotation
(:data:`COMPLETE_DELAY_ANNOTATION`, a duration such as ``2m``) completes, that long after it turned
Running, as knavigator's benchmark workloads ask.
"""

from __future__ import annotations

_POD = {"apiGroup": "v1", "kind": "Pod"}

#: How long after turning Running a pod completes; without it a pod runs until it is deleted.
COMPLETE_DELAY_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
#: The longest such delay, when longer: kwok picks one at random in between.
COMPLETE_JITTER_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"

_READY_STATUS = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) \
( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""


_COMPLETED_STATUS = """\
{{ $now := Now }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Succeeded
"""


def _stage(name: str, expressions: list[dict], next_: dict, delay: dict | None = None) -> dict:
    spec = {"resourceRef": _POD, "selector": {"matchExpressions": expressions}, "next": next_}
    if delay is not None:
        spec["delay"] = delay
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _annotation(key: str) -> str:
    return f'.metadata.annotations["{key}"]'


#: A bound pod becomes Running and Ready (and stays so, unless it carries
#: :data:`COMPLETE_DELAY_ANNOTATION`: then it completes after that delay); a deleted pod is removed.
RUN_UNTIL_DELETED = (
    _stage("pod-ready", [{"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                         {"key": ".status.podIP", "operator": "DoesNotExist"}],
           {"statusTemplate": _READY_STATUS}),
    _stage("pod-complete", [{"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                            {"key": _annotation(COMPLETE_DELAY_ANNOTATION), "operator": "Exists"}],
           {"statusTemplate": _COMPLETED_STATUS},
           {"durationFrom": {"expressionFrom": _annotation(COMPLETE_DELAY_ANNOTATION)},
            "jitterDurationFrom": {"expressionFrom": _annotation(COMPLETE_JITTER_ANNOTATION)}}),
    _stage("pod-delete", [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
           {"finalizers": {"empty": True}, "delete": True}),
)
