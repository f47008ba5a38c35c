import pytest
from workflow_checks import checkpoint_writers

from trainstack.image.workflows import summary


def test_summary_is_the_last_json_line():
    output = 'epoch 0 loss 1.9\n{"ranks": 1}\nnoise\n{"ranks": 2, "accuracy": 0.97}\nteardown\n'
    assert summary(output) == {"ranks": 2, "accuracy": 0.97}


def test_missing_summary_is_an_error():
    with pytest.raises(ValueError, match="no JSON summary"):
        summary("epoch 0 loss 1.9\n")


def test_checkpoint_writers_lists_ranks():
    assert checkpoint_writers("rank 0 wrote /tmp/c/model.pt\nother line\n") == ["rank 0"]
    assert checkpoint_writers("rank 0 wrote a\nrank 1 wrote a\n") == ["rank 0", "rank 1"]


@pytest.mark.parametrize("tag", ["[1,0]<stdout>:", "[0]<stdout>:", "[0] ", "[default0]:", "[rank 0] ", ""])
def test_rank_tags_of_every_launcher_are_read_through(tag):
    output = f"{tag}rank 0 wrote /tmp/c/model.pt\n{tag}{{\"ranks\": 2}}\n"
    assert checkpoint_writers(output) == ["rank 0"]
    assert summary(output) == {"ranks": 2}
