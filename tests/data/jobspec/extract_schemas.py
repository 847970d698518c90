"""How the two schema files beside this one were made (see SOURCE.md); not run by the tests.

    python extract_schemas.py jobset jobset.x-k8s.io_jobsets.yaml jobset-v0.12.0-openapiv3.json
    python extract_schemas.py skypilot UNPACKED_SKYPILOT_WHEEL skypilot-0.14.1-task-schema.json

jobset: the CRD's one version's openAPIV3Schema, its `description` strings left out (they are four fifths of
the file and validate nothing). skypilot: sky/utils/schemas.py's get_task_schema() and get_resources_schema()
as SkyPilot's client builds them. The sky package's __init__ imports the whole client, so its packages are
created empty and only what schemas.py needs is loaded: sky.skylet.constants (plain values),
sky.utils.kubernetes_enums (enums) and the AutostopWaitFor enum of sky/skylet/autostop_lib.py. The task
schema's `config:` block (the whole ~/.sky/config.yaml schema, filtered) is replaced by {"type": "object"}.
"""
import enum
import json
import os
import re
import sys
import types


def jobset(crd_path: str) -> dict:
    import yaml

    crd = yaml.safe_load(open(crd_path))
    (version,) = crd["spec"]["versions"]

    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if not (k == "description" and isinstance(v, str))}
        return [strip(v) for v in o] if isinstance(o, list) else o

    return strip(version["schema"]["openAPIV3Schema"])


def skypilot(root: str) -> dict:
    for name in ("sky", "sky.skylet", "sky.utils", "sky.setup_files"):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = module
    info = [p for p in os.listdir(root) if p.endswith(".dist-info")][0]
    meta = open(os.path.join(root, info, "METADATA")).read()
    version = re.search(r"^Version: (.+)$", meta, re.M).group(1)
    sys.modules["sky"].__version__ = version
    source = open(os.path.join(root, "sky", "skylet", "autostop_lib.py")).read()
    body = re.search(r"(class AutostopWaitFor\(enum.Enum\):.*?)\n    @classmethod\n    def from_str", source, re.S)
    autostop = types.ModuleType("sky.skylet.autostop_lib")
    autostop.enum = enum
    exec(body.group(1).replace("-> List[str]", ""), autostop.__dict__)
    sys.modules["sky.skylet.autostop_lib"] = autostop
    from sky.utils import schemas

    schemas._task_config_schema = lambda: {"type": "object"}
    return {"skypilot_version": version, "task": schemas.get_task_schema(),
            "resources": schemas.get_resources_schema()}


if __name__ == "__main__":
    what, source, out = sys.argv[1:]
    data = jobset(source) if what == "jobset" else skypilot(source)
    with open(out, "w") as f:
        if what == "jobset":
            json.dump(data, f, sort_keys=True, separators=(",", ":"))
        else:
            json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
