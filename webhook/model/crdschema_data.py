"""The fields of the CRDs autowrap judges, generated from their structural schemas; do not edit.

Regenerate with ``python -m tools.crd_schema`` (the CRDs are read from ../shared/crds; see
tools/crd_schema.py). ``NODES`` holds one object schema a line, ``ID field:TYPE ...``; a TYPE
is ``-`` (a scalar), ``*`` (anything: not judged here), ``s`` (a string), an ID, ``[TYPE]`` (a
list) or ``{TYPE}`` (a map). ``ROOTS`` gives the node of each ``apiVersion kind``, ``SERVED``
the versions each ``group kind`` serves, ``OBJECT_META`` the node of a root ``metadata``.
"""

OBJECT_META = 0

ROOTS = {
    "batch.volcano.sh/v1alpha1 Job": 20,
    "workload.codeflare.dev/v1beta2 AppWrapper": 30,
}

SERVED = {
    "batch.volcano.sh Job": ("v1alpha1",),
    "workload.codeflare.dev AppWrapper": ("v1beta2",),
}

NODES = """
0 annotations:{s} creationTimestamp:* deletionGracePeriodSeconds:* deletionTimestamp:* finalizers:* generateName:* generation:* labels:{s} managedFields:* name:* namespace:* ownerReferences:* resourceVersion:* selfLink:* uid:*
1 highestTierAllowed:- highestTierName:s mode:s
2 action:s event:s events:[s] exitCode:- timeout:s
3 iteration:s name:[s]
4 minPartitions:- networkTopology:1 partitionSize:- totalPartitions:-
5 annotations:{s} finalizers:[s] labels:{s} name:s namespace:s
6 metadata:5 spec:*
7 dependsOn:3 maxRetry:- minAvailable:- name:s partitionPolicy:4 policies:[2] replicas:- template:6 topologyPolicy:s
8 apiGroup:s kind:s name:s
9 apiGroup:s kind:s name:s namespace:s
10 limits:{-} requests:{-}
11 key:s operator:s values:[s]
12 matchExpressions:[11] matchLabels:{s}
13 accessModes:[s] dataSource:8 dataSourceRef:9 resources:10 selector:12 storageClassName:s volumeAttributesClassName:s volumeMode:s volumeName:s
14 mountPath:s volumeClaim:13 volumeClaimName:s
15 maxRetry:- minAvailable:- minSuccess:- networkTopology:1 plugins:{[s]} policies:[2] priorityClassName:s queue:s runningEstimate:s schedulerName:s tasks:[7] ttlSecondsAfterFinished:- volumes:[14]
16 lastTransitionTime:s status:s
17 lastTransitionTime:s message:s phase:s reason:s
18 phase:{-}
19 conditions:[16] controlledResources:{s} failed:- minAvailable:- pending:- retryCount:- running:- runningDuration:s state:17 succeeded:- taskStatusCount:{18} terminating:- unknown:- version:-
20 apiVersion:s kind:s metadata:0 spec:15 status:19
21 name:s
22 effect:s key:s operator:s tolerationSeconds:- value:s
23 annotations:{s} labels:{s} nodeSelector:{s} schedulingGates:[21] tolerations:[22]
24 annotations:{s} path:s replicas:-
25 annotations:{s} podSetInfos:[23] podSets:[24] template:*
26 components:[25] managedBy:s suspend:-
27 lastTransitionTime:s message:s observedGeneration:- reason:s status:s type:s
28 apiVersion:s conditions:[27] kind:s name:s podSets:[24]
29 componentStatus:[28] conditions:[27] phase:s resettingCount:-
30 apiVersion:s kind:s metadata:0 spec:26 status:29
"""
