"""The pool runner's options, checked before any docker call: each bad one named with what would do."""
import pytest

from pooltemplates import TemplateError
from trainstack.clusters.containers import ClusterError
from trainstack.clusters.pool import pool_plan


def test_plan_has_one_master_and_the_asked_workers_with_host_ports() -> None:
    plan = pool_plan(workers=3, name="ci-pool", master_port=17077, ui_port=18080)
    assert [worker["name"] for worker in plan["workers"]] == [f"ci-pool-worker-{n}" for n in (1, 2, 3)]
    assert [(port["container"], port["host"]) for port in plan["master"]["ports"]] == [(7077, 17077),
                                                                                      (8080, 18080)]
    assert plan["master_url"] == {"host": "spark://127.0.0.1:17077", "network": "spark://ci-pool-master:7077"}
    assert plan["ui_url"] == "http://127.0.0.1:18080"
    assert plan["spark_conf"]["spark.executor.instances"] == "3"


@pytest.mark.parametrize(("options", "message"), [
    ({"workers": 0}, "--workers = 0: must be at least 1 (valid: a whole number >= 1)"),
    ({"gpus": "amd"}, "--gpus = 'amd': is not a GPU mode (valid: placeholder or nvidia)"),
    ({"name": "my pool"}, "--name = 'my pool': is not a docker name"),
    ({"ui_port": 70000}, "--ui-port = 70000: is not a TCP port (valid: 1 to 65535)"),
    ({"master_port": 9000, "ui_port": 9000}, "--ui-port = 9000: is the same port as --master-port"),
])
def test_bad_options_name_the_option_and_what_is_valid(options: dict, message: str) -> None:
    with pytest.raises(ClusterError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        pool_plan(**options)


def test_unknown_template_names_the_option_and_lists_templates() -> None:
    with pytest.raises(TemplateError) as caught:
        pool_plan(template="tiny-pool")
    assert "--template = 'tiny-pool': is neither a packaged template" in str(caught.value)
    assert "local-pool" in str(caught.value)
