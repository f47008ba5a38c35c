"""The Synapse large template's settings come out exactly as Synapse documents them; a template written back as
YAML loads as itself."""
import json
import shlex

import pytest
import yaml

from pooltemplates import load_template, packaged_templates, render
from pooltemplates.structure import template_data

SYNAPSE_GPU_LARGE = {
    "driverMemory": "30g",
    "driverCores": 4,
    "executorMemory": "60g",
    "executorCores": 12,
    "numExecutors": 3,
    "conf": {
        "spark.rapids.memory.gpu.reserve": "10g",
        "spark.executorEnv.TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "spark.kryoserializer.buffer.max": "2000m",
    },
}


def test_synapse_large_configure_cell_round_trips_unchanged() -> None:
    cell = render(load_template("synapse-gpu-large"), "synapse")
    magic, _, body = cell.partition("\n")
    assert magic == "%%configure -f"
    assert json.loads(body) == SYNAPSE_GPU_LARGE


def test_synapse_minimal_configure_cell() -> None:
    body = render(load_template("synapse-gpu-minimal"), "synapse").partition("\n")[2]
    assert json.loads(body) == {"numExecutors": 3,
                                "conf": {"spark.rapids.memory.gpu.reserve": "10g"}}


def test_spark_submit_args_parse_back_to_the_spark_conf() -> None:
    template = load_template("synapse-gpu-large", {"executor.env.MESSAGE": "it's a 'test'"})
    words = shlex.split(render(template, "spark-submit"))
    assert words[0::2] == ["--conf"] * (len(words) // 2)
    assert dict(word.split("=", 1) for word in words[1::2]) == template.spark_conf()


def test_spark_defaults_parse_back_to_the_spark_conf() -> None:
    template = load_template("synapse-gpu-large")
    lines = render(template, "spark-defaults").splitlines()
    parsed = dict(line.split(None, 1) for line in lines if not line.startswith("#"))
    assert parsed == template.spark_conf()


@pytest.mark.parametrize("name", packaged_templates())
def test_template_data_as_yaml_loads_back_as_the_same_template(name: str, tmp_path) -> None:
    template = load_template(name, {"executor.env.MESSAGE": "it's a 'test'"})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(template_data(template)))
    assert load_template(str(path)) == template
