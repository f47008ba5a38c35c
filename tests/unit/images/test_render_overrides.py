"""`invoke render --set` replaces the flavor's folder, build/FLAVOR/, which `invoke build` and every other render use:
the folder then names the overrides it holds, the task says so and how to render the matrix's own again."""
from invoke import Context

from trainstack.image import build
from trainstack.tasks import images


def test_a_render_with_set_names_its_overrides_and_the_way_back(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(build, "BUILD_DIR", tmp_path)
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "cpu"
    images.render(Context(), set=["horovod=0.28.0"])
    out, err = capsys.readouterr()
    assert out == f"{folder / 'Dockerfile'}\n"
    assert err == ("cpu/ holds the flavor with --set horovod=0.28.0 (listed in RENDERED_WITH_OVERRIDES); `invoke "
                   "render` renders the matrix's own again\n")
    assert (folder / images.RENDERED_WITH).read_text().splitlines()[1:] == ["--set horovod=0.28.0"]
    assert "horovod==0.28.0" in (folder / "Dockerfile").read_text()
    images.render(Context(), set=[])
    assert capsys.readouterr() == (f"{folder / 'Dockerfile'}\n", "")
    assert not (folder / images.RENDERED_WITH).exists()
    assert "horovod==0.28.1" in (folder / "Dockerfile").read_text()
