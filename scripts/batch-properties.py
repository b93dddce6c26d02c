"""Writes tests/data/batch_properties.json: the wire properties of the Azure Batch request bodies
as the official SDKs model them, with the JSON kind of each value, the union of azure-batch
15.1.0 and 14.2.0 (run it with each SDK's Python; each run adds its SDK's properties). The
compatibility test (tests/compat.rs) checks that every one of them either works or is refused.

    /tmp/batchpool-sdk/azure-batch-15.1.0/bin/python scripts/batch-properties.py
    /tmp/batchpool-sdk/azure-batch-14.2.0/bin/python scripts/batch-properties.py
"""
import json
import pathlib

import azure.batch.models as m

PATH = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "batch_properties.json"


def kind(text: str) -> str:
    """The JSON kind of a value from a model's annotation: an annotation object of 15.x
    ('typing.Optional[typing.List[...]]') or an msrest type string of 14.x ('[ResourceFile]')."""
    text = text.replace("typing.", "").replace("Optional[", "", 1)
    if text.startswith("<class '"):
        text = text[len("<class '"):].split("'")[0]
    if text.startswith(("List[", "list[", "[")):
        return "array"
    if text.startswith(("Dict[", "dict[", "{")):
        return "object"
    if text.startswith("Union[str"):
        return "string"  # an enum
    text = text.rstrip("]")
    scalars = {"bool": "boolean", "int": "integer", "long": "integer", "float": "number",
               "str": "string", "datetime.datetime": "string", "datetime.timedelta": "string",
               "iso-8601": "string", "duration": "string"}
    if text in scalars:
        return scalars[text]
    return "string" if text.endswith(("State", "Type", "Option", "Mode", "Scope", "Level")) and "[" not in text else "object"


def properties_15(model) -> dict:
    hints = {}
    for cls in reversed(model.__mro__):
        hints.update(getattr(cls, "__annotations__", {}))
    model.__new__(model)  # the SDK fills in the field map on first construction
    return {f._rest_name: kind(str(hints.get(attr, "object"))) for attr, f in model._attr_to_rest_field.items()}


def properties_14(model) -> dict:
    return {a["key"]: kind(a["type"]) for a in model._attribute_map.values()}


if hasattr(m, "BatchPoolCreateOptions"):
    sdk, read = "15.1.0", properties_15
    bodies = {"pool add": [m.BatchPoolCreateOptions], "job add": [m.BatchJobCreateOptions],
              "task add": [m.BatchTaskCreateOptions], "start task": [m.BatchStartTask],
              "pool patch": [m.BatchPoolUpdateOptions], "pool replace": [m.BatchPoolReplaceOptions],
              "pool resize": [m.BatchPoolResizeOptions], "job update": [m.BatchJobUpdateOptions],
              "exit conditions": [m.ExitConditions], "job preparation task": [m.BatchJobPreparationTask],
              "job release task": [m.BatchJobReleaseTask],
              "job manager task": [m.BatchJobManagerTask],
              "job schedule add": [m.BatchJobScheduleCreateOptions],
              "job schedule update": [m.BatchJobScheduleUpdateOptions],
              "schedule": [m.BatchJobScheduleConfiguration],
              "job specification": [m.BatchJobSpecification],
              "virtual machine configuration": [m.VirtualMachineConfiguration],
              "auto pool specification": [m.BatchAutoPoolSpecification],
              "pool specification": [m.BatchPoolSpecification]}
else:
    sdk, read = "14.2.0", properties_14
    bodies = {"pool add": [m.PoolAddParameter], "job add": [m.JobAddParameter], "task add": [m.TaskAddParameter],
              "start task": [m.StartTask], "pool patch": [m.PoolPatchParameter],
              "pool replace": [m.PoolUpdatePropertiesParameter], "pool resize": [m.PoolResizeParameter],
              "job update": [m.JobPatchParameter, m.JobUpdateParameter], "task update": [m.TaskUpdateParameter],
              "exit conditions": [m.ExitConditions], "job preparation task": [m.JobPreparationTask],
              "job release task": [m.JobReleaseTask],
              "job manager task": [m.JobManagerTask],
              "job schedule add": [m.JobScheduleAddParameter],
              "job schedule update": [m.JobSchedulePatchParameter, m.JobScheduleUpdateParameter],
              "schedule": [m.Schedule],
              "job specification": [m.JobSpecification],
              "virtual machine configuration": [m.VirtualMachineConfiguration],
              "auto pool specification": [m.AutoPoolSpecification],
              "pool specification": [m.PoolSpecification]}

doc = json.loads(PATH.read_text()) if PATH.exists() else {"sdks": [], "bodies": {}}
doc["sdks"] = sorted(set(doc["sdks"]) | {f"azure-batch {sdk}"})
for name, models in bodies.items():
    merged = doc["bodies"].setdefault(name, {})
    for model in models:
        for prop, k in read(model).items():
            merged.setdefault(prop, k)
    doc["bodies"][name] = dict(sorted(merged.items()))
PATH.write_text(json.dumps(doc, indent=2) + "\n")
print(f"{PATH}: " + ", ".join(f"{k} {len(v)}" for k, v in doc["bodies"].items()))
