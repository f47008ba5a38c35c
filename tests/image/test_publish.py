"""`invoke push` of the built image to a real registry (Debian's docker-registry, TLS from a test CA, basic auth),
its SBOM read back from the registry without pulling the image, then `docker pull` by its immutable tag and by
digest into a throwaway second dockerd that holds no layer, where `trainrun doctor` and a 2-rank training run in the
pulled image. The main daemon's images and build cache stay.
The refusals (credentials, a registry down, unknown tags, a moving immutable tag):
tests/integration/test_registry_push_pull.py.
"""
import json

import pytest
from registries import push_and_pull

from trainrun.image_contract import MANIFEST_PATH, SBOM_PATH
from trainstack.image.naming import image_reference, image_tags

# ./dev test (CI) leaves it out: pushing and pulling the 3.4 GB cpu image takes minutes. `invoke test --long` runs it.
pytestmark = pytest.mark.long


def test_push_then_pull_on_a_daemon_holding_nothing(in_image, image, image_flavor, tmp_path):
    expected_tags = image_tags(json.loads(in_image.run(["cat", MANIFEST_PATH])), image.labels)
    run = push_and_pull("trainstack", image_flavor.name, tmp_path)
    registry = run.pushed.references[0].partition("/")[0]
    assert run.pushed.references == [image_reference("trainstack", tag, registry) for tag in expected_tags]
    assert len(expected_tags) == 3 and expected_tags[0].startswith(f"{expected_tags[1]}-")
    assert run.repushed == run.pushed
    # The SBOM artifact beside the image is the image's own SBOM, read without pulling the image.
    assert run.sbom[0] == f"{run.pushed.digest_reference} (the SBOM artifact referring to it)"
    assert run.sbom[1] == json.loads(in_image.run(["cat", SBOM_PATH]))
    assert run.images_before_pull == 0
    assert run.by_tag.reference == run.pushed.references[0]
    assert run.by_digest.reference == run.pushed.digest_reference
    assert run.by_tag.image_id == run.by_digest.image_id == image.id
    assert run.by_tag.layer_bytes > 10**9
    assert run.doctor[0] == 0 and "ready to train" in run.doctor[1], run.doctor[1][-3000:]
    assert run.training[0] == 0, run.training[1][-3000:]
    assert '"ranks": 2' in run.training[1]
